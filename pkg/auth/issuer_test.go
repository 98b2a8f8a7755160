package auth_test

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-jose/go-jose/v4"

	"github.com/flexplane/flexplane/pkg/auth"
)

// countingIssuer is a minimal OpenID issuer on loopback that signs what a
// test asks it to and counts the fetches of its signing keys.
type countingIssuer struct {
	url     string
	key     *rsa.PrivateKey
	kid     string
	fetches atomic.Int32
}

func newCountingIssuer(t *testing.T) *countingIssuer {
	t.Helper()
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	is := &countingIssuer{key: key, kid: "key-1"}
	mux := http.NewServeMux()
	mux.HandleFunc("/.well-known/openid-configuration", func(w http.ResponseWriter, r *http.Request) {
		_ = json.NewEncoder(w).Encode(map[string]any{
			"issuer": is.url, "jwks_uri": is.url + "/keys", "authorization_endpoint": is.url + "/auth",
			"token_endpoint": is.url + "/token", "id_token_signing_alg_values_supported": []string{"RS256"},
		})
	})
	mux.HandleFunc("/keys", func(w http.ResponseWriter, r *http.Request) {
		is.fetches.Add(1)
		_ = json.NewEncoder(w).Encode(jose.JSONWebKeySet{Keys: []jose.JSONWebKey{
			{Key: &key.PublicKey, KeyID: is.kid, Algorithm: "RS256", Use: "sig"}}})
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	is.url = srv.URL
	return is
}

// sign returns a JWT of claims signed with key under key id kid.
func sign(t *testing.T, key *rsa.PrivateKey, kid string, claims map[string]any) string {
	t.Helper()
	signer, err := jose.NewSigner(jose.SigningKey{Algorithm: jose.RS256, Key: key},
		(&jose.SignerOptions{}).WithType("JWT").WithHeader("kid", kid))
	if err != nil {
		t.Fatal(err)
	}
	payload, _ := json.Marshal(claims)
	jws, err := signer.Sign(payload)
	if err != nil {
		t.Fatal(err)
	}
	tok, err := jws.CompactSerialize()
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// verifier returns a verifier of the issuer's tokens for client "portal".
func (is *countingIssuer) verifier(t *testing.T) *auth.Verifier {
	t.Helper()
	v, err := auth.NewVerifier(context.Background(), auth.Config{Issuer: is.url, Audience: "portal"})
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// claims are those of a good access token for client "portal".
func (is *countingIssuer) claims() map[string]any {
	now := time.Now()
	return map[string]any{"iss": is.url, "sub": "bob", "aud": "portal", "iat": now.Unix(), "exp": now.Add(time.Hour).Unix()}
}

// Tokens with a bad signature cost the issuer nothing: a known key id is
// never refetched, an unknown one at most once in a while.
func TestBadTokensDoNotRefetchKeys(t *testing.T) {
	t.Parallel()
	is := newCountingIssuer(t)
	ctx := context.Background()
	v := is.verifier(t)
	if _, err := v.Verify(ctx, sign(t, is.key, is.kid, is.claims())); err != nil {
		t.Fatal(err)
	}
	if n := is.fetches.Load(); n != 1 {
		t.Fatalf("%d key fetches for the first token, want 1", n)
	}
	forger, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 100 {
		kid := is.kid // the issuer's key id, another key
		if i%2 == 1 {
			kid = "made-up-" + string(rune('a'+i%26))
		}
		if _, err := v.Verify(ctx, sign(t, forger, kid, is.claims())); !errors.Is(err, auth.ErrUnauthenticated) {
			t.Fatalf("forged token %d: %v", i, err)
		}
	}
	if n := is.fetches.Load(); n > 2 {
		t.Errorf("100 badly signed tokens made %d key fetches, want at most 2 in all", n)
	}
	if _, err := v.Verify(ctx, sign(t, is.key, is.kid, is.claims())); err != nil {
		t.Fatalf("a good token after them: %v", err)
	}
}

// Tokens go-oidc would accept that must be refused; what the caller is
// told holds none of the verifier's internals.
func TestTokensRefused(t *testing.T) {
	t.Parallel()
	is := newCountingIssuer(t)
	ctx := context.Background()
	v := is.verifier(t)
	with := func(change func(map[string]any)) string {
		c := is.claims()
		change(c)
		return sign(t, is.key, is.kid, c)
	}
	for name, tc := range map[string]struct {
		token, reason string
	}{
		"exp a string":                 {with(func(c map[string]any) { c["exp"] = strconv.FormatInt(c["exp"].(int64), 10) }), `the token's "exp" claim is not a number`},
		"iat a day ahead":              {with(func(c map[string]any) { c["iat"] = time.Now().Add(24 * time.Hour).Unix() }), "the token is issued in the future"},
		"audiences, azp another":       {with(func(c map[string]any) { c["aud"] = []string{"portal", "other-app"}; c["azp"] = "other-app" }), "the token was not issued to this application"},
		"expired":                      {with(func(c map[string]any) { c["exp"] = time.Now().Add(-time.Hour).Unix() }), "the token has expired"},
		"another key":                  {sign(t, mustKey(t), is.kid, is.claims()), "the token's signature is not valid"},
		"another issuer":               {with(func(c map[string]any) { c["iss"] = "https://elsewhere.example" }), "the token was issued by another provider"},
		"another audience":             {with(func(c map[string]any) { c["aud"] = "other-app" }), "the token was not issued to this application"},
		"not yet valid (nbf ahead 1d)": {with(func(c map[string]any) { c["nbf"] = time.Now().Add(24 * time.Hour).Unix() }), "the token is not valid yet"},
	} {
		_, err := v.Verify(ctx, tc.token)
		if !errors.Is(err, auth.ErrUnauthenticated) {
			t.Errorf("%s: %v, want refused", name, err)
			continue
		}
		if got := auth.PublicReason(err); got != "unauthenticated: "+tc.reason {
			t.Errorf("%s: told %q, want %q", name, got, "unauthenticated: "+tc.reason)
		}
	}
	// A token for several audiences whose azp is this client passes.
	if _, err := v.Verify(ctx, with(func(c map[string]any) { c["aud"] = []string{"portal", "project"}; c["azp"] = "portal" })); err != nil {
		t.Errorf("audiences with azp portal: %v", err)
	}
}

// With CLIClientID, tokens of the command line's client (aud or azp
// naming it, as Zitadel's tokens of one project's apps do) are accepted as
// the portal's; a third client's still are not, nor are the command
// line's by a verifier that names no CLIClientID.
func TestCLIClientTokens(t *testing.T) {
	t.Parallel()
	is := newCountingIssuer(t)
	ctx := context.Background()
	v, err := auth.NewVerifier(ctx, auth.Config{Issuer: is.url, Audience: "portal", CLIClientID: "flexctl"})
	if err != nil {
		t.Fatal(err)
	}
	portalOnly := is.verifier(t)
	with := func(aud, azp any) string {
		c := is.claims()
		c["aud"] = aud
		if azp != nil {
			c["azp"] = azp
		}
		return sign(t, is.key, is.kid, c)
	}
	for name, tok := range map[string]string{
		"aud flexctl":                      with("flexctl", nil),
		"aud flexctl, azp flexctl":         with([]string{"flexctl"}, "flexctl"),
		"project's audiences, azp flexctl": with([]string{"project", "portal", "flexctl"}, "flexctl"),
	} {
		p, err := v.Verify(ctx, tok)
		if err != nil || p.Subject != "bob" {
			t.Errorf("%s: %v", name, err)
		}
		if _, err := portalOnly.Verify(ctx, tok); auth.PublicReason(err) != "unauthenticated: the token was not issued to this application" {
			t.Errorf("%s without CLIClientID: %v, want refused", name, err)
		}
	}
	for name, tok := range map[string]string{
		"aud another":              with("other-app", nil),
		"aud flexctl, azp another": with([]string{"flexctl", "other-app"}, "other-app"),
		"aud empty":                with("", nil),
	} {
		if _, err := v.Verify(ctx, tok); auth.PublicReason(err) != "unauthenticated: the token was not issued to this application" {
			t.Errorf("%s: %v, want refused as another application's", name, err)
		}
	}
}

func mustKey(t *testing.T) *rsa.PrivateKey {
	t.Helper()
	k, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	return k
}
