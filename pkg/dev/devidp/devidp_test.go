package devidp_test

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/flexplane/flexplane/pkg/auth"
	"github.com/flexplane/flexplane/pkg/dev/devidp"
)

const (
	portal   = "flexplane-portal"
	redirect = "http://127.0.0.1:3000/auth/callback"
)

func start(t *testing.T, keyDir, addr string) *devidp.Server {
	t.Helper()
	srv, err := devidp.New(devidp.Config{
		Addr:   addr,
		KeyDir: keyDir,
		Users: []devidp.User{
			{Username: "alice", Password: "alice-pw", Name: "Alice", Email: "alice@example.test",
				Roles: []string{auth.VDCRoleKey("prod", auth.RoleMember), auth.VDCRoleKey("dev", auth.RoleViewer)}},
			{Username: "admin", Password: "admin-pw", Roles: []string{auth.PlatformAdminRole}},
		},
		Clients: []devidp.Client{{ID: portal, RedirectURIs: []string{redirect}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	return srv
}

func verifier(t *testing.T, issuer string) *auth.Verifier {
	t.Helper()
	v, err := auth.NewVerifier(context.Background(), auth.Config{Issuer: issuer, Audience: portal})
	if err != nil {
		t.Fatal(err)
	}
	return v
}

var noRedirect = &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}

// mustRedirect returns a check for (resp, err) that it is a redirect, and
// its target.
func mustRedirect(t *testing.T) func(*http.Response, error) *url.URL {
	return func(resp *http.Response, err error) *url.URL { return checkRedirect(t, resp, err) }
}

func checkRedirect(t *testing.T, resp *http.Response, err error) *url.URL {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusFound && resp.StatusCode != http.StatusSeeOther {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("%s %s: %s, want a redirect: %s", resp.Request.Method, resp.Request.URL, resp.Status, b)
	}
	loc, err := resp.Location()
	if err != nil {
		t.Fatal(err)
	}
	return loc
}

// The browser's view of the authorization code flow with PKCE, step by step.
func TestAuthorizationCodeFlowWithPKCE(t *testing.T) {
	t.Parallel()
	srv := start(t, t.TempDir(), "")
	verifierStr := "a-sufficiently-long-pkce-code-verifier-0123456789"
	sum := sha256.Sum256([]byte(verifierStr))
	q := url.Values{
		"client_id": {portal}, "redirect_uri": {redirect}, "response_type": {"code"},
		"scope": {"openid profile email"}, "state": {"st-123"}, "nonce": {"n-1"},
		"code_challenge": {base64.RawURLEncoding.EncodeToString(sum[:])}, "code_challenge_method": {"S256"},
	}
	login := mustRedirect(t)(noRedirect.Get(srv.Issuer() + "/authorize?" + q.Encode()))
	id := login.Query().Get("authRequestID")
	if id == "" {
		t.Fatalf("authorize redirected to %s", login)
	}

	// The login page is a form for this request.
	resp, err := http.Get(login.String())
	if err != nil {
		t.Fatal(err)
	}
	page, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.Contains(string(page), `name="password"`) || !strings.Contains(string(page), id) {
		t.Fatalf("login page: %s\n%s", resp.Status, page)
	}

	// A wrong password is refused and the request stays open.
	resp, err = noRedirect.PostForm(srv.Issuer()+"/login", url.Values{"authRequestID": {id}, "username": {"alice"}, "password": {"nope"}})
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("wrong password: %s", resp.Status)
	}

	cb := mustRedirect(t)(noRedirect.PostForm(srv.Issuer()+"/login", url.Values{"authRequestID": {id}, "username": {"alice"}, "password": {"alice-pw"}}))
	back := mustRedirect(t)(noRedirect.Get(cb.String()))
	if !strings.HasPrefix(back.String(), redirect) || back.Query().Get("state") != "st-123" {
		t.Fatalf("callback redirected to %s", back)
	}
	code := back.Query().Get("code")

	exchange := func(verifier string) *http.Response {
		form := url.Values{"grant_type": {"authorization_code"}, "code": {code}, "redirect_uri": {redirect}, "client_id": {portal}}
		if verifier != "" {
			form.Set("code_verifier", verifier)
		}
		resp, err := http.PostForm(srv.Issuer()+"/oauth/token", form)
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	// Without the right verifier the code is worthless.
	for _, bad := range []string{"", "another-verifier-of-sufficient-length-0123456789"} {
		resp := exchange(bad)
		resp.Body.Close()
		if resp.StatusCode == http.StatusOK {
			t.Fatalf("code exchanged with verifier %q", bad)
		}
	}
	resp = exchange(verifierStr)
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), `"access_token"`) {
		t.Fatalf("token: %s %s", resp.Status, body)
	}
}

func TestLoginTokensCarryRolesAndSurviveRestart(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	keyDir := t.TempDir()
	srv := start(t, keyDir, "")
	tok, err := srv.Login(ctx, portal, "alice", "alice-pw")
	if err != nil {
		t.Fatal(err)
	}
	if time.Until(tok.Expiry) < 50*time.Minute || tok.IDToken == "" {
		t.Fatalf("tokens: %+v", tok)
	}
	p, err := verifier(t, srv.Issuer()).Verify(ctx, tok.AccessToken)
	if err != nil {
		t.Fatal(err)
	}
	if p.Subject != "alice" || p.Name != "Alice" || p.Email != "alice@example.test" || p.PlatformAdmin ||
		p.VDCRoles["prod"] != auth.RoleMember || p.VDCRoles["dev"] != auth.RoleViewer || len(p.VDCRoles) != 2 {
		t.Fatalf("principal: %+v", p)
	}
	if _, err := srv.Login(ctx, portal, "alice", "wrong"); err == nil || !strings.Contains(err.Error(), "401") {
		t.Fatalf("wrong password: %v", err)
	}
	if _, err := srv.Login(ctx, portal, "mallory", "x"); err == nil {
		t.Fatal("unknown user logged in")
	}

	// Same key directory and address after a restart: old tokens verify.
	addr := strings.TrimPrefix(srv.Issuer(), "http://")
	if err := srv.Close(); err != nil {
		t.Fatal(err)
	}
	again := start(t, keyDir, addr)
	if again.Issuer() != srv.Issuer() {
		t.Fatalf("issuer changed: %s", again.Issuer())
	}
	if _, err := verifier(t, again.Issuer()).Verify(ctx, tok.AccessToken); err != nil {
		t.Fatalf("token from before the restart: %v", err)
	}
}

func TestConfigErrors(t *testing.T) {
	t.Parallel()
	for _, cfg := range []devidp.Config{
		{},
		{KeyDir: t.TempDir(), Users: []devidp.User{{Username: "x"}}},
		{KeyDir: t.TempDir(), Clients: []devidp.Client{{ID: "c"}}},
		{KeyDir: t.TempDir(), Users: []devidp.User{{Username: "x", Password: "p"}, {Username: "x", Password: "q"}}},
	} {
		if _, err := devidp.New(cfg); err == nil {
			t.Errorf("config %+v accepted", cfg)
		}
	}
}

// TestRefreshTokensRotate: as Zitadel does, a login with offline_access gets
// a refresh token; the refresh_token grant answers fresh tokens (a valid
// access token and ID token) and a new refresh token, and the used one no
// longer works. Without offline_access there is no refresh token.
func TestRefreshTokensRotate(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	srv := start(t, t.TempDir(), "")
	login := func(scopes ...string) *devidp.Tokens {
		t.Helper()
		tok, err := devidp.CodeFlow(ctx, nil, devidp.FlowParams{Issuer: srv.Issuer(), ClientID: portal, RedirectURI: redirect,
			Username: "alice", Password: "alice-pw", Scopes: scopes})
		if err != nil {
			t.Fatal(err)
		}
		return tok
	}
	if tok := login("openid", "profile"); tok.RefreshToken != "" {
		t.Fatalf("a refresh token without offline_access: %+v", tok)
	}
	tok := login("openid", "profile", "email", "offline_access")
	if tok.RefreshToken == "" {
		t.Fatal("no refresh token with offline_access")
	}
	refresh := func(rt string) (int, map[string]any) {
		t.Helper()
		resp, err := http.PostForm(srv.Issuer()+"/oauth/token", url.Values{"grant_type": {"refresh_token"}, "refresh_token": {rt}, "client_id": {portal}})
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var body map[string]any
		_ = json.NewDecoder(resp.Body).Decode(&body)
		return resp.StatusCode, body
	}
	rt := tok.RefreshToken
	for i := range 2 {
		status, body := refresh(rt)
		next, _ := body["refresh_token"].(string)
		access, _ := body["access_token"].(string)
		if status != http.StatusOK || next == "" || next == rt || access == "" || body["id_token"] == nil {
			t.Fatalf("refresh %d: %d %v", i, status, body)
		}
		p, err := verifier(t, srv.Issuer()).Verify(ctx, access)
		if err != nil || p.Subject != "alice" || p.VDCRoles["prod"] != auth.RoleMember {
			t.Fatalf("refreshed access token: %+v %v", p, err)
		}
		if status, body := refresh(rt); status != http.StatusBadRequest || body["error"] != "invalid_grant" {
			t.Fatalf("a used refresh token again: %d %v", status, body)
		}
		rt = next
	}
}
