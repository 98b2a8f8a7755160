// Package pvecert is what a Proxmox node's certificates prove: the cluster
// identity derived from the cluster CA (pve-root-ca.pem), and the membership
// proof an agent makes with its node's TLS key (pve-ssl.key) and the
// orchestrator checks (Sign, Verify). Both sides of the proof use it: the
// agent signs, the fleet registry verifies. See docs/install/agents.md.
package pvecert

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"encoding/binary"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
)

// Context is the context string every membership proof signs first, so a
// signature made with a node's key for any other purpose is never a proof.
const Context = "flexplane agent membership proof v1"

// NonceSize is the size in bytes of the orchestrator's challenge.
const NonceSize = 32

// ErrInvalid is wrapped by every error of Verify: the proof does not show
// that the agent holds a node certificate of the cluster it presents.
var ErrInvalid = errors.New("membership proof invalid")

// ClusterIdentity derives the stable identity of a Proxmox cluster (or of a
// standalone node, which has a CA of its own) from its CA certificate
// (pve-root-ca.pem, PEM): a hash of the CA's subject and key identifier.
// It is the zone's ID.
func ClusterIdentity(caPEM []byte) (string, error) {
	cert, err := parsePEM(caPEM)
	if err != nil {
		return "", fmt.Errorf("pvecert: cluster identity: %w", err)
	}
	return identity(cert.RawSubject, cert.SubjectKeyId), nil
}

// ClusterIdentityOfNode is ClusterIdentity read from the issuer fields of a
// node certificate (pve-ssl.pem) the cluster CA issued: the same value.
func ClusterIdentityOfNode(nodePEM []byte) (string, error) {
	cert, err := parsePEM(nodePEM)
	if err != nil {
		return "", fmt.Errorf("pvecert: cluster identity: %w", err)
	}
	return identity(cert.RawIssuer, cert.AuthorityKeyId), nil
}

func identity(name, keyID []byte) string {
	h := sha256.New()
	h.Write(name)
	h.Write(keyID)
	return hex.EncodeToString(h.Sum(nil)[:16])
}

func parsePEM(data []byte) (*x509.Certificate, error) {
	block, _ := pem.Decode(data)
	if block == nil || block.Type != "CERTIFICATE" {
		return nil, errors.New("no PEM certificate")
	}
	return x509.ParseCertificate(block.Bytes)
}

// Message is what a membership proof signs: the context string, the
// orchestrator's nonce and the agent's mesh identity (its node key as the
// control server lists it), each length-prefixed. Binding the mesh identity
// keeps a proof from being relayed by another mesh node.
func Message(nonce []byte, meshKey string) []byte {
	var b []byte
	for _, part := range [][]byte{[]byte(Context), nonce, []byte(meshKey)} {
		b = binary.BigEndian.AppendUint32(b, uint32(len(part)))
		b = append(b, part...)
	}
	return b
}

// Sign signs the membership proof of nonce and meshKey with a node's key
// (pve-ssl.key): RSA-PSS with SHA-256 for an RSA key (Proxmox's default),
// ECDSA with SHA-256, or Ed25519.
func Sign(key crypto.Signer, nonce []byte, meshKey string) ([]byte, error) {
	msg := Message(nonce, meshKey)
	switch key.Public().(type) {
	case *rsa.PublicKey:
		sum := sha256.Sum256(msg)
		return key.Sign(rand.Reader, sum[:], &rsa.PSSOptions{SaltLength: rsa.PSSSaltLengthEqualsHash, Hash: crypto.SHA256})
	case *ecdsa.PublicKey:
		sum := sha256.Sum256(msg)
		return key.Sign(rand.Reader, sum[:], crypto.SHA256)
	case ed25519.PublicKey:
		return key.Sign(rand.Reader, msg, crypto.Hash(0))
	default:
		return nil, fmt.Errorf("pvecert: sign: unsupported key type %T", key.Public())
	}
}

// ParseKey reads a node's private key (pve-ssl.key: PKCS#1 or PKCS#8 RSA,
// SEC 1 or PKCS#8 ECDSA, PKCS#8 Ed25519).
func ParseKey(keyPEM []byte) (crypto.Signer, error) {
	block, _ := pem.Decode(keyPEM)
	if block == nil {
		return nil, errors.New("pvecert: parse key: no PEM block")
	}
	if k, err := x509.ParsePKCS1PrivateKey(block.Bytes); err == nil {
		return k, nil
	}
	if k, err := x509.ParseECPrivateKey(block.Bytes); err == nil {
		return k, nil
	}
	k, err := x509.ParsePKCS8PrivateKey(block.Bytes)
	if err != nil {
		return nil, fmt.Errorf("pvecert: parse key: %s block is no RSA, ECDSA or Ed25519 key", block.Type)
	}
	s, ok := k.(crypto.Signer)
	if !ok {
		return nil, fmt.Errorf("pvecert: parse key: unsupported key type %T", k)
	}
	return s, nil
}

// Proof is what an agent presents.
type Proof struct {
	// NodeCert is the node's certificate (pve-ssl.pem, PEM).
	NodeCert []byte
	// CA is the cluster CA (pve-root-ca.pem, PEM).
	CA []byte
	// Signature is Sign's over the orchestrator's nonce and the agent's
	// mesh identity with the node certificate's key.
	Signature []byte
}

// Member is what a valid proof shows.
type Member struct {
	// ClusterID is ClusterIdentity of the CA: the zone.
	ClusterID string
	// Node is the Proxmox node name the certificate is for.
	Node string
	// NotAfter is when the node certificate expires.
	NotAfter time.Time
}

// Verify checks a proof made for nonce by the mesh node whose key is
// meshKey, at time now: the node certificate chains to the presented CA and
// is valid at now, the signature verifies with its key over Message(nonce,
// meshKey), and the certificate names a node. Every error wraps ErrInvalid
// and says why.
func Verify(p Proof, nonce []byte, meshKey string, now time.Time) (Member, error) {
	if len(p.NodeCert) == 0 || len(p.CA) == 0 {
		return Member{}, fmt.Errorf("%w: no node certificate or cluster CA", ErrInvalid)
	}
	ca, err := parsePEM(p.CA)
	if err != nil {
		return Member{}, fmt.Errorf("%w: cluster CA: %v", ErrInvalid, err)
	}
	if !ca.IsCA {
		return Member{}, fmt.Errorf("%w: the cluster CA is not a CA certificate", ErrInvalid)
	}
	leaf, err := parsePEM(p.NodeCert)
	if err != nil {
		return Member{}, fmt.Errorf("%w: node certificate: %v", ErrInvalid, err)
	}
	roots := x509.NewCertPool()
	roots.AddCert(ca)
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: roots, CurrentTime: now, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}}); err != nil {
		return Member{}, fmt.Errorf("%w: node certificate: %v", ErrInvalid, err)
	}
	if leaf.IsCA {
		return Member{}, fmt.Errorf("%w: the node certificate is a CA certificate", ErrInvalid)
	}
	if err := checkSignature(leaf, Message(nonce, meshKey), p.Signature); err != nil {
		return Member{}, fmt.Errorf("%w: signature: %v", ErrInvalid, err)
	}
	node, err := NodeName(leaf)
	if err != nil {
		return Member{}, fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	return Member{ClusterID: identity(ca.RawSubject, ca.SubjectKeyId), Node: node, NotAfter: leaf.NotAfter}, nil
}

func checkSignature(cert *x509.Certificate, msg, sig []byte) error {
	var alg x509.SignatureAlgorithm
	switch cert.PublicKey.(type) {
	case *rsa.PublicKey:
		alg = x509.SHA256WithRSAPSS
	case *ecdsa.PublicKey:
		alg = x509.ECDSAWithSHA256
	case ed25519.PublicKey:
		alg = x509.PureEd25519
	default:
		return fmt.Errorf("unsupported key type %T", cert.PublicKey)
	}
	return cert.CheckSignature(alg, msg, sig)
}

// NodeName is the Proxmox node a node certificate is for: Proxmox issues
// pve-ssl.pem with the common name NODE.DOMAIN (the simulator's NODE.local)
// and the short name NODE among its DNS names. The name is the common
// name's first label, which must be one of the DNS names when there are
// any.
func NodeName(cert *x509.Certificate) (string, error) {
	node, _, _ := strings.Cut(cert.Subject.CommonName, ".")
	if node == "" {
		return "", errors.New("the node certificate has no common name")
	}
	if len(cert.DNSNames) > 0 && !slices.Contains(cert.DNSNames, node) {
		return "", fmt.Errorf("the node certificate's DNS names %v lack its node name %q", cert.DNSNames, node)
	}
	return node, nil
}
