package agent

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"testing"
	"time"
)

func TestClusterIdentity(t *testing.T) {
	t.Parallel()
	newCA := func(ou string) (*x509.Certificate, *ecdsa.PrivateKey, string) {
		key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		tmpl := &x509.Certificate{
			SerialNumber: big.NewInt(1),
			Subject:      pkix.Name{CommonName: "Proxmox Virtual Environment", OrganizationalUnit: []string{ou}, Organization: []string{"PVE Cluster Manager CA"}},
			NotBefore:    time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
			IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
		if err != nil {
			t.Fatal(err)
		}
		cert, _ := x509.ParseCertificate(der)
		return cert, key, string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}))
	}
	leaf := func(ca *x509.Certificate, caKey *ecdsa.PrivateKey, node string) string {
		key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		tmpl := &x509.Certificate{
			SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: node},
			NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
		if err != nil {
			t.Fatal(err)
		}
		return string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}))
	}
	id := func(pemData string, isCA bool) string {
		s, err := clusterIdentity(pemData, isCA)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	caA, keyA, pemA := newCA("aaaa")
	caB, keyB, _ := newCA("bbbb")
	a1, a2, b1 := id(leaf(caA, keyA, "pve1"), false), id(leaf(caA, keyA, "pve2"), false), id(leaf(caB, keyB, "pve1"), false)
	if a1 != a2 || a1 != id(pemA, true) {
		t.Fatalf("one cluster, several identities: %s %s %s", a1, a2, id(pemA, true))
	}
	if a1 == b1 {
		t.Fatal("two clusters share an identity")
	}
	if _, err := clusterIdentity("not a pem", false); err == nil {
		t.Fatal("garbage accepted")
	}
}
