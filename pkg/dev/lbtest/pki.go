package lbtest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/flexplane/flexplane/pkg/loadbalancer/lbconfig"
)

// PKI is the admin API's mutual TLS for tests: one CA, valid for a day,
// that signs a replica's server certificate (for lbconfig's
// DefaultServerName, localhost and loopback) and an orchestrator's client
// certificate, written as PEM files in a directory of the test.
type PKI struct {
	// Server are a replica's files: its certificate and key, and the CA
	// of client certificates.
	Server lbconfig.TLSFiles
	// Client are the orchestrator's files: its client certificate and
	// key, and the CA of replicas' certificates.
	Client lbconfig.TLSFiles
}

// NewPKI makes a CA and its two certificates for t.
func NewPKI(t testing.TB) *PKI {
	t.Helper()
	dir := t.TempDir()
	caKey, caDER := issue(t, &x509.Certificate{Subject: pkix.Name{CommonName: "flexgateway admin test CA"}, IsCA: true,
		BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}, nil, nil)
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		t.Fatal(err)
	}
	write := func(name string, blockType string, der []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, pem.EncodeToMemory(&pem.Block{Type: blockType, Bytes: der}), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	caFile := write("ca.crt", "CERTIFICATE", caDER)
	pair := func(name string, tmpl *x509.Certificate) (certFile, keyFile string) {
		key, der := issue(t, tmpl, ca, caKey)
		kb, err := x509.MarshalPKCS8PrivateKey(key)
		if err != nil {
			t.Fatal(err)
		}
		return write(name+".crt", "CERTIFICATE", der), write(name+".key", "PRIVATE KEY", kb)
	}
	p := &PKI{}
	p.Server.CertFile, p.Server.KeyFile = pair("server", &x509.Certificate{Subject: pkix.Name{CommonName: lbconfig.DefaultServerName},
		DNSNames: []string{lbconfig.DefaultServerName, "localhost"}, IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback},
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}})
	p.Client.CertFile, p.Client.KeyFile = pair("client", &x509.Certificate{Subject: pkix.Name{CommonName: "orchestrator"},
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}})
	p.Server.CAFile, p.Client.CAFile = caFile, caFile
	return p
}

// issue makes a key and a certificate of tmpl signed by parent (self-signed
// when parent is nil).
func issue(t testing.TB, tmpl, parent *x509.Certificate, parentKey *ecdsa.PrivateKey) (*ecdsa.PrivateKey, []byte) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 64))
	if err != nil {
		t.Fatal(err)
	}
	tmpl.SerialNumber, tmpl.NotBefore, tmpl.NotAfter = serial, time.Now().Add(-time.Hour), time.Now().Add(24*time.Hour)
	if parent == nil {
		parent, parentKey = tmpl, key
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, &key.PublicKey, parentKey)
	if err != nil {
		t.Fatal(err)
	}
	return key, der
}

// HTTP is an HTTP client presenting the client certificate and checking
// replicas' certificates against the CA (lbconfig.ClientTLS), with the
// given timeout (0: none).
func (p *PKI) HTTP(t testing.TB, timeout time.Duration) *http.Client {
	t.Helper()
	return &http.Client{Timeout: timeout, Transport: p.Transport(t)}
}

// Transport is HTTP's transport.
func (p *PKI) Transport(t testing.TB) *http.Transport {
	t.Helper()
	cfg, err := lbconfig.ClientTLS(p.Client)
	if err != nil {
		t.Fatal(err)
	}
	return &http.Transport{TLSClientConfig: cfg, ForceAttemptHTTP2: true}
}
