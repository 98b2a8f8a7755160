package pvesim

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"strings"
	"time"
)

// certBundle holds the per-cluster CA and one certificate per node, as Proxmox keeps
// them (pve-root-ca.pem signs every node's pve-ssl.pem). The served certificate is the
// first node's.
type certBundle struct {
	identity    string // random OU of the CA subject
	caPEM       []byte
	nodes       map[string]*nodeCert
	served      tls.Certificate
	fingerprint string
}

type nodeCert struct {
	pem         string
	fingerprint string
	subject     string
	issuer      string
	san         []string
	notBefore   time.Time
	notAfter    time.Time
	bits        int
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// fingerprintOf formats the SHA-256 of a DER certificate as Proxmox does: "AB:CD:...".
func fingerprintOf(der []byte) string {
	sum := sha256.Sum256(der)
	parts := make([]string, len(sum))
	for i, b := range sum {
		parts[i] = fmt.Sprintf("%02X", b)
	}
	return strings.Join(parts, ":")
}

func dnString(n pkix.Name) string {
	// Proxmox prints subjects OpenSSL-style: "/CN=.../OU=.../O=..."
	var b strings.Builder
	if n.CommonName != "" {
		b.WriteString("/CN=" + n.CommonName)
	}
	for _, ou := range n.OrganizationalUnit {
		b.WriteString("/OU=" + ou)
	}
	for _, o := range n.Organization {
		b.WriteString("/O=" + o)
	}
	return b.String()
}

func newCertBundle(nodes []string, host string) (*certBundle, error) {
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("ca key: %w", err)
	}
	now := time.Now()
	b := &certBundle{identity: randomHex(16), nodes: map[string]*nodeCert{}}
	caSubject := pkix.Name{
		CommonName:         "Proxmox Virtual Environment",
		OrganizationalUnit: []string{b.identity},
		Organization:       []string{"PVE Cluster Manager CA"},
	}
	caTmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               caSubject,
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.AddDate(10, 0, 0),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return nil, fmt.Errorf("ca certificate: %w", err)
	}
	caCert, err := x509.ParseCertificate(caDER)
	if err != nil {
		return nil, fmt.Errorf("ca certificate: %w", err)
	}
	b.caPEM = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER})

	for i, node := range nodes {
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			return nil, fmt.Errorf("node key: %w", err)
		}
		subject := pkix.Name{CommonName: node + ".local", OrganizationalUnit: []string{"PVE Cluster Node"}, Organization: []string{"Proxmox Virtual Environment"}}
		tmpl := &x509.Certificate{
			SerialNumber: big.NewInt(int64(i + 2)),
			Subject:      subject,
			NotBefore:    now.Add(-time.Hour),
			NotAfter:     now.AddDate(2, 0, 0),
			KeyUsage:     x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
			ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
			DNSNames:     []string{"localhost", node, node + ".local"},
			IPAddresses:  []net.IP{net.ParseIP("127.0.0.1"), net.ParseIP("::1")},
		}
		if ip := net.ParseIP(host); ip != nil && !ip.IsLoopback() && !ip.IsUnspecified() {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, caCert, &key.PublicKey, caKey)
		if err != nil {
			return nil, fmt.Errorf("node certificate: %w", err)
		}
		san := append([]string(nil), tmpl.DNSNames...)
		for _, ip := range tmpl.IPAddresses {
			san = append(san, ip.String())
		}
		nc := &nodeCert{
			pem:         string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})),
			fingerprint: fingerprintOf(der),
			subject:     dnString(subject),
			issuer:      dnString(caSubject),
			san:         san,
			notBefore:   tmpl.NotBefore,
			notAfter:    tmpl.NotAfter,
			bits:        256,
		}
		b.nodes[node] = nc
		if i == 0 {
			b.served = tls.Certificate{Certificate: [][]byte{der, caDER}, PrivateKey: key}
			b.fingerprint = nc.fingerprint
		}
	}
	return b, nil
}
