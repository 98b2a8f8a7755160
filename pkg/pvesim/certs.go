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
	"os"
	"path/filepath"
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
	fingerprint string // the first node's
}

type nodeCert struct {
	tls         tls.Certificate // the node's served chain and key
	keyPEM      []byte          // the node's key, as pve-ssl.key
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

// keyPair is a certificate with its private key.
type keyPair struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
}

// loadOrCreate reads dir/name.pem and dir/name.key when dir is set and both exist (and
// valid reports the pair usable); otherwise it creates a pair and, with a dir, saves it.
func loadOrCreate(dir, name string, valid func(*keyPair) bool, create func() (*keyPair, error)) (*keyPair, error) {
	if dir != "" {
		certPEM, err1 := os.ReadFile(filepath.Join(dir, name+".pem"))
		keyPEM, err2 := os.ReadFile(filepath.Join(dir, name+".key"))
		if err1 == nil && err2 == nil {
			kp, err := parsePair(certPEM, keyPEM)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", name, err)
			}
			if valid(kp) {
				return kp, nil
			}
		}
	}
	kp, err := create()
	if err != nil || dir == "" {
		return kp, err
	}
	keyDER, err := x509.MarshalECPrivateKey(kp.key)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	if err := os.WriteFile(filepath.Join(dir, name+".key"), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}), 0o600); err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	if err := os.WriteFile(filepath.Join(dir, name+".pem"), pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: kp.cert.Raw}), 0o644); err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	return kp, nil
}

func parsePair(certPEM, keyPEM []byte) (*keyPair, error) {
	cb, _ := pem.Decode(certPEM)
	kb, _ := pem.Decode(keyPEM)
	if cb == nil || kb == nil {
		return nil, fmt.Errorf("not PEM")
	}
	cert, err := x509.ParseCertificate(cb.Bytes)
	if err != nil {
		return nil, err
	}
	key, err := x509.ParseECPrivateKey(kb.Bytes)
	if err != nil {
		return nil, err
	}
	return &keyPair{cert: cert, key: key}, nil
}

func newPair(tmpl *x509.Certificate, parent *keyPair) (*keyPair, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	signer, parentCert := key, tmpl
	if parent != nil {
		signer, parentCert = parent.key, parent.cert
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parentCert, &key.PublicKey, signer)
	if err != nil {
		return nil, err
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	return &keyPair{cert: cert, key: key}, nil
}

func serial() *big.Int {
	n, _ := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	return n
}

// newCertBundle loads or creates the cluster CA and the node certificates. With a dir
// they persist, so the cluster keeps its identity and fingerprints across restarts.
func newCertBundle(nodes []string, host, dir string) (*certBundle, error) {
	now := time.Now()
	ca, err := loadOrCreate(dir, "pve-root-ca", func(kp *keyPair) bool {
		return kp.cert.IsCA && len(kp.cert.Subject.OrganizationalUnit) == 1
	}, func() (*keyPair, error) {
		return newPair(&x509.Certificate{
			SerialNumber: serial(),
			Subject: pkix.Name{
				CommonName:         "Proxmox Virtual Environment",
				OrganizationalUnit: []string{randomHex(16)},
				Organization:       []string{"PVE Cluster Manager CA"},
			},
			NotBefore:             now.Add(-time.Hour),
			NotAfter:              now.AddDate(10, 0, 0),
			KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
			BasicConstraintsValid: true,
			IsCA:                  true,
		}, nil)
	})
	if err != nil {
		return nil, fmt.Errorf("cluster CA: %w", err)
	}
	b := &certBundle{
		identity: ca.cert.Subject.OrganizationalUnit[0],
		caPEM:    pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: ca.cert.Raw}),
		nodes:    map[string]*nodeCert{},
	}
	ips := []net.IP{net.ParseIP("127.0.0.1"), net.ParseIP("::1")}
	if ip := net.ParseIP(host); ip != nil && !ip.IsLoopback() && !ip.IsUnspecified() {
		ips = append(ips, ip)
	}
	for i, node := range nodes {
		kp, err := loadOrCreate(dir, node, func(kp *keyPair) bool {
			return kp.cert.CheckSignatureFrom(ca.cert) == nil && kp.cert.Subject.CommonName == node+".local"
		}, func() (*keyPair, error) {
			return newPair(&x509.Certificate{
				SerialNumber: serial(),
				Subject:      pkix.Name{CommonName: node + ".local", OrganizationalUnit: []string{"PVE Cluster Node"}, Organization: []string{"Proxmox Virtual Environment"}},
				NotBefore:    now.Add(-time.Hour),
				NotAfter:     now.AddDate(2, 0, 0),
				KeyUsage:     x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
				ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
				DNSNames:     []string{"localhost", node, node + ".local"},
				IPAddresses:  ips,
			}, ca)
		})
		if err != nil {
			return nil, fmt.Errorf("node %s certificate: %w", node, err)
		}
		cert := kp.cert
		var san []string
		for _, d := range cert.DNSNames {
			san = append(san, "DNS:"+d)
		}
		for _, ip := range cert.IPAddresses {
			san = append(san, "IP:"+ip.String())
		}
		keyDER, err := x509.MarshalECPrivateKey(kp.key)
		if err != nil {
			return nil, fmt.Errorf("node %s key: %w", node, err)
		}
		nc := &nodeCert{
			tls:         tls.Certificate{Certificate: [][]byte{cert.Raw, ca.cert.Raw}, PrivateKey: kp.key},
			keyPEM:      pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}),
			pem:         string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: cert.Raw})),
			fingerprint: fingerprintOf(cert.Raw),
			subject:     dnString(cert.Subject),
			issuer:      dnString(ca.cert.Subject),
			san:         san,
			notBefore:   cert.NotBefore,
			notAfter:    cert.NotAfter,
			bits:        256,
		}
		b.nodes[node] = nc
		if i == 0 {
			b.fingerprint = nc.fingerprint
		}
	}
	return b, nil
}

// NodeFiles are the paths of a node's certificate files as Proxmox keeps them
// (/etc/pve/pve-root-ca.pem, /etc/pve/nodes/NODE/pve-ssl.pem and .key, which
// /etc/pve/local/ shows on the node itself), for the node's agent.
type NodeFiles struct {
	// Key is the node's private key (pve-ssl.key).
	Key string
	// Cert is the node's certificate, issued by the cluster CA (pve-ssl.pem).
	Cert string
	// CA is the cluster CA's certificate (pve-root-ca.pem).
	CA string
}

// NodeFilesIn are the paths of node's files in the CertDir dir of a cluster
// (what its NodeFiles answers), for a process that did not start it.
func NodeFilesIn(dir, node string) NodeFiles {
	nd := filepath.Join(dir, "nodes", node)
	return NodeFiles{Key: filepath.Join(nd, "pve-ssl.key"), Cert: filepath.Join(nd, "pve-ssl.pem"), CA: filepath.Join(dir, "pve-root-ca.pem")}
}

// writeFiles writes the cluster CA and every node's certificate and key below
// dir in Proxmox's layout (nodeFiles); the key is readable by its owner and
// group only, as Proxmox's root:www-data 0640.
func (b *certBundle) writeFiles(dir string) error {
	if err := os.WriteFile(filepath.Join(dir, "pve-root-ca.pem"), b.caPEM, 0o644); err != nil {
		return fmt.Errorf("write certificate files: %w", err)
	}
	for node, nc := range b.nodes {
		f := NodeFilesIn(dir, node)
		if err := os.MkdirAll(filepath.Dir(f.Key), 0o755); err != nil {
			return fmt.Errorf("write certificate files: %w", err)
		}
		if err := os.WriteFile(f.Cert, []byte(nc.pem), 0o644); err != nil {
			return fmt.Errorf("write certificate files: %w", err)
		}
		if err := os.WriteFile(f.Key, nc.keyPEM, 0o640); err != nil {
			return fmt.Errorf("write certificate files: %w", err)
		}
	}
	return nil
}
