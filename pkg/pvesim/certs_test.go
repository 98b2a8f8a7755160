package pvesim_test

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/flexplane/flexplane/pkg/pvesim"
)

// TestNodeFiles: every node has the files Proxmox keeps for it, which its
// agent proves its membership with: the cluster CA, and the node's
// certificate (CN NODE.local, the short name among its DNS names) issued by
// it with the key that goes with it, readable by owner and group only. With
// CertDir they are there, in Proxmox's layout, and the same after a restart;
// without, in a temporary directory Close removes.
func TestNodeFiles(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	check := func(c *pvesim.Cluster) map[string][]byte {
		t.Helper()
		got := map[string][]byte{}
		for _, node := range c.NodeNames() {
			f := c.NodeFiles(node)
			pair, err := tls.LoadX509KeyPair(f.Cert, f.Key)
			if err != nil {
				t.Fatalf("%s: the certificate and key do not go together: %v", node, err)
			}
			leaf, err := x509.ParseCertificate(pair.Certificate[0])
			if err != nil {
				t.Fatal(err)
			}
			caPEM, err := os.ReadFile(f.CA)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(caPEM, c.CACertPEM()) {
				t.Errorf("%s: pve-root-ca.pem is not the cluster CA", node)
			}
			block, _ := pem.Decode(caPEM)
			ca, err := x509.ParseCertificate(block.Bytes)
			if err != nil {
				t.Fatal(err)
			}
			roots := x509.NewCertPool()
			roots.AddCert(ca)
			if _, err := leaf.Verify(x509.VerifyOptions{Roots: roots}); err != nil {
				t.Errorf("%s: the node certificate does not chain to the CA: %v", node, err)
			}
			if leaf.Subject.CommonName != node+".local" || !slices.Contains(leaf.DNSNames, node) {
				t.Errorf("%s: CN %q, DNS names %v", node, leaf.Subject.CommonName, leaf.DNSNames)
			}
			if fi, err := os.Stat(f.Key); err != nil || fi.Mode().Perm()&0o007 != 0 {
				t.Errorf("%s: the key is readable by others: %v %v", node, fi.Mode(), err)
			}
			got[node] = pair.Certificate[0]
		}
		return got
	}
	c, err := pvesim.Start(pvesim.Config{Cluster: "lab", Nodes: 2, CertDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	if f := c.NodeFiles("pve2"); f.Key != filepath.Join(dir, "nodes", "pve2", "pve-ssl.key") || f.CA != filepath.Join(dir, "pve-root-ca.pem") {
		t.Errorf("files of pve2 in CertDir: %+v", f)
	}
	first := check(c)
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	again, err := pvesim.Start(pvesim.Config{Cluster: "lab", Nodes: 2, CertDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	defer again.Close()
	if second := check(again); !bytes.Equal(first["pve1"], second["pve1"]) {
		t.Error("a restart on CertDir changed pve1's certificate")
	}

	temp, err := pvesim.Start(pvesim.Config{Cluster: "lab"})
	if err != nil {
		t.Fatal(err)
	}
	check(temp)
	f := temp.NodeFiles("pve1")
	if err := temp.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(f.Key); !os.IsNotExist(err) {
		t.Errorf("the temporary files outlive Close: %v", err)
	}
}
