package auth_test

import (
	"context"
	"encoding/base64"
	"errors"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/flexplane/flexplane/pkg/auth"
	"github.com/flexplane/flexplane/pkg/dev/devidp"
	"github.com/flexplane/flexplane/pkg/dev/poll"
)

func TestPrincipalFromClaims(t *testing.T) {
	t.Parallel()
	zitadel := map[string]any{
		"iss":  "https://id.example.com",
		"sub":  "u1",
		"name": "User One",
		auth.ZitadelRolesClaim: map[string]any{
			"vdc:prod:viewer":            map[string]any{"org": "example.com"},
			"vdc:prod:admin":             map[string]any{"org": "example.com"},
			"vdc:dev:member":             map[string]any{"org": "example.com"},
			"vdc:bad:owner":              map[string]any{},
			"some-other-app-role":        map[string]any{},
			auth.PlatformAdminRole + "x": map[string]any{},
		},
	}
	p, err := auth.PrincipalFromClaims(zitadel, auth.ClaimNames{})
	if err != nil {
		t.Fatal(err)
	}
	if p.PlatformAdmin || p.Issuer != "https://id.example.com" || p.Subject != "u1" || p.Name != "User One" || len(p.VDCRoles) != 2 || p.VDCRoles["prod"] != auth.RoleAdmin || p.VDCRoles["dev"] != auth.RoleMember {
		t.Fatalf("principal: %+v", p)
	}
	if role, ok := p.RoleIn("staging"); ok {
		t.Fatalf("role in staging: %s", role)
	}

	// A configurable claim holding an array of role keys.
	p, err = auth.PrincipalFromClaims(map[string]any{
		"sub": "u2", "preferred_username": "two", "groups": []any{"platform-admin"},
	}, auth.ClaimNames{Roles: "groups"})
	if err != nil {
		t.Fatal(err)
	}
	if !p.PlatformAdmin || p.Name != "two" {
		t.Fatalf("principal: %+v", p)
	}
	if role, ok := p.RoleIn("anything"); !ok || role != auth.RoleAdmin {
		t.Fatalf("platform admin role: %s %v", role, ok)
	}

	for _, bad := range []map[string]any{
		{"name": "no subject"},
		{"sub": "x", auth.ZitadelRolesClaim: "platform-admin"},
		{"sub": "x", auth.ZitadelRolesClaim: []any{1}},
	} {
		if _, err := auth.PrincipalFromClaims(bad, auth.ClaimNames{}); err == nil {
			t.Errorf("claims %v accepted", bad)
		}
	}
}

func TestBearerToken(t *testing.T) {
	t.Parallel()
	if tok, err := auth.BearerToken("Bearer abc.def"); err != nil || tok != "abc.def" {
		t.Fatalf("got %q %v", tok, err)
	}
	if _, err := auth.BearerToken(""); !errors.Is(err, auth.ErrNoToken) {
		t.Fatalf("empty: %v", err)
	}
	for _, h := range []string{"Basic abc", "Bearer", "Bearer  ", "abc"} {
		if _, err := auth.BearerToken(h); !errors.Is(err, auth.ErrUnauthenticated) {
			t.Errorf("%q: %v", h, err)
		}
	}
}

func TestVerifyRealTokens(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	srv, err := devidp.New(devidp.Config{
		KeyDir: t.TempDir(),
		Users:  []devidp.User{{Username: "bob", Password: "pw", Roles: []string{auth.VDCRoleKey("staging", auth.RoleMember)}}},
		Clients: []devidp.Client{
			{ID: "portal", RedirectURIs: []string{"http://127.0.0.1:1/cb"}},
			{ID: "other-app", RedirectURIs: []string{"http://127.0.0.1:1/cb"}},
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })

	var clock time.Time // zero: real time
	v, err := auth.NewVerifier(ctx, auth.Config{Issuer: srv.Issuer(), Audience: "portal", Now: func() time.Time {
		if clock.IsZero() {
			return time.Now()
		}
		return clock
	}})
	if err != nil {
		t.Fatal(err)
	}
	tok, err := srv.Login(ctx, "portal", "bob", "pw")
	if err != nil {
		t.Fatal(err)
	}
	p, err := v.Verify(ctx, tok.AccessToken)
	if err != nil {
		t.Fatal(err)
	}
	if p.Subject != "bob" || p.VDCRoles["staging"] != auth.RoleMember {
		t.Fatalf("principal %+v", p)
	}
	// The ID token is for the same audience and verifies too.
	if _, err := v.Verify(ctx, tok.IDToken); err != nil {
		t.Fatalf("id token: %v", err)
	}

	other, err := srv.Login(ctx, "other-app", "bob", "pw")
	if err != nil {
		t.Fatal(err)
	}
	parts := strings.Split(tok.AccessToken, ".")
	payload, _ := base64.RawURLEncoding.DecodeString(parts[1])
	forged := strings.Replace(string(payload), `"staging"`, `"prodxyz"`, 1)
	forged = strings.Replace(forged, "vdc:staging:member", "platform-admin", 1)
	tampered := parts[0] + "." + base64.RawURLEncoding.EncodeToString([]byte(forged)) + "." + parts[2]

	cases := map[string]struct {
		token string
		want  string
	}{
		"garbage":        {"not-a-jwt", "malformed"},
		"wrong audience": {other.AccessToken, "audience"},
		"tampered":       {tampered, "signature"},
	}
	for name, c := range cases {
		_, err := v.Verify(ctx, c.token)
		if !errors.Is(err, auth.ErrUnauthenticated) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: got %v, want unauthenticated mentioning %q", name, err, c.want)
		}
	}
	clock = time.Now().Add(2 * time.Hour)
	if _, err := v.Verify(ctx, tok.AccessToken); !errors.Is(err, auth.ErrUnauthenticated) || !strings.Contains(err.Error(), "expired") {
		t.Fatalf("expired: %v", err)
	}
}

func TestNewVerifierNeedsIssuer(t *testing.T) {
	t.Parallel()
	if _, err := auth.NewVerifier(context.Background(), auth.Config{Audience: "x"}); err == nil {
		t.Fatal("no issuer accepted")
	}
	// Nothing listens on port 1 of loopback: discovery fails.
	if _, err := auth.NewVerifier(context.Background(), auth.Config{Issuer: "http://127.0.0.1:1", Audience: "x"}); err == nil {
		t.Fatal("unreachable issuer accepted")
	}
}

// TestLazyVerifierWaitsForTheIssuer: a server may start before its identity
// provider; until the provider answers, tokens are not judged (neither
// accepted nor refused as unauthenticated), and once it answers they are.
func TestLazyVerifierWaitsForTheIssuer(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nothing listens there until the provider starts

	v, err := auth.NewLazyVerifier(auth.Config{Issuer: "http://" + addr, Audience: "portal"})
	if err != nil {
		t.Fatal(err)
	}
	_, err = v.Verify(ctx, "not-even-a-jwt")
	if !errors.Is(err, auth.ErrIssuerUnavailable) || errors.Is(err, auth.ErrUnauthenticated) {
		t.Fatalf("verify with the issuer down: %v, want ErrIssuerUnavailable only", err)
	}
	if err := v.Ready(ctx); !errors.Is(err, auth.ErrIssuerUnavailable) {
		t.Fatalf("ready with the issuer down: %v", err)
	}

	srv := startIdP(t, addr, devidp.User{Username: "bob", Password: "pw", Roles: []string{auth.VDCRoleKey("staging", auth.RoleMember)}})
	tok, err := srv.Login(ctx, "portal", "bob", "pw")
	if err != nil {
		t.Fatal(err)
	}
	poll.Until(t, 15*time.Second, "the verifier reaching the issuer", func() error {
		p, err := v.Verify(ctx, tok.AccessToken)
		if err != nil {
			if !errors.Is(err, auth.ErrIssuerUnavailable) {
				t.Fatalf("verify once the issuer is up: %v", err)
			}
			return err
		}
		if role, ok := p.RoleIn("staging"); !ok || role != auth.RoleMember {
			t.Fatalf("principal %+v", p)
		}
		return nil
	})
	// Discovered once, a bad token is refused as unauthenticated.
	if _, err := v.Verify(ctx, "not-even-a-jwt"); !errors.Is(err, auth.ErrUnauthenticated) {
		t.Fatalf("bad token: %v", err)
	}
}

// TestKubeUserIsTheSubject: the user name of a tenant cluster's kubeconfig
// is the verified token's subject, never its email claim: a user whose
// email claim is another user's address gets a name of its own.
func TestKubeUserIsTheSubject(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	srv := startIdP(t, "",
		devidp.User{Username: "alice", Password: "pw", Email: "alice@example.test", Roles: []string{auth.VDCRoleKey("prod", auth.RoleMember)}},
		devidp.User{Username: "eve", Password: "pw", Email: "alice@example.test", Roles: []string{auth.VDCRoleKey("prod", auth.RoleMember)}})
	v, err := auth.NewVerifier(ctx, auth.Config{Issuer: srv.Issuer(), Audience: "portal"})
	if err != nil {
		t.Fatal(err)
	}
	for _, user := range []string{"alice", "eve"} {
		tok, err := srv.Login(ctx, "portal", user, "pw")
		if err != nil {
			t.Fatal(err)
		}
		p, err := v.Verify(ctx, tok.AccessToken)
		if err != nil {
			t.Fatal(err)
		}
		if p.Email != "alice@example.test" {
			t.Fatalf("%s's token claims email %q", user, p.Email)
		}
		if got := p.KubeUser(); got != "oidc:"+user {
			t.Errorf("%s's kubeconfig user %q, want oidc:%s", user, got, user)
		}
	}
}

// startIdP starts the development identity provider at addr ("" for any
// port) with users and one client, "portal"; it stops with the test.
func startIdP(t *testing.T, addr string, users ...devidp.User) *devidp.Server {
	t.Helper()
	srv, err := devidp.New(devidp.Config{Addr: addr, KeyDir: t.TempDir(), Users: users,
		Clients: []devidp.Client{{ID: "portal", RedirectURIs: []string{"http://127.0.0.1:1/cb"}}}})
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	return srv
}
