package auth

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
	"time"

	"github.com/go-jose/go-jose/v4"
)

// keyRefetchInterval is the shortest time between two fetches of the
// issuer's signing keys: a token signed with a key id the cached set does
// not have refetches it (the issuer rotated its keys) at most this often,
// so tokens with made-up key ids do not turn into load on the issuer.
const keyRefetchInterval = 30 * time.Second

// keyFetchTimeout bounds one fetch of the signing keys.
const keyFetchTimeout = 5 * time.Second

// maxKeySetBytes bounds the JWKS document read.
const maxKeySetBytes = 1 << 20

// errSignature is the cause of a token whose signature no key verifies.
var errSignature = errors.New("the signature is not valid")

// fetchErrKey is the context key of an *error that VerifySignature sets
// when the keys could not be fetched.
type fetchErrKey struct{}

// keySet is the issuer's signing keys (JWKS), cached. It implements
// oidc.KeySet. Unlike go-oidc's RemoteKeySet it fetches the keys again only
// for a key id it does not have, and at most once per keyRefetchInterval:
// a token with a known key id but a bad signature never causes a fetch.
type keySet struct {
	url    string
	client *http.Client
	algs   []jose.SignatureAlgorithm
	now    func() time.Time

	mu       sync.Mutex
	keys     []jose.JSONWebKey // protected by mu
	fetched  time.Time         // start of the last fetch, protected by mu
	fetchErr error             // of the last fetch, protected by mu
	fetch    chan struct{}     // closed when the fetch under way ends; nil when none is, protected by mu
}

func newKeySet(url string, client *http.Client, algs []string) *keySet {
	ks := &keySet{url: url, client: client, now: time.Now}
	for _, a := range algs {
		ks.algs = append(ks.algs, jose.SignatureAlgorithm(a))
	}
	if len(ks.algs) == 0 {
		ks.algs = []jose.SignatureAlgorithm{jose.RS256}
	}
	return ks
}

// VerifySignature checks the signature of a compact JWS and returns its
// payload.
func (ks *keySet) VerifySignature(ctx context.Context, raw string) ([]byte, error) {
	jws, err := jose.ParseSignedCompact(raw, ks.algs)
	if err != nil {
		return nil, fmt.Errorf("malformed jwt: %w", err)
	}
	if len(jws.Signatures) != 1 {
		return nil, errors.New("malformed jwt: want exactly one signature")
	}
	kid := jws.Signatures[0].Header.KeyID
	keys, known := ks.cached(kid)
	if !known {
		if keys, err = ks.refresh(ctx); err != nil {
			// go-oidc flattens this error into text: leave it where
			// Verify finds it.
			if slot, ok := ctx.Value(fetchErrKey{}).(*error); ok {
				*slot = err
			}
			return nil, err
		}
	}
	for _, k := range keys {
		if kid == "" || k.KeyID == kid {
			if payload, err := jws.Verify(&k); err == nil {
				return payload, nil
			}
		}
	}
	return nil, errSignature
}

// cached returns the cached keys and whether they hold kid (any key, for
// a token without a key id).
func (ks *keySet) cached(kid string) ([]jose.JSONWebKey, bool) {
	ks.mu.Lock()
	defer ks.mu.Unlock()
	return ks.keys, hasKey(ks.keys, kid)
}

func hasKey(keys []jose.JSONWebKey, kid string) bool {
	for _, k := range keys {
		if kid == "" || k.KeyID == kid {
			return true
		}
	}
	return false
}

// refresh fetches the keys again unless that happened less than
// keyRefetchInterval ago (retryDiscoveryAfter after a failed fetch);
// callers arriving during a fetch wait for it.
func (ks *keySet) refresh(ctx context.Context) ([]jose.JSONWebKey, error) {
	ks.mu.Lock()
	if wait := ks.fetch; wait != nil {
		ks.mu.Unlock()
		select {
		case <-wait:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		ks.mu.Lock()
		defer ks.mu.Unlock()
		return ks.keys, ks.fetchErr
	}
	since := ks.now().Sub(ks.fetched)
	if !ks.fetched.IsZero() && (since < retryDiscoveryAfter || ks.fetchErr == nil && since < keyRefetchInterval) {
		defer ks.mu.Unlock()
		return ks.keys, ks.fetchErr
	}
	done := make(chan struct{})
	ks.fetch, ks.fetched = done, ks.now()
	ks.mu.Unlock()

	keys, err := ks.get(ctx)

	ks.mu.Lock()
	defer ks.mu.Unlock()
	ks.fetch = nil
	close(done)
	ks.fetchErr = nil
	if err != nil {
		ks.fetchErr = fmt.Errorf("%w: signing keys: %w", ErrIssuerUnavailable, err)
		return nil, ks.fetchErr
	}
	ks.keys = keys
	return keys, nil
}

// get reads the JWKS document.
func (ks *keySet) get(ctx context.Context) ([]jose.JSONWebKey, error) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), keyFetchTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, ks.url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := ks.client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %s", ks.url, resp.Status)
	}
	var set jose.JSONWebKeySet
	if err := json.NewDecoder(io.LimitReader(resp.Body, maxKeySetBytes)).Decode(&set); err != nil {
		return nil, fmt.Errorf("GET %s: %w", ks.url, err)
	}
	return set.Keys, nil
}
