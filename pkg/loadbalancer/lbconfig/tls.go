package lbconfig

import (
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
)

// DefaultServerName is the name a replica's admin certificate is checked
// against when TLSFiles.ServerName is empty: replicas are dialled by
// address, so the certificate names the service rather than an address.
const DefaultServerName = "flexgateway"

// TLSFiles are the PEM files of one side of the admin API's mutual TLS.
// They are read again at every handshake: a renewed certificate (a
// Secret's volume updated in place) takes effect without a restart.
type TLSFiles struct {
	// CertFile holds this side's certificate chain, leaf first.
	CertFile string `json:"certFile"`
	// KeyFile holds CertFile's private key.
	KeyFile string `json:"keyFile"`
	// CAFile holds the CA certificates the other side's certificate must
	// chain to: on a replica the CA of the orchestrators' client
	// certificates, on the orchestrator the CA of the replicas'.
	CAFile string `json:"caFile"`
	// ServerName is, on the orchestrator's side only, the DNS name a
	// replica's certificate must carry; empty is DefaultServerName.
	ServerName string `json:"serverName,omitempty"`
}

// load reads the certificate, its key and the CA pool.
func (f TLSFiles) load() (tls.Certificate, *x509.CertPool, error) {
	if f.CertFile == "" || f.KeyFile == "" || f.CAFile == "" {
		return tls.Certificate{}, nil, errors.New("a certificate, its key and a CA file are all required")
	}
	cert, err := tls.LoadX509KeyPair(f.CertFile, f.KeyFile)
	if err != nil {
		return tls.Certificate{}, nil, err
	}
	pool, err := f.pool()
	if err != nil {
		return tls.Certificate{}, nil, err
	}
	return cert, pool, nil
}

// pool reads the CA pool alone.
func (f TLSFiles) pool() (*x509.CertPool, error) {
	ca, err := os.ReadFile(f.CAFile)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(ca) {
		return nil, fmt.Errorf("%s holds no PEM certificate", f.CAFile)
	}
	return pool, nil
}

// ServerTLS is a replica's admin listener's TLS: it presents CertFile and
// checks a client certificate, when one is given, against CAFile (a
// certificate of another CA fails the handshake). A client without one
// still completes the handshake, for /healthz, /readyz and /metrics;
// the admin API itself requires a verified client certificate
// (ClientVerified). The files are checked now and read at every
// handshake.
func ServerTLS(f TLSFiles) (*tls.Config, error) {
	if _, _, err := f.load(); err != nil {
		return nil, fmt.Errorf("lbconfig: admin TLS: %w", err)
	}
	return &tls.Config{
		MinVersion: tls.VersionTLS13,
		GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
			cert, pool, err := f.load()
			if err != nil {
				return nil, fmt.Errorf("lbconfig: admin TLS: %w", err)
			}
			return &tls.Config{MinVersion: tls.VersionTLS13, Certificates: []tls.Certificate{cert},
				ClientCAs: pool, ClientAuth: tls.VerifyClientCertIfGiven}, nil
		},
	}, nil
}

// ClientVerified reports whether a connection's state shows a client
// certificate that chains to the server's client CA.
func ClientVerified(cs *tls.ConnectionState) bool {
	return cs != nil && len(cs.VerifiedChains) > 0
}

// ClientTLS is the orchestrator's side of the admin API's TLS: it presents
// CertFile and accepts only a replica certificate that chains to CAFile
// and carries ServerName. The files are checked now and read at every
// handshake.
func ClientTLS(f TLSFiles) (*tls.Config, error) {
	if _, _, err := f.load(); err != nil {
		return nil, fmt.Errorf("lbconfig: admin TLS: %w", err)
	}
	name := f.ServerName
	if name == "" {
		name = DefaultServerName
	}
	return &tls.Config{
		MinVersion: tls.VersionTLS13,
		GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
			cert, err := tls.LoadX509KeyPair(f.CertFile, f.KeyFile)
			if err != nil {
				return nil, fmt.Errorf("lbconfig: admin TLS: %w", err)
			}
			return &cert, nil
		},
		// The CA file is read at every handshake, so the chain is checked
		// here, against it and ServerName, in place of the default check.
		InsecureSkipVerify: true,
		VerifyConnection: func(cs tls.ConnectionState) error {
			pool, err := f.pool()
			if err != nil {
				return fmt.Errorf("lbconfig: admin TLS: %w", err)
			}
			if len(cs.PeerCertificates) == 0 {
				return errors.New("lbconfig: admin TLS: the replica sent no certificate")
			}
			inter := x509.NewCertPool()
			for _, c := range cs.PeerCertificates[1:] {
				inter.AddCert(c)
			}
			_, err = cs.PeerCertificates[0].Verify(x509.VerifyOptions{DNSName: name, Roots: pool, Intermediates: inter,
				KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}})
			if err != nil {
				return fmt.Errorf("lbconfig: admin TLS: the replica's certificate: %w", err)
			}
			return nil
		},
	}, nil
}

// KeyFingerprint is what GET /v1/config shows of a certificate's private
// key: "sha256:" and the hex SHA-256 of the key's PEM blocks' contents,
// or "" when keyPEM holds no PEM block.
func KeyFingerprint(keyPEM string) string {
	h := sha256.New()
	found := false
	for rest := []byte(keyPEM); ; {
		var b *pem.Block
		if b, rest = pem.Decode(rest); b == nil {
			break
		}
		h.Write(b.Bytes)
		found = true
	}
	if !found {
		return ""
	}
	return "sha256:" + hex.EncodeToString(h.Sum(nil))
}

// CertificatesOnly returns the CERTIFICATE blocks of certPEM re-encoded,
// dropping anything else (a private key pasted after the chain).
func CertificatesOnly(certPEM string) string {
	var out []byte
	for rest := []byte(certPEM); ; {
		var b *pem.Block
		if b, rest = pem.Decode(rest); b == nil {
			break
		}
		if b.Type == "CERTIFICATE" {
			out = append(out, pem.EncodeToMemory(&pem.Block{Type: b.Type, Bytes: b.Bytes})...)
		}
	}
	return string(out)
}
