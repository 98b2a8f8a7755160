package catalog

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/flexplane/flexplane/pkg/support/atomicfile"
)

// KindSecret names secrets in errors (*NotFoundError); secrets are not
// catalog objects: they are never exported, listed or returned by the API.
const KindSecret Kind = "Secret"

// SecretStore keeps small secrets (a load balancer's certificates and
// keys) beside the catalog: as Kubernetes Secrets in the CRD store, as
// files only their owner reads in the directory store. A secret is a map of
// keys to bytes; its name follows the rules of object names.
type SecretStore interface {
	// GetSecret returns the secret's data; a *NotFoundError when there is
	// none.
	GetSecret(ctx context.Context, name string) (map[string][]byte, error)
	// PutSecret creates or replaces the secret.
	PutSecret(ctx context.Context, name string, data map[string][]byte) error
	// DeleteSecret removes the secret; a missing one is no error.
	DeleteSecret(ctx context.Context, name string) error
}

var _ SecretStore = (*DirStore)(nil)

// secretPath is where the directory store keeps secret name.
func (s *DirStore) secretPath(name string) (string, error) {
	if err := ValidateName(KindSecret, name); err != nil {
		return "", err
	}
	return filepath.Join(s.dir, "secrets", name+".json"), nil
}

// GetSecret implements SecretStore.
func (s *DirStore) GetSecret(ctx context.Context, name string) (map[string][]byte, error) {
	p, err := s.secretPath(name)
	if err != nil {
		return nil, fmt.Errorf("catalog: get secret: %w", &NotFoundError{Kind: KindSecret, Name: name})
	}
	data, err := os.ReadFile(p)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("catalog: get secret: %w", &NotFoundError{Kind: KindSecret, Name: name})
	}
	if err != nil {
		return nil, fmt.Errorf("catalog: get secret: %w", err)
	}
	var out map[string][]byte
	if err := json.Unmarshal(data, &out); err != nil {
		return nil, fmt.Errorf("catalog: get secret %s: %w", name, err)
	}
	return out, nil
}

// PutSecret implements SecretStore: the file is mode 0600 in a directory
// of mode 0700.
func (s *DirStore) PutSecret(ctx context.Context, name string, data map[string][]byte) error {
	p, err := s.secretPath(name)
	if err != nil {
		return fmt.Errorf("catalog: put secret: %w", err)
	}
	if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
		return fmt.Errorf("catalog: put secret: %w", err)
	}
	b, err := json.Marshal(data)
	if err != nil {
		return fmt.Errorf("catalog: put secret: %w", err)
	}
	if err := atomicfile.WriteFile(p, b, 0o600); err != nil {
		return fmt.Errorf("catalog: put secret: %w", err)
	}
	return nil
}

// DeleteSecret implements SecretStore.
func (s *DirStore) DeleteSecret(ctx context.Context, name string) error {
	p, err := s.secretPath(name)
	if err != nil {
		return nil // a name that cannot exist
	}
	if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("catalog: delete secret: %w", err)
	}
	return nil
}
