package devidp

import (
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	jose "github.com/go-jose/go-jose/v4"
)

const (
	signingKeyFile = "signing-key.pem"
	cryptoKeyFile  = "crypto-key"
)

// signingKey is the provider's RSA key; it implements op.SigningKey and
// op.Key.
type signingKey struct {
	id  string
	key *rsa.PrivateKey
}

func (k *signingKey) SignatureAlgorithm() jose.SignatureAlgorithm { return jose.RS256 }
func (k *signingKey) Algorithm() jose.SignatureAlgorithm          { return jose.RS256 }
func (k *signingKey) Use() string                                 { return "sig" }
func (k *signingKey) ID() string                                  { return k.id }

// Key returns the private key for signing; publicKey is the JWKS view.
func (k *signingKey) Key() any { return k.key }

type publicKey struct{ *signingKey }

func (k publicKey) Key() any { return &k.key.PublicKey }

// loadKeys reads the signing and token-encryption keys from dir, creating
// them (mode 0600, dir 0700) on first use, so tokens stay valid across
// restarts.
func loadKeys(dir string) (*signingKey, [32]byte, error) {
	var crypto [32]byte
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, crypto, err
	}
	key, err := loadOrCreate(filepath.Join(dir, signingKeyFile), func() ([]byte, error) {
		k, err := rsa.GenerateKey(rand.Reader, 2048)
		if err != nil {
			return nil, err
		}
		der, err := x509.MarshalPKCS8PrivateKey(k)
		if err != nil {
			return nil, err
		}
		return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), nil
	})
	if err != nil {
		return nil, crypto, err
	}
	block, _ := pem.Decode(key)
	if block == nil {
		return nil, crypto, fmt.Errorf("%s: no PEM block", signingKeyFile)
	}
	parsed, err := x509.ParsePKCS8PrivateKey(block.Bytes)
	if err != nil {
		return nil, crypto, fmt.Errorf("%s: %w", signingKeyFile, err)
	}
	rsaKey, ok := parsed.(*rsa.PrivateKey)
	if !ok {
		return nil, crypto, fmt.Errorf("%s: %T is not an RSA key", signingKeyFile, parsed)
	}
	pub, err := x509.MarshalPKIXPublicKey(&rsaKey.PublicKey)
	if err != nil {
		return nil, crypto, err
	}
	sum := sha256.Sum256(pub)

	ck, err := loadOrCreate(filepath.Join(dir, cryptoKeyFile), func() ([]byte, error) {
		var b [32]byte
		if _, err := rand.Read(b[:]); err != nil {
			return nil, err
		}
		return []byte(hex.EncodeToString(b[:]) + "\n"), nil
	})
	if err != nil {
		return nil, crypto, err
	}
	raw, err := hex.DecodeString(strings.TrimSpace(string(ck)))
	if err != nil || len(raw) != len(crypto) {
		return nil, crypto, fmt.Errorf("%s: want %d hex-encoded bytes", cryptoKeyFile, len(crypto))
	}
	copy(crypto[:], raw)
	return &signingKey{id: base64.RawURLEncoding.EncodeToString(sum[:12]), key: rsaKey}, crypto, nil
}

// loadOrCreate returns the file's content, writing gen's output first if
// the file does not exist (atomically, so a crash leaves no partial key).
func loadOrCreate(path string, gen func() ([]byte, error)) ([]byte, error) {
	data, err := os.ReadFile(path)
	if err == nil {
		return data, nil
	}
	if !errors.Is(err, fs.ErrNotExist) {
		return nil, err
	}
	data, err = gen()
	if err != nil {
		return nil, err
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), ".tmp-*")
	if err != nil {
		return nil, err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return nil, err
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return nil, err
	}
	if err := tmp.Close(); err != nil {
		return nil, err
	}
	// Link fails if another process created the key meanwhile: use theirs.
	if err := os.Link(tmp.Name(), path); err != nil {
		if errors.Is(err, fs.ErrExist) {
			return os.ReadFile(path)
		}
		return nil, err
	}
	return data, nil
}
