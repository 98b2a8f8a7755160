package devidp

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// FlowParams are the inputs of CodeFlow.
type FlowParams struct {
	// Issuer is the provider's issuer URL (discovery is fetched from it).
	Issuer string
	// ClientID is a public client; RedirectURI one of its redirect URIs.
	// Nothing needs to listen there: the flow stops at the redirect.
	ClientID, RedirectURI string
	// Username and Password are the user's credentials.
	Username, Password string
	// Scopes requested; nil is openid, profile and email.
	Scopes []string
}

// Tokens are the result of a successful flow.
type Tokens struct {
	// AccessToken is a signed JWT for the API's Authorization header.
	AccessToken string
	// IDToken is the OpenID ID token.
	IDToken string
	// Expiry is when the access token expires.
	Expiry time.Time
	// RefreshToken renews the tokens (refresh_token grant); empty unless
	// the login asked for the offline_access scope.
	RefreshToken string
}

// CodeFlow performs the authorization code flow with PKCE (S256) against
// a devidp issuer over HTTP, exactly as a browser and a public client do:
// /authorize, the login form POST, the callback, and the code exchange at
// the token endpoint (with state checked). client may be nil.
func CodeFlow(ctx context.Context, client *http.Client, p FlowParams) (*Tokens, error) {
	t, err := codeFlow(ctx, client, p)
	if err != nil {
		return nil, fmt.Errorf("devidp: code flow: %w", err)
	}
	return t, nil
}

func codeFlow(ctx context.Context, client *http.Client, p FlowParams) (*Tokens, error) {
	if client == nil {
		client = http.DefaultClient
	}
	// Follow no redirects automatically: each hop is checked.
	hc := *client
	hc.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	if hc.Jar != nil {
		hc.Jar = nil
	}

	var disco struct {
		Authorization string `json:"authorization_endpoint"`
		Token         string `json:"token_endpoint"`
	}
	if err := getJSON(ctx, &hc, strings.TrimSuffix(p.Issuer, "/")+"/.well-known/openid-configuration", &disco); err != nil {
		return nil, fmt.Errorf("discovery: %w", err)
	}
	scopes := p.Scopes
	if scopes == nil {
		scopes = []string{"openid", "profile", "email"}
	}
	verifier := randomID() + randomID()
	sum := sha256.Sum256([]byte(verifier))
	state := randomID()
	q := url.Values{
		"client_id":             {p.ClientID},
		"redirect_uri":          {p.RedirectURI},
		"response_type":         {"code"},
		"scope":                 {strings.Join(scopes, " ")},
		"state":                 {state},
		"nonce":                 {randomID()},
		"code_challenge":        {base64.RawURLEncoding.EncodeToString(sum[:])},
		"code_challenge_method": {"S256"},
	}
	loc, err := redirectOf(ctx, &hc, http.MethodGet, disco.Authorization+"?"+q.Encode(), nil)
	if err != nil {
		return nil, fmt.Errorf("authorize: %w", err)
	}
	id := loc.Query().Get("authRequestID")
	if id == "" {
		return nil, fmt.Errorf("authorize: redirected to %s, not to the login page", redactQuery(loc))
	}
	form := url.Values{"authRequestID": {id}, "username": {p.Username}, "password": {p.Password}}
	loginURL := *loc
	loginURL.RawQuery = ""
	loc, err = redirectOf(ctx, &hc, http.MethodPost, loginURL.String(), form)
	if err != nil {
		return nil, fmt.Errorf("login as %q: %w", p.Username, err)
	}
	// The provider's callback redirects to the client with the code.
	for range 3 {
		if strings.HasPrefix(loc.String(), p.RedirectURI) {
			break
		}
		if loc, err = redirectOf(ctx, &hc, http.MethodGet, loc.String(), nil); err != nil {
			return nil, fmt.Errorf("callback: %w", err)
		}
	}
	if !strings.HasPrefix(loc.String(), p.RedirectURI) {
		return nil, fmt.Errorf("never redirected to %s", p.RedirectURI)
	}
	if e := loc.Query().Get("error"); e != "" {
		return nil, fmt.Errorf("provider refused: %s: %s", e, loc.Query().Get("error_description"))
	}
	if loc.Query().Get("state") != state {
		return nil, errors.New("state mismatch in redirect")
	}
	code := loc.Query().Get("code")
	if code == "" {
		return nil, errors.New("redirect carries no code")
	}

	tokenForm := url.Values{
		"grant_type":    {"authorization_code"},
		"code":          {code},
		"redirect_uri":  {p.RedirectURI},
		"client_id":     {p.ClientID},
		"code_verifier": {verifier},
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, disco.Token, strings.NewReader(tokenForm.Encode()))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	resp, err := hc.Do(req)
	if err != nil {
		return nil, fmt.Errorf("token: %w", err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return nil, fmt.Errorf("token: %w", err)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("token: %s: %s", resp.Status, body)
	}
	var tr struct {
		AccessToken  string `json:"access_token"`
		IDToken      string `json:"id_token"`
		ExpiresIn    int64  `json:"expires_in"`
		RefreshToken string `json:"refresh_token"`
	}
	if err := json.Unmarshal(body, &tr); err != nil {
		return nil, fmt.Errorf("token: %w", err)
	}
	if tr.AccessToken == "" {
		return nil, errors.New("token: response has no access_token")
	}
	return &Tokens{AccessToken: tr.AccessToken, IDToken: tr.IDToken, Expiry: time.Now().Add(time.Duration(tr.ExpiresIn) * time.Second), RefreshToken: tr.RefreshToken}, nil
}

func getJSON(ctx context.Context, hc *http.Client, u string, v any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %s", u, resp.Status)
	}
	return json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(v)
}

// redirectOf sends one request and returns its redirect target; any other
// answer is an error quoting the body.
func redirectOf(ctx context.Context, hc *http.Client, method, u string, form url.Values) (*url.URL, error) {
	var body io.Reader
	if form != nil {
		body = strings.NewReader(form.Encode())
	}
	req, err := http.NewRequestWithContext(ctx, method, u, body)
	if err != nil {
		return nil, err
	}
	if form != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	resp, err := hc.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusFound && resp.StatusCode != http.StatusSeeOther {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		return nil, fmt.Errorf("%s (%s)", resp.Status, strings.TrimSpace(stripTags(string(b))))
	}
	loc, err := resp.Location()
	if err != nil {
		return nil, err
	}
	return loc, nil
}

func redactQuery(u *url.URL) string {
	c := *u
	c.RawQuery = ""
	return c.String()
}

// stripTags keeps error pages readable in error messages.
func stripTags(s string) string {
	var b strings.Builder
	in := false
	for _, r := range s {
		switch {
		case r == '<':
			in = true
		case r == '>':
			in = false
		case !in:
			b.WriteRune(r)
		}
	}
	return strings.Join(strings.Fields(b.String()), " ")
}
