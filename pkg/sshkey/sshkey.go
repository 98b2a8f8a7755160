// Package sshkey is the SSH keys users keep for their new VMs: each user
// (a token subject) adds, lists and deletes their own keys, at most
// catalog.MaxUserSSHKeys, and createVM takes them by name
// (compute.CreateInput.SSHKeyNames). The keys are stored in the catalog,
// one object per subject (catalog.UserSSHKeys); no one reads or changes
// another subject's keys through this service: a name the caller has no
// key of is not found, whoever else has one.
package sshkey

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/flexplane/flexplane/pkg/catalog"
)

// Config configures a Service.
type Config struct {
	// Catalog stores the keys. Required.
	Catalog catalog.Store
}

// Service adds, lists and deletes a user's SSH keys.
type Service struct {
	cfg Config
}

// Key is a user's SSH key as the user sees it.
type Key struct {
	// Name is the key's name among the user's keys.
	Name string
	// Type is the key's type (ssh-ed25519, ecdsa-sha2-nistp256, ssh-rsa, ...).
	Type string
	// Fingerprint is the SHA256 fingerprint as ssh-keygen -l prints it.
	Fingerprint string
	// Comment is the text after the key; nil when there is none.
	Comment *string
	// Options are the key's authorized_keys options (command="...",
	// from="...", no-pty), in their order.
	Options []string
	// PublicKey is the whole authorized_keys line.
	PublicKey string
	// CreatedAt is when the key was added.
	CreatedAt time.Time
}

// ErrNoSubject is returned for a caller without a token subject.
var ErrNoSubject = errors.New("sshkey: the caller has no subject")

// New returns a Service over cfg.
func New(cfg Config) (*Service, error) {
	if cfg.Catalog == nil {
		return nil, errors.New("sshkey: new: Catalog is required")
	}
	return &Service{cfg: cfg}, nil
}

// List returns the keys of subject in the order they were added.
func (s *Service) List(ctx context.Context, subject string) ([]*Key, error) {
	if subject == "" {
		return nil, ErrNoSubject
	}
	keys, err := catalog.SSHKeysOf(ctx, s.cfg.Catalog, subject)
	if err != nil {
		return nil, fmt.Errorf("sshkey: list: %w", err)
	}
	out := make([]*Key, 0, len(keys))
	for _, k := range keys {
		key, err := view(k)
		if err != nil {
			return nil, fmt.Errorf("sshkey: list: %w", err)
		}
		out = append(out, key)
	}
	return out, nil
}

// Add adds the key name, publicKey being one authorized_keys line, to the
// keys of subject. Bad input (a name the subject has already, a key of a
// type not accepted, too long, malformed, a subject with the most keys)
// is a *catalog.ValidationError of "name" or "publicKey", and nothing is
// stored.
func (s *Service) Add(ctx context.Context, subject, name, publicKey string) (*Key, error) {
	if subject == "" {
		return nil, ErrNoSubject
	}
	k, err := catalog.AddSSHKey(ctx, s.cfg.Catalog, subject, name, publicKey)
	return viewOf("add", k, err)
}

// Delete deletes the key name of subject and returns it; a name subject
// has no key of is a *catalog.NotFoundError.
func (s *Service) Delete(ctx context.Context, subject, name string) (*Key, error) {
	if subject == "" {
		return nil, ErrNoSubject
	}
	k, err := catalog.DeleteSSHKey(ctx, s.cfg.Catalog, subject, name)
	return viewOf("delete", k, err)
}

// viewOf is view of the key an operation op returned, or its error.
func viewOf(op string, k catalog.UserSSHKey, err error) (*Key, error) {
	if err == nil {
		var key *Key
		if key, err = view(k); err == nil {
			return key, nil
		}
	}
	return nil, fmt.Errorf("sshkey: %s: %w", op, err)
}

// view is what a stored key says.
func view(k catalog.UserSSHKey) (*Key, error) {
	info, err := catalog.ParseSSHKey("publicKey", k.PublicKey)
	if err != nil {
		return nil, fmt.Errorf("stored key %q: %w", k.Name, err)
	}
	key := &Key{Name: k.Name, Type: info.Type, Fingerprint: info.Fingerprint, Options: info.Options,
		PublicKey: info.Line, CreatedAt: k.Created}
	if key.Options == nil {
		key.Options = []string{}
	}
	if info.Comment != "" {
		key.Comment = &info.Comment
	}
	return key, nil
}
