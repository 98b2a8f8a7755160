package catalog

import (
	"context"
	"crypto/rsa"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"time"

	"golang.org/x/crypto/ssh"
)

// The limits of an OpenSSH public key, wherever flexplane takes one (a
// user's stored keys, createVM's sshKeys).
const (
	// MaxSSHKeyLen bounds one authorized_keys line (options, type, key
	// and comment): an RSA key of 16384 bits with a long comment fits.
	MaxSSHKeyLen = 8 << 10
	// MaxSSHKeyOptionsLen bounds the options before the key type
	// (command="...", from="...", no-pty, ...).
	MaxSSHKeyOptionsLen = 1 << 10
	// MinRSABits is the smallest RSA modulus accepted.
	MinRSABits = 2048
	// MaxUserSSHKeys is the most keys one user (one token subject) keeps.
	MaxUserSSHKeys = 100
	// maxSSHKeyNameLen bounds the name of a user's key.
	maxSSHKeyNameLen = 63
	// maxSubjectLen bounds a token subject (OpenID Connect: 255 ASCII
	// characters).
	maxSubjectLen = 255
)

// sshKeyTypes are the key types accepted: those OpenSSH enables by
// default, without DSA (disabled since OpenSSH 7.0) and certificates.
var sshKeyTypes = []string{
	ssh.KeyAlgoED25519, ssh.KeyAlgoECDSA256, ssh.KeyAlgoECDSA384, ssh.KeyAlgoECDSA521, ssh.KeyAlgoRSA,
	ssh.KeyAlgoSKED25519, ssh.KeyAlgoSKECDSA256,
}

var sshKeyNameRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]*$`)

// SSHKeyInfo is an OpenSSH authorized_keys line and what it says.
type SSHKeyInfo struct {
	// Line is the line as given, without surrounding space.
	Line string
	// Type is the key's type (ssh-ed25519, ecdsa-sha2-nistp256, ssh-rsa, ...).
	Type string
	// Fingerprint is the key's SHA256 fingerprint as ssh-keygen -l prints
	// it ("SHA256:" and the unpadded base64 of the hash).
	Fingerprint string
	// Comment is the text after the key ("" when none).
	Comment string
	// Options are the line's options (command="...", from="...", no-pty),
	// in their order.
	Options []string
}

// ParseSSHKey checks that line is one OpenSSH authorized_keys line of an
// accepted type (ssh-ed25519, ecdsa-sha2-nistp256/384/521, ssh-rsa of at
// least MinRSABits, sk-ssh-ed25519@openssh.com,
// sk-ecdsa-sha2-nistp256@openssh.com), at most MaxSSHKeyLen bytes with
// options of at most MaxSSHKeyOptionsLen, and returns what it says. A
// refusal is a *ValidationError of field.
func ParseSSHKey(field, line string) (*SSHKeyInfo, error) {
	line = strings.TrimSpace(line)
	switch {
	case line == "":
		return nil, invalid(field, "must not be empty")
	case len(line) > MaxSSHKeyLen:
		return nil, invalid(field, "the key is %d bytes, more than %d", len(line), MaxSSHKeyLen)
	case strings.ContainsAny(line, "\r\n"):
		return nil, invalid(field, "must be one line: one OpenSSH public key")
	}
	pub, comment, options, rest, err := ssh.ParseAuthorizedKey([]byte(line))
	if err != nil || strings.TrimSpace(string(rest)) != "" {
		return nil, invalid(field, "not an OpenSSH public key (type, base64 key, comment; as in authorized_keys)")
	}
	typ := pub.Type()
	if !slices.Contains(sshKeyTypes, typ) {
		return nil, invalid(field, "key type %s is not accepted; use one of %s", typ, strings.Join(sshKeyTypes, ", "))
	}
	if ck, ok := pub.(ssh.CryptoPublicKey); ok {
		if k, ok := ck.CryptoPublicKey().(*rsa.PublicKey); ok && k.N.BitLen() < MinRSABits {
			return nil, invalid(field, "the RSA key has %d bits, fewer than %d", k.N.BitLen(), MinRSABits)
		}
	}
	if n := len(strings.Join(options, ",")); n > MaxSSHKeyOptionsLen {
		return nil, invalid(field, "the key's options are %d bytes, more than %d", n, MaxSSHKeyOptionsLen)
	}
	return &SSHKeyInfo{Line: line, Type: typ, Fingerprint: ssh.FingerprintSHA256(pub), Comment: comment, Options: options}, nil
}

// KindUserSSHKeys is the SSH keys one user keeps for new VMs: one object
// per token subject.
const KindUserSSHKeys Kind = "UserSSHKeys"

// UserSSHKeys is the SSH keys of one user, known by their token's subject.
// Its name is UserSSHKeysName of the subject.
type UserSSHKeys struct {
	TypeMeta
	ObjectMeta      `json:"metadata"`
	UserSSHKeysSpec `json:"spec"`
}

// UserSSHKeysSpec is the keys of a user.
type UserSSHKeysSpec struct {
	// Subject is the token subject (`sub`) of the user the keys are of.
	Subject string `json:"subject"`
	// Keys are the user's keys, at most MaxUserSSHKeys, names unique.
	Keys []UserSSHKey `json:"keys,omitempty"`
}

// UserSSHKey is one key of a user.
type UserSSHKey struct {
	// Name is the key's name among the user's keys: 1 to 63 letters,
	// digits, '.', '_' or '-', starting with a letter or digit.
	Name string `json:"name"`
	// PublicKey is the authorized_keys line (ParseSSHKey).
	PublicKey string `json:"publicKey"`
	// Created is when the key was added.
	Created time.Time `json:"created"`
}

// UserSSHKeysName is the name of the UserSSHKeys object of subject: a
// hash of it, since a subject is any string and a name is a DNS name.
func UserSSHKeysName(subject string) string {
	sum := sha256.Sum256([]byte(subject))
	return "u-" + hex.EncodeToString(sum[:20])
}

// ObjectKind implements Object.
func (*UserSSHKeys) ObjectKind() Kind { return KindUserSSHKeys }

// DeepCopyObject implements Object.
func (u *UserSSHKeys) DeepCopyObject() Object {
	c := *u
	c.Keys = slices.Clone(u.Keys)
	return &c
}

// validateSSHKeyName checks the name of a user's key.
func validateSSHKeyName(field, name string) error {
	switch {
	case name == "":
		return invalid(field, "must not be empty")
	case len(name) > maxSSHKeyNameLen:
		return invalid(field, "must be at most %d characters", maxSSHKeyNameLen)
	case !sshKeyNameRE.MatchString(name):
		return invalid(field, "%q must consist of letters, digits, '.', '_' and '-', and start with a letter or digit", name)
	}
	return nil
}

// Validate implements Object.
func (u *UserSSHKeys) Validate() error {
	switch {
	case u.Subject == "" || len(u.Subject) > maxSubjectLen:
		return invalid("subject", "must be 1 to %d bytes", maxSubjectLen)
	case u.Name != UserSSHKeysName(u.Subject):
		return invalid("name", "must be %s, the name of the subject's keys", UserSSHKeysName(u.Subject))
	case len(u.Keys) > MaxUserSSHKeys:
		return invalid("keys", "a user keeps at most %d SSH keys", MaxUserSSHKeys)
	}
	for i, k := range u.Keys {
		field := fmt.Sprintf("keys[%d]", i)
		if err := validateSSHKeyName(field+".name", k.Name); err != nil {
			return err
		}
		if slices.ContainsFunc(u.Keys[:i], func(o UserSSHKey) bool { return o.Name == k.Name }) {
			return invalid(field+".name", "the name %q is taken by another key", k.Name)
		}
		if _, err := ParseSSHKey(field+".publicKey", k.PublicKey); err != nil {
			return err
		}
	}
	return nil
}

// SSHKeysOf returns the SSH keys of subject, in the order they were added
// (none when the subject has none).
func SSHKeysOf(ctx context.Context, s Store, subject string) ([]UserSSHKey, error) {
	u, err := Get[*UserSSHKeys](ctx, s, UserSSHKeysName(subject))
	if errors.Is(err, ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("ssh keys: %w", err)
	}
	if u.Subject != subject {
		// Two subjects of one hash: never shown to the other.
		return nil, nil
	}
	return u.Keys, nil
}

// AddSSHKey adds the key name (publicKey, an authorized_keys line) to the
// keys of subject, conditionally on the version read, and returns it as
// stored. A name the subject uses already, a key ParseSSHKey refuses, or a
// subject with MaxUserSSHKeys keys is a *ValidationError ("name",
// "publicKey"), nothing written.
func AddSSHKey(ctx context.Context, s Store, subject, name, publicKey string) (UserSSHKey, error) {
	if err := validateSSHKeyName("name", name); err != nil {
		return UserSSHKey{}, err
	}
	info, err := ParseSSHKey("publicKey", publicKey)
	if err != nil {
		return UserSSHKey{}, err
	}
	key := UserSSHKey{Name: name, PublicKey: info.Line, Created: time.Now().UTC().Truncate(time.Second)}
	err = changeSSHKeys(ctx, s, subject, func(u *UserSSHKeys) error {
		if slices.ContainsFunc(u.Keys, func(k UserSSHKey) bool { return k.Name == name }) {
			return invalid("name", "you have a key named %q already", name)
		}
		if len(u.Keys) >= MaxUserSSHKeys {
			return invalid("name", "you keep %d SSH keys, the most a user may; delete one first", len(u.Keys))
		}
		u.Keys = append(u.Keys, key)
		return nil
	})
	if err != nil {
		return UserSSHKey{}, fmt.Errorf("add ssh key: %w", err)
	}
	return key, nil
}

// DeleteSSHKey removes the key name of subject, conditionally on the
// version read, and returns it. A name the subject has no key of is a
// *NotFoundError, whoever else has a key of that name.
func DeleteSSHKey(ctx context.Context, s Store, subject, name string) (UserSSHKey, error) {
	var gone UserSSHKey
	err := changeSSHKeys(ctx, s, subject, func(u *UserSSHKeys) error {
		i := slices.IndexFunc(u.Keys, func(k UserSSHKey) bool { return k.Name == name })
		if i < 0 {
			return &NotFoundError{Kind: "SSH key", Name: name}
		}
		gone = u.Keys[i]
		u.Keys = slices.Delete(u.Keys, i, i+1)
		return nil
	})
	if err != nil {
		return UserSSHKey{}, fmt.Errorf("delete ssh key: %w", err)
	}
	return gone, nil
}

// changeSSHKeys applies change to the keys of subject (none yet: an empty
// object) and writes them, conditionally on the version read, reading
// them again when another writer changed them; an object left without
// keys is deleted. A change's error is returned as it is, nothing
// written.
func changeSSHKeys(ctx context.Context, s Store, subject string, change func(*UserSSHKeys) error) error {
	name := UserSSHKeysName(subject)
	for try := range maxAllocateTries {
		u, err := Get[*UserSSHKeys](ctx, s, name)
		fresh := errors.Is(err, ErrNotFound)
		switch {
		case fresh:
			u = &UserSSHKeys{}
			u.Name, u.Subject = name, subject
		case err != nil:
			return err
		case u.Subject != subject:
			return fmt.Errorf("the keys of another subject have this subject's name %s", name)
		}
		if err := change(u); err != nil {
			return err
		}
		switch {
		case fresh && len(u.Keys) == 0:
			return nil
		case fresh:
			_, err = Create(ctx, s, u)
		case len(u.Keys) == 0:
			err = s.Delete(ctx, KindUserSSHKeys, name, u.ResourceVersion)
		default:
			_, err = Update(ctx, s, u)
		}
		if errors.Is(err, ErrConflict) || errors.Is(err, ErrAlreadyExists) || errors.Is(err, ErrNotFound) {
			if err := backoff(ctx, try); err != nil {
				return err
			}
			continue
		}
		return err
	}
	return &ConflictError{Kind: KindUserSSHKeys, Name: name}
}
