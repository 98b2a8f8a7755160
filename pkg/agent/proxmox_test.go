package agent

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"io"
	"math/big"
	"strings"
	"testing"
	"time"

	"github.com/flexplane/flexplane/pkg/pvesim"
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

// TestProxmoxClient checks the agent's Proxmox client against the simulator:
// fingerprint pinning, the facts Info reports, and that the token never
// appears in errors.
func TestProxmoxClient(t *testing.T) {
	t.Parallel()
	const token = "flexplane@pve!agent=0123456789abcdef"
	sim, err := pvesim.Start(pvesim.Config{Cluster: "lab", Nodes: 2, Tokens: []string{token}})
	if err != nil {
		t.Fatal(err)
	}
	defer sim.Close()
	other, err := pvesim.Start(pvesim.Config{Tokens: []string{token}})
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	ctx := t.Context()

	p, err := newPVE(sim.URL(), token, sim.Fingerprint())
	if err != nil {
		t.Fatal(err)
	}
	f1, err := p.facts(ctx, "pve1")
	if err != nil {
		t.Fatal(err)
	}
	f2, err := p.facts(ctx, "pve2")
	if err != nil {
		t.Fatal(err)
	}
	if f1.clusterName != "lab" || f1.version == "" || f1.clusterID == "" || f1 != f2 {
		t.Fatalf("facts pve1 %+v pve2 %+v", f1, f2)
	}
	po, err := newPVE(other.URL(), token, other.Fingerprint())
	if err != nil {
		t.Fatal(err)
	}
	fo, err := po.facts(ctx, "pve1")
	if err != nil {
		t.Fatal(err)
	}
	if fo.clusterName != "" || fo.clusterID == f1.clusterID {
		t.Fatalf("standalone facts %+v, cluster %+v", fo, f1)
	}

	// Pinning: the other cluster's fingerprint does not open this one.
	wrong, err := newPVE(sim.URL(), token, other.Fingerprint())
	if err != nil {
		t.Fatal(err)
	}
	_, err = wrong.do(ctx, "GET", "/version", "", nil, "")
	if err == nil || !strings.Contains(err.Error(), "does not match the pinned one") {
		t.Fatalf("wrong fingerprint: %v", err)
	}
	// A refused token is a status, and no error quotes the token.
	bad, err := newPVE(sim.URL(), "flexplane@pve!agent=wrong-secret", sim.Fingerprint())
	if err != nil {
		t.Fatal(err)
	}
	resp, err := bad.do(ctx, "GET", "/version", "", nil, "")
	if err != nil || resp.status != 401 {
		t.Fatalf("bad token: %v %v", resp.status, err)
	}
	_, err = bad.facts(ctx, "pve1")
	if err == nil || strings.Contains(err.Error(), "wrong-secret") {
		t.Fatalf("facts with a bad token: %v", err)
	}
	for _, fp := range []string{"AB:CD", "zz"} {
		if _, err := newPVE(sim.URL(), token, fp); err == nil {
			t.Errorf("fingerprint %q accepted", fp)
		}
	}
	if _, err := newPVE("http://127.0.0.1:8006", token, ""); err == nil {
		t.Error("plain http Proxmox URL accepted")
	}
}

// TestReadBody reads answers of known, wrong and unknown length whole, in
// one buffer when the length is known, and tells a too large one.
func TestReadBody(t *testing.T) {
	t.Parallel()
	body := bytes.Repeat([]byte(`{"data":[{"id":"qemu/100"}]}`), 10000)
	for _, length := range []int64{int64(len(body)), -1, 10, int64(len(body)) + 100} {
		got, err := readBody(bytes.NewReader(body), length)
		if err != nil || !bytes.Equal(got, body) {
			t.Errorf("length %d: read %d bytes of %d, %v", length, len(got), len(body), err)
		}
		if length == int64(len(body)) && cap(got) != len(body)+bytes.MinRead {
			t.Errorf("known length: buffer grew to %d for %d bytes", cap(got), len(body))
		}
	}
	big := bytes.Repeat([]byte("x"), maxResponse+10)
	for _, length := range []int64{int64(len(big)), -1} {
		got, err := readBody(bytes.NewReader(big), length)
		if err != nil || len(got) != maxResponse+1 {
			t.Errorf("too large, length %d: read %d bytes, %v; want %d", length, len(got), err, maxResponse+1)
		}
	}
}

// BenchmarkReadBody reads a 300 KB answer with its length known, and with
// io.ReadAll as before (the same-run baseline).
func BenchmarkReadBody(b *testing.B) {
	body := bytes.Repeat([]byte(`{"id":"qemu/1000","type":"qemu","name":"vm"},`), 300<<10/45)
	b.Run("io.ReadAll", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := io.ReadAll(io.LimitReader(bytes.NewReader(body), maxResponse+1)); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("readBody", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := readBody(bytes.NewReader(body), int64(len(body))); err != nil {
				b.Fatal(err)
			}
		}
	})
}
