package auth

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"time"
)

// Service accounts are a VDC's non-human callers. flexplane issues their
// tokens itself, so that automation needs nothing configured at the
// identity provider:
//
//	fpsa_<vdc>_<account id>_<secret>
//
// The fixed prefix lets secret scanners find leaked tokens; the VDC and
// the account id say where the account is kept; the secret is 256 random
// bits (43 characters of unpadded base64url). Only the SHA-256 of the
// secret is stored. A salted slow hash (bcrypt, argon2) protects guessable
// passwords; a 256-bit random secret cannot be guessed from its SHA-256,
// so one fast hash suffices and verification costs microseconds per
// request. Hashes are compared in constant time.

// ServiceAccountTokenPrefix starts every service account token.
const ServiceAccountTokenPrefix = "fpsa_"

// ServiceAccountIssuer is the Issuer of a service account's Principal.
const ServiceAccountIssuer = "flexplane"

// secretBytes is the entropy of a token's secret.
const secretBytes = 32

// IsServiceAccountToken reports whether raw is meant as a service
// account's token (it has the prefix), well formed or not.
func IsServiceAccountToken(raw string) bool {
	return strings.HasPrefix(raw, ServiceAccountTokenPrefix)
}

// NewServiceAccountID returns a new random account id ("sa-" and 20 hex
// digits).
func NewServiceAccountID() (string, error) {
	var b [10]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("auth: new service account id: %w", err)
	}
	return "sa-" + hex.EncodeToString(b[:]), nil
}

// NewServiceAccountToken returns a new token for the account id of vdc and
// the hash to store for it (HashSecret of its secret).
func NewServiceAccountToken(vdc, id string) (token, hash string, err error) {
	var b [secretBytes]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", "", fmt.Errorf("auth: new service account token: %w", err)
	}
	secret := base64.RawURLEncoding.EncodeToString(b[:])
	return ServiceAccountTokenPrefix + vdc + "_" + id + "_" + secret, HashSecret(secret), nil
}

// HashSecret is the stored form of a token's secret: "sha256:" and the hex
// SHA-256.
func HashSecret(secret string) string {
	sum := sha256.Sum256([]byte(secret))
	return "sha256:" + hex.EncodeToString(sum[:])
}

// matchHash compares secret's hash with hash in constant time.
func matchHash(secret, hash string) bool {
	if hash == "" {
		return false
	}
	return subtle.ConstantTimeCompare([]byte(HashSecret(secret)), []byte(hash)) == 1
}

// ParseServiceAccountToken splits a token into its VDC, account id and
// secret; a token of another shape is refused as malformed.
func ParseServiceAccountToken(raw string) (vdc, id, secret string, err error) {
	rest, ok := strings.CutPrefix(raw, ServiceAccountTokenPrefix)
	parts := strings.SplitN(rest, "_", 3)
	if !ok || len(parts) != 3 || parts[0] == "" || !strings.HasPrefix(parts[1], "sa-") {
		return "", "", "", refused("the service account token is malformed", nil)
	}
	if b, err := base64.RawURLEncoding.DecodeString(parts[2]); err != nil || len(b) != secretBytes {
		return "", "", "", refused("the service account token is malformed", nil)
	}
	return parts[0], parts[1], parts[2], nil
}

// StoredServiceAccount is what a ServiceAccountStore keeps of an account.
type StoredServiceAccount struct {
	// Name is the account's name in its VDC.
	Name string
	// Role is its role in its VDC.
	Role Role
	// ExpiresAt ends its tokens' validity; nil: never.
	ExpiresAt *time.Time
	// TokenHash is HashSecret of the current token's secret.
	TokenHash string
	// PreviousTokenHash is that of the token before the last rotation,
	// accepted until PreviousUntil.
	PreviousTokenHash string
	PreviousUntil     *time.Time
}

// ErrNoServiceAccount is returned by a ServiceAccountStore for an account
// (or VDC) that does not exist.
var ErrNoServiceAccount = errors.New("no such service account")

// ServiceAccountStore reads service accounts where they are kept.
type ServiceAccountStore interface {
	// ServiceAccount returns the account id of vdc as stored now, or an
	// error matching ErrNoServiceAccount.
	ServiceAccount(ctx context.Context, vdc, id string) (StoredServiceAccount, error)
	// ServiceAccountUsed records that a token of the account was accepted
	// at now; the store decides how often it writes that down.
	ServiceAccountUsed(ctx context.Context, vdc, id string, now time.Time)
}

// ServiceAccountVerifier checks service account tokens against a
// ServiceAccountStore, on every request: a deleted account or a replaced
// token is refused as soon as the store shows it.
type ServiceAccountVerifier struct {
	store ServiceAccountStore
	now   func() time.Time
}

// NewServiceAccountVerifier returns a verifier over store; now is the
// clock for expiry (nil: time.Now).
func NewServiceAccountVerifier(store ServiceAccountStore, now func() time.Time) *ServiceAccountVerifier {
	if now == nil {
		now = time.Now
	}
	return &ServiceAccountVerifier{store: store, now: now}
}

// Verify checks a service account token and returns its Principal: the
// account's id as Subject, its role in its VDC and in no other. Errors
// match ErrUnauthenticated (a *RefusedError saying why), or
// ErrIssuerUnavailable when the store could not be read.
func (v *ServiceAccountVerifier) Verify(ctx context.Context, raw string) (*Principal, error) {
	vdc, id, secret, err := ParseServiceAccountToken(raw)
	if err != nil {
		return nil, err
	}
	a, err := v.store.ServiceAccount(ctx, vdc, id)
	if errors.Is(err, ErrNoServiceAccount) {
		return nil, refused("the service account does not exist (it may have been deleted)", err)
	}
	if err != nil {
		return nil, fmt.Errorf("%w: service accounts: %w", ErrIssuerUnavailable, err)
	}
	now := v.now()
	switch {
	case matchHash(secret, a.TokenHash):
	case matchHash(secret, a.PreviousTokenHash) && a.PreviousUntil != nil && now.Before(*a.PreviousUntil):
	case matchHash(secret, a.PreviousTokenHash):
		return nil, refused("the token was replaced by a rotation and its grace period is over", nil)
	default:
		return nil, refused("the token is not the service account's (it was rotated or is wrong)", nil)
	}
	if a.ExpiresAt != nil && !now.Before(*a.ExpiresAt) {
		return nil, refused("the service account expired at "+a.ExpiresAt.UTC().Format(time.RFC3339), nil)
	}
	if !a.Role.Valid() {
		return nil, refused("the service account has no valid role", nil)
	}
	v.store.ServiceAccountUsed(ctx, vdc, id, now)
	return &Principal{
		Issuer:         ServiceAccountIssuer,
		Subject:        id,
		Name:           a.Name,
		ServiceAccount: true,
		VDCRoles:       map[string]Role{vdc: a.Role},
	}, nil
}

// ServiceAccountTokens issues service account tokens in this package's
// format (the VDC lifecycle's Tokens).
type ServiceAccountTokens struct{}

// NewID returns NewServiceAccountID.
func (ServiceAccountTokens) NewID() (string, error) { return NewServiceAccountID() }

// NewToken returns NewServiceAccountToken.
func (ServiceAccountTokens) NewToken(vdc, id string) (token, hash string, err error) {
	return NewServiceAccountToken(vdc, id)
}
