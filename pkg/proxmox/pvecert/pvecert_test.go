package pvecert_test

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"math/big"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/flexplane/flexplane/pkg/proxmox/pvecert"
)

// testdata holds a cluster CA and a node certificate and key made as
// Proxmox makes them (RSA, the node's FQDN as common name, its short name
// among the DNS names), with openssl.
func readTestdata(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile("testdata/" + name)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestClusterIdentityUnchanged: the zone ID of an enrolled cluster is the
// identity agents reported before proofs existed (a hash of the CA's subject
// and key identifier, the value below computed apart from this code); the
// node certificate's issuer fields give the same.
func TestClusterIdentityUnchanged(t *testing.T) {
	t.Parallel()
	const want = "5aed39b31cb31bba5cceaf297de5de24"
	id, err := pvecert.ClusterIdentity(readTestdata(t, "pve-root-ca.pem"))
	if err != nil || id != want {
		t.Fatalf("identity of the CA: %q, %v; want %q", id, err, want)
	}
	id, err = pvecert.ClusterIdentityOfNode(readTestdata(t, "pve-ssl.pem"))
	if err != nil || id != want {
		t.Fatalf("identity from the node certificate: %q, %v; want %q", id, err, want)
	}
	key, err := pvecert.ParseKey(readTestdata(t, "pve-ssl.key"))
	if err != nil {
		t.Fatal(err)
	}
	nonce := []byte(strings.Repeat("n", pvecert.NonceSize))
	sig, err := pvecert.Sign(key, nonce, "nodekey:aa")
	if err != nil {
		t.Fatal(err)
	}
	m, err := pvecert.Verify(pvecert.Proof{NodeCert: readTestdata(t, "pve-ssl.pem"), CA: readTestdata(t, "pve-root-ca.pem"), Signature: sig},
		nonce, "nodekey:aa", time.Now())
	if err != nil || m.ClusterID != want || m.Node != "pve1" {
		t.Fatalf("a proof made with the RSA key of a Proxmox node: %+v, %v", m, err)
	}
}

// TestClusterIdentity: every node of one cluster gives one identity, two
// clusters two, and garbage none.
func TestClusterIdentity(t *testing.T) {
	t.Parallel()
	now := time.Now()
	a, b := newCA(t, now), newCA(t, now)
	a1, a2, b1 := a.node(t, "pve1", now), a.node(t, "pve2", now), b.node(t, "pve1", now)
	id := func(f func([]byte) (string, error), pemData []byte) string {
		s, err := f(pemData)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	ida := id(pvecert.ClusterIdentity, a.pem)
	if id(pvecert.ClusterIdentityOfNode, a1.pem) != ida || id(pvecert.ClusterIdentityOfNode, a2.pem) != ida {
		t.Fatal("one cluster, several identities")
	}
	if id(pvecert.ClusterIdentityOfNode, b1.pem) == ida {
		t.Fatal("two clusters share an identity")
	}
	if _, err := pvecert.ClusterIdentity([]byte("not a pem")); err == nil {
		t.Fatal("garbage accepted")
	}
}

// TestVerify tries to pass proofs that must fail: a certificate of another
// cluster, a signature with another key, an expired certificate, another
// nonce, another mesh identity (a relayed proof), a certificate naming no
// node, nothing at all; each wraps ErrInvalid and changes nothing.
func TestVerify(t *testing.T) {
	t.Parallel()
	now := time.Now()
	ca, other := newCA(t, now), newCA(t, now)
	good := ca.node(t, "pve1", now)
	expired := ca.node(t, "pve1", now.Add(-48*time.Hour))
	foreign := other.node(t, "pve1", now)
	nonce := make([]byte, pvecert.NonceSize)
	rand.Read(nonce)
	const meshKey = "nodekey:0123"
	sign := func(k crypto.Signer, nonce []byte, meshKey string) []byte {
		s, err := pvecert.Sign(k, nonce, meshKey)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	m, err := pvecert.Verify(pvecert.Proof{NodeCert: good.pem, CA: ca.pem, Signature: sign(good.key, nonce, meshKey)}, nonce, meshKey, now)
	wantID, _ := pvecert.ClusterIdentity(ca.pem)
	if err != nil || m.ClusterID != wantID || m.Node != "pve1" {
		t.Fatalf("a good proof: %+v, %v", m, err)
	}
	otherNonce := append([]byte(nil), nonce...)
	otherNonce[0] ^= 1
	for _, tc := range []struct {
		name  string
		p     pvecert.Proof
		nonce []byte
		key   string
		why   string
	}{
		{"bad chain: another cluster's node certificate", pvecert.Proof{NodeCert: foreign.pem, CA: ca.pem, Signature: sign(foreign.key, nonce, meshKey)}, nonce, meshKey, "node certificate"},
		{"bad chain: the CA is the node certificate", pvecert.Proof{NodeCert: good.pem, CA: good.pem, Signature: sign(good.key, nonce, meshKey)}, nonce, meshKey, "not a CA"},
		{"wrong key: the CA's public certificate with another node's key", pvecert.Proof{NodeCert: good.pem, CA: ca.pem, Signature: sign(foreign.key, nonce, meshKey)}, nonce, meshKey, "signature"},
		{"expired certificate", pvecert.Proof{NodeCert: expired.pem, CA: ca.pem, Signature: sign(expired.key, nonce, meshKey)}, nonce, meshKey, "expired"},
		{"wrong nonce", pvecert.Proof{NodeCert: good.pem, CA: ca.pem, Signature: sign(good.key, otherNonce, meshKey)}, nonce, meshKey, "signature"},
		{"relayed: made for another mesh identity", pvecert.Proof{NodeCert: good.pem, CA: ca.pem, Signature: sign(good.key, nonce, meshKey)}, nonce, "nodekey:4567", "signature"},
		{"no signature", pvecert.Proof{NodeCert: good.pem, CA: ca.pem}, nonce, meshKey, "signature"},
		{"no certificates", pvecert.Proof{Signature: sign(good.key, nonce, meshKey)}, nonce, meshKey, "no node certificate"},
		{"garbage", pvecert.Proof{NodeCert: []byte("x"), CA: ca.pem, Signature: []byte("x")}, nonce, meshKey, "node certificate"},
	} {
		m, err := pvecert.Verify(tc.p, tc.nonce, tc.key, now)
		if !errors.Is(err, pvecert.ErrInvalid) || !strings.Contains(err.Error(), tc.why) {
			t.Errorf("%s: %+v, %v; want ErrInvalid saying %q", tc.name, m, err, tc.why)
		}
	}
}

// TestNodeName: the node is the common name's first label, and must be
// among the DNS names when there are any.
func TestNodeName(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		cn   string
		dns  []string
		want string
	}{
		{"pve1.example.com", []string{"localhost", "pve1", "pve1.example.com"}, "pve1"},
		{"pve2.local", nil, "pve2"},
		{"pve3", []string{"pve3"}, "pve3"},
		{"pve1.example.com", []string{"localhost", "pve2"}, ""},
		{"", nil, ""},
	} {
		got, err := pvecert.NodeName(&x509.Certificate{Subject: pkix.Name{CommonName: tc.cn}, DNSNames: tc.dns})
		if got != tc.want || (err == nil) != (tc.want != "") {
			t.Errorf("CN %q DNS %v: %q, %v; want %q", tc.cn, tc.dns, got, err, tc.want)
		}
	}
}

type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pem  []byte
}

type testNode struct {
	key crypto.Signer
	pem []byte
}

func newCA(t *testing.T, now time.Time) testCA {
	t.Helper()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1),
		Subject:      pkix.Name{CommonName: "Proxmox Virtual Environment", OrganizationalUnit: []string{rand.Text()}, Organization: []string{"PVE Cluster Manager CA"}},
		NotBefore:    now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	return testCA{cert: cert, key: key, pem: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}
}

// node issues a node certificate valid for a day from a day before from.
func (ca testCA) node(t *testing.T, node string, from time.Time) testNode {
	t.Helper()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: node + ".local"},
		DNSNames:  []string{"localhost", node, node + ".local"},
		NotBefore: from.Add(-24 * time.Hour), NotAfter: from.Add(time.Hour),
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	return testNode{key: key, pem: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}
}
