package devidp_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"golang.org/x/oauth2"

	"github.com/flexplane/flexplane/pkg/auth"
	"github.com/flexplane/flexplane/pkg/dev/devidp"
)

// TestDeviceAuthorizationGrant: a client asks for a device code, a wrong
// password or an unknown user code at the device page completes nothing,
// the right ones do, and the client's poll gets an access token that
// verifies with the user's roles; the device code is exchanged once.
func TestDeviceAuthorizationGrant(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	srv := start(t, t.TempDir(), "")
	var d struct {
		Token  string `json:"token_endpoint"`
		Device string `json:"device_authorization_endpoint"`
	}
	res, err := http.Get(srv.Issuer() + "/.well-known/openid-configuration")
	if err != nil {
		t.Fatal(err)
	}
	err = json.NewDecoder(res.Body).Decode(&d)
	res.Body.Close()
	if err != nil || d.Device == "" {
		t.Fatalf("discovery names no device authorization endpoint: %+v %v", d, err)
	}
	cfg := oauth2.Config{ClientID: portal, Scopes: []string{"openid", "profile"},
		Endpoint: oauth2.Endpoint{DeviceAuthURL: d.Device, TokenURL: d.Token, AuthStyle: oauth2.AuthStyleInParams}}
	da, err := cfg.DeviceAuth(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(da.VerificationURI, srv.Issuer()+devidp.DevicePath) || da.UserCode == "" {
		t.Fatalf("device authorization: %+v", da)
	}
	post := func(code, user, pw string) int {
		t.Helper()
		res, err := http.PostForm(srv.Issuer()+devidp.DevicePath, url.Values{"user_code": {code}, "username": {user}, "password": {pw}})
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		return res.StatusCode
	}
	if got := post(da.UserCode, "alice", "wrong"); got != http.StatusUnauthorized {
		t.Errorf("wrong password: %d", got)
	}
	if got := post("BCDF-GHJK", "alice", "alice-pw"); got != http.StatusBadRequest {
		t.Errorf("unknown code: %d", got)
	}
	if got := post(strings.ToLower(da.UserCode), "alice", "alice-pw"); got != http.StatusOK {
		t.Fatalf("sign-in: %d", got)
	}
	tok, err := cfg.DeviceAccessToken(ctx, da)
	if err != nil {
		t.Fatal(err)
	}
	p, err := verifier(t, srv.Issuer()).Verify(ctx, tok.AccessToken)
	if err != nil {
		t.Fatal(err)
	}
	if p.Subject != "alice" || p.VDCRoles["prod"] != auth.RoleMember {
		t.Fatalf("principal: %+v", p)
	}
	if _, err := cfg.Exchange(ctx, "", oauth2.SetAuthURLParam("grant_type", "urn:ietf:params:oauth:grant-type:device_code"),
		oauth2.SetAuthURLParam("device_code", da.DeviceCode)); err == nil {
		t.Error("the device code was exchanged twice")
	}
}
