package controlplane

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"slices"
	"time"
)

// Lifetimes of what the Manager issues. Authorities outlive every leaf they
// sign and are never rotated; leaves are issued with the cluster and issued
// anew by the same authorities when a third of their lifetime is left (see
// renewal), not by an upgrade.
const (
	caLifetime   = 10 * 365 * 24 * time.Hour
	leafLifetime = 365 * 24 * time.Hour
	// clockSkew backdates every certificate so a peer whose clock is a
	// little behind accepts it at once.
	clockSkew = time.Minute
)

// authority is a certificate authority: its certificate and key.
type authority struct {
	cert    *x509.Certificate
	key     crypto.Signer
	certPEM []byte
	keyPEM  []byte
}

// newKey returns a new ECDSA P-256 key.
func newKey() (*ecdsa.PrivateKey, error) {
	return ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
}

func serial() (*big.Int, error) {
	return rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
}

func keyPEM(key crypto.Signer) ([]byte, error) {
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), nil
}

func certPEM(der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}

// newAuthority creates a self-signed certificate authority named cn.
func newAuthority(cn string, now time.Time) (*authority, error) {
	key, err := newKey()
	if err != nil {
		return nil, err
	}
	sn, err := serial()
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          sn,
		Subject:               pkix.Name{CommonName: cn},
		NotBefore:             now.Add(-clockSkew),
		NotAfter:              now.Add(caLifetime),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		return nil, err
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	kp, err := keyPEM(key)
	if err != nil {
		return nil, err
	}
	return &authority{cert: cert, key: key, certPEM: certPEM(der), keyPEM: kp}, nil
}

// parseAuthority reads an authority back from its PEM certificate and key.
func parseAuthority(crtPEM, kPEM []byte) (*authority, error) {
	cert, err := parseCertPEM(crtPEM)
	if err != nil {
		return nil, err
	}
	kb, _ := pem.Decode(kPEM)
	if kb == nil {
		return nil, errors.New("no PEM key")
	}
	var key any
	switch kb.Type {
	case "PRIVATE KEY":
		key, err = x509.ParsePKCS8PrivateKey(kb.Bytes)
	case "EC PRIVATE KEY":
		key, err = x509.ParseECPrivateKey(kb.Bytes)
	case "RSA PRIVATE KEY":
		key, err = x509.ParsePKCS1PrivateKey(kb.Bytes)
	default:
		err = fmt.Errorf("unknown PEM key type %q", kb.Type)
	}
	if err != nil {
		return nil, err
	}
	signer, ok := key.(crypto.Signer)
	if !ok {
		return nil, errors.New("key cannot sign")
	}
	return &authority{cert: cert, key: signer, certPEM: crtPEM, keyPEM: kPEM}, nil
}

// leaf is what a certificate signed by an authority says.
type leaf struct {
	cn       string
	orgs     []string
	dns      []string
	ips      []net.IP
	server   bool // serverAuth
	client   bool // clientAuth
	lifetime time.Duration
}

// issue signs a new leaf certificate and returns it and its key as PEM.
func (a *authority) issue(l leaf, now time.Time) (crt, key []byte, err error) {
	k, err := newKey()
	if err != nil {
		return nil, nil, err
	}
	sn, err := serial()
	if err != nil {
		return nil, nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: sn,
		Subject:      pkix.Name{CommonName: l.cn, Organization: l.orgs},
		DNSNames:     l.dns,
		IPAddresses:  l.ips,
		NotBefore:    now.Add(-clockSkew),
		NotAfter:     now.Add(l.lifetime),
		KeyUsage:     x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
	}
	if l.server {
		tmpl.ExtKeyUsage = append(tmpl.ExtKeyUsage, x509.ExtKeyUsageServerAuth)
	}
	if l.client {
		tmpl.ExtKeyUsage = append(tmpl.ExtKeyUsage, x509.ExtKeyUsageClientAuth)
	}
	if tmpl.NotAfter.After(a.cert.NotAfter) {
		tmpl.NotAfter = a.cert.NotAfter
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, a.cert, k.Public(), a.key)
	if err != nil {
		return nil, nil, err
	}
	kp, err := keyPEM(k)
	if err != nil {
		return nil, nil, err
	}
	return certPEM(der), kp, nil
}

// parseCertPEM parses the first PEM certificate of data.
func parseCertPEM(data []byte) (*x509.Certificate, error) {
	b, _ := pem.Decode(data)
	if b == nil || b.Type != "CERTIFICATE" {
		return nil, errors.New("no PEM certificate")
	}
	return x509.ParseCertificate(b.Bytes)
}

// renewal says why crt is to be issued anew as l by a at now: it has less
// than a third of its lifetime left, another authority signed it, or it
// does not say what l says (its name, organizations, DNS names or
// addresses: the endpoint's host changed). Empty when crt can stay.
func renewal(crt *x509.Certificate, a *authority, l leaf, now time.Time) string {
	if left, life := crt.NotAfter.Sub(now), crt.NotAfter.Sub(crt.NotBefore); 3*left < life {
		return fmt.Sprintf("expires %s, less than a third of its lifetime left", crt.NotAfter.UTC().Format(time.RFC3339))
	}
	if err := crt.CheckSignatureFrom(a.cert); err != nil {
		return fmt.Sprintf("not signed by %s: %v", a.cert.Subject.CommonName, err)
	}
	if crt.Subject.CommonName != l.cn || !slices.Equal(crt.Subject.Organization, l.orgs) {
		return fmt.Sprintf("subject %s, not CN=%s O=%v", crt.Subject, l.cn, l.orgs)
	}
	for _, d := range l.dns {
		if !slices.Contains(crt.DNSNames, d) {
			return "does not name " + d
		}
	}
	for _, ip := range l.ips {
		if !slices.ContainsFunc(crt.IPAddresses, ip.Equal) {
			return "does not name " + ip.String()
		}
	}
	return ""
}

// serviceAccountKey returns a new RSA key pair for signing service account
// tokens, as kubeadm keeps it: the private key and the PEM public key.
func serviceAccountKey() (pub, priv []byte, err error) {
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return nil, nil, err
	}
	pubDER, err := x509.MarshalPKIXPublicKey(key.Public())
	if err != nil {
		return nil, nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pubDER}),
		pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(key)}), nil
}
