package pvetest

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

	"github.com/flexplane/flexplane/pkg/proxmox/pvecert"
	agentv1 "github.com/flexplane/flexplane/proto/flexplane/agent/v1"
)

// Certs are a Proxmox cluster's CA and its nodes' certificates and keys,
// made in memory as Proxmox makes them (CN NODE.local, the short name among
// the DNS names), for a fake agent that proves its membership (Prove) without
// a simulated cluster.
type Certs struct {
	// ID is the cluster's identity (pvecert.ClusterIdentity): the zone's ID.
	ID    string
	ca    []byte
	nodes map[string]nodeCert
}

type nodeCert struct {
	key  *ecdsa.PrivateKey
	cert []byte
}

// NewCerts makes a cluster CA and a certificate for each of nodes.
func NewCerts(t testing.TB, nodes ...string) *Certs {
	t.Helper()
	now := time.Now()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1),
		Subject:      pkix.Name{CommonName: "Proxmox Virtual Environment", OrganizationalUnit: []string{rand.Text()}, Organization: []string{"PVE Cluster Manager CA"}},
		NotBefore:    now.Add(-time.Hour), NotAfter: now.AddDate(1, 0, 0),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(der)
	c := &Certs{ca: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), nodes: map[string]nodeCert{}}
	if c.ID, err = pvecert.ClusterIdentity(c.ca); err != nil {
		t.Fatal(err)
	}
	for i, node := range nodes {
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		der, err := x509.CreateCertificate(rand.Reader, &x509.Certificate{
			SerialNumber: big.NewInt(int64(i) + 2), Subject: pkix.Name{CommonName: node + ".local"},
			DNSNames:  []string{"localhost", node, node + ".local"},
			NotBefore: now.Add(-time.Hour), NotAfter: now.AddDate(1, 0, 0),
		}, ca, &key.PublicKey, caKey)
		if err != nil {
			t.Fatal(err)
		}
		c.nodes[node] = nodeCert{key: key, cert: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}
	}
	return c
}

// Prove answers a Prove call as the agent of node whose mesh node key is
// meshKey would.
func (c *Certs) Prove(node string, req *agentv1.ProveRequest, meshKey string) (*agentv1.ProveResponse, error) {
	n := c.nodes[node]
	sig, err := pvecert.Sign(n.key, req.GetNonce(), meshKey)
	if err != nil {
		return nil, err
	}
	return &agentv1.ProveResponse{NodeCertificate: n.cert, ClusterCa: c.ca, MeshNodeKey: meshKey, Signature: sig}, nil
}

// CAForTest is the cluster CA's certificate (PEM): public, as any TLS client
// of the cluster sees it, for a test's impostor that presents it.
func (c *Certs) CAForTest() []byte { return append([]byte(nil), c.ca...) }
