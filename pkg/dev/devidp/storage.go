package devidp

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	jose "github.com/go-jose/go-jose/v4"
	"github.com/zitadel/oidc/v3/pkg/oidc"
	"github.com/zitadel/oidc/v3/pkg/op"

	"github.com/flexplane/flexplane/pkg/auth"
)

// authRequest is one authorization request, from /authorize until the code
// is exchanged. It implements op.AuthRequest.
type authRequest struct {
	id            string
	clientID      string
	redirectURI   string
	scopes        []string
	state         string
	nonce         string
	responseType  oidc.ResponseType
	responseMode  oidc.ResponseMode
	codeChallenge *oidc.CodeChallenge
	created       time.Time
	// Set by a successful login.
	userID   string
	authTime time.Time
}

func (a *authRequest) GetID() string                         { return a.id }
func (a *authRequest) GetACR() string                        { return "" }
func (a *authRequest) GetAMR() []string                      { return []string{"pwd"} }
func (a *authRequest) GetAudience() []string                 { return []string{a.clientID} }
func (a *authRequest) GetAuthTime() time.Time                { return a.authTime }
func (a *authRequest) GetClientID() string                   { return a.clientID }
func (a *authRequest) GetCodeChallenge() *oidc.CodeChallenge { return a.codeChallenge }
func (a *authRequest) GetNonce() string                      { return a.nonce }
func (a *authRequest) GetRedirectURI() string                { return a.redirectURI }
func (a *authRequest) GetResponseType() oidc.ResponseType    { return a.responseType }
func (a *authRequest) GetResponseMode() oidc.ResponseMode    { return a.responseMode }
func (a *authRequest) GetScopes() []string                   { return a.scopes }
func (a *authRequest) GetState() string                      { return a.state }
func (a *authRequest) GetSubject() string                    { return a.userID }
func (a *authRequest) Done() bool                            { return a.userID != "" }

// accessToken is what the provider remembers about an issued access token
// (for userinfo, introspection and revocation; the JWT itself is
// self-contained).
type accessToken struct {
	subject  string
	clientID string
	scopes   []string
	audience []string
	expiry   time.Time
}

// refreshToken is a refresh token the provider issued and the grant it
// renews. It implements op.RefreshTokenRequest. As Zitadel does, each use
// rotates it: the refresh_token grant answers a new one and the used one
// stops working.
type refreshToken struct {
	subject  string
	clientID string
	scopes   []string
	audience []string
	amr      []string
	authTime time.Time
	expiry   time.Time
}

func (t *refreshToken) GetAMR() []string                 { return t.amr }
func (t *refreshToken) GetAudience() []string            { return t.audience }
func (t *refreshToken) GetAuthTime() time.Time           { return t.authTime }
func (t *refreshToken) GetClientID() string              { return t.clientID }
func (t *refreshToken) GetScopes() []string              { return t.scopes }
func (t *refreshToken) GetSubject() string               { return t.subject }
func (t *refreshToken) SetCurrentScopes(scopes []string) { t.scopes = scopes }

// client implements op.Client for a configured Client.
type client struct {
	Client
	loginURL string // absolute URL of the login page, without query
	lifetime time.Duration
}

func (c *client) GetID() string                       { return c.ID }
func (c *client) RedirectURIs() []string              { return c.Client.RedirectURIs }
func (c *client) PostLogoutRedirectURIs() []string    { return c.Client.PostLogoutRedirectURIs }
func (c *client) LoginURL(id string) string           { return c.loginURL + "?authRequestID=" + id }
func (c *client) AccessTokenType() op.AccessTokenType { return op.AccessTokenTypeJWT }
func (c *client) IDTokenLifetime() time.Duration      { return c.lifetime }
func (c *client) ResponseTypes() []oidc.ResponseType {
	return []oidc.ResponseType{oidc.ResponseTypeCode}
}
func (c *client) GrantTypes() []oidc.GrantType {
	return []oidc.GrantType{oidc.GrantTypeCode, oidc.GrantTypeRefreshToken, oidc.GrantTypeDeviceCode}
}
func (c *client) ApplicationType() op.ApplicationType {
	if c.Secret == "" {
		return op.ApplicationTypeUserAgent
	}
	return op.ApplicationTypeWeb
}
func (c *client) AuthMethod() oidc.AuthMethod {
	if c.Secret == "" {
		return oidc.AuthMethodNone // a public client: PKCE is required
	}
	return oidc.AuthMethodBasic
}

// DevMode allows http redirect URIs (a portal on a loopback dev server).
func (c *client) DevMode() bool { return true }
func (c *client) RestrictAdditionalIdTokenScopes() func([]string) []string {
	return func(s []string) []string { return s }
}
func (c *client) RestrictAdditionalAccessTokenScopes() func([]string) []string {
	return func(s []string) []string { return s }
}
func (c *client) IsScopeAllowed(string) bool           { return false }
func (c *client) IDTokenUserinfoClaimsAssertion() bool { return true }
func (c *client) ClockSkew() time.Duration             { return 0 }

// storage implements op.Storage in memory; only the keys persist (on disk,
// see loadKeys).
type storage struct {
	key               *signingKey
	users             map[string]User
	clients           map[string]*client
	lifetime          time.Duration
	refreshLifetime   time.Duration
	renewableLifetime time.Duration
	orgID             string
	orgDomain         string

	mu       sync.Mutex
	requests map[string]*authRequest  // protected by mu
	codes    map[string]string        // code -> request id; protected by mu
	tokens   map[string]*accessToken  // protected by mu
	refresh  map[string]*refreshToken // by token; protected by mu
	devices  map[string]*deviceAuth   // by device code; protected by mu
}

var (
	_ op.Storage                    = (*storage)(nil)
	_ op.DeviceAuthorizationStorage = (*storage)(nil)
)

// maxPendingAge bounds how long an unfinished authorization request is kept.
const maxPendingAge = 15 * time.Minute

func randomID() string {
	b := make([]byte, 18)
	_, _ = rand.Read(b) // crypto/rand.Read never fails
	return base64.RawURLEncoding.EncodeToString(b)
}

type notFound struct{ what string }

func (e notFound) Error() string { return e.what + " not found" }
func (notFound) IsNotFound()     {}

func (s *storage) CreateAuthRequest(_ context.Context, r *oidc.AuthRequest, _ string) (op.AuthRequest, error) {
	req := &authRequest{
		id:           randomID(),
		clientID:     r.ClientID,
		redirectURI:  r.RedirectURI,
		scopes:       slices.Clone(r.Scopes),
		state:        r.State,
		nonce:        r.Nonce,
		responseType: r.ResponseType,
		responseMode: r.ResponseMode,
		created:      time.Now(),
	}
	if r.CodeChallenge != "" {
		req.codeChallenge = &oidc.CodeChallenge{Challenge: r.CodeChallenge, Method: r.CodeChallengeMethod}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for id, old := range s.requests { // drop abandoned logins
		if time.Since(old.created) > maxPendingAge {
			s.deleteLocked(id)
		}
	}
	s.requests[req.id] = req
	return req, nil
}

func (s *storage) AuthRequestByID(_ context.Context, id string) (op.AuthRequest, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	r, ok := s.requests[id]
	if !ok {
		return nil, notFound{"auth request"}
	}
	c := *r
	return &c, nil
}

func (s *storage) AuthRequestByCode(ctx context.Context, code string) (op.AuthRequest, error) {
	s.mu.Lock()
	id, ok := s.codes[code]
	s.mu.Unlock()
	if !ok {
		return nil, notFound{"code"}
	}
	return s.AuthRequestByID(ctx, id)
}

func (s *storage) SaveAuthCode(_ context.Context, id, code string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.requests[id]; !ok {
		return notFound{"auth request"}
	}
	s.codes[code] = id
	return nil
}

func (s *storage) DeleteAuthRequest(_ context.Context, id string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.deleteLocked(id)
	return nil
}

func (s *storage) deleteLocked(id string) {
	delete(s.requests, id)
	for code, rid := range s.codes {
		if rid == id {
			delete(s.codes, code)
		}
	}
}

// completeLogin marks the request as authenticated by user.
func (s *storage) completeLogin(id, username string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	r, ok := s.requests[id]
	if !ok {
		return notFound{"auth request"}
	}
	r.userID = username
	r.authTime = time.Now()
	return nil
}

// checkPassword returns the user with this username and password.
func (s *storage) checkPassword(username, password string) (User, bool) {
	u, ok := s.users[username]
	if !ok {
		// Compare anyway so timing does not reveal which usernames exist.
		subtle.ConstantTimeCompare([]byte(password), []byte(password))
		return User{}, false
	}
	return u, subtle.ConstantTimeCompare([]byte(password), []byte(u.Password)) == 1
}

func (s *storage) CreateAccessToken(_ context.Context, r op.TokenRequest) (string, time.Time, error) {
	t := &accessToken{
		subject:  r.GetSubject(),
		scopes:   slices.Clone(r.GetScopes()),
		audience: slices.Clone(r.GetAudience()),
		expiry:   time.Now().Add(s.lifetime),
	}
	if slices.Contains(t.scopes, oidc.ScopeOfflineAccess) {
		t.expiry = time.Now().Add(s.renewableLifetime)
	}
	if cr, ok := r.(interface{ GetClientID() string }); ok {
		t.clientID = cr.GetClientID()
	}
	id := randomID()
	s.mu.Lock()
	defer s.mu.Unlock()
	for tid, old := range s.tokens {
		if time.Now().After(old.expiry) {
			delete(s.tokens, tid)
		}
	}
	s.tokens[id] = t
	return id, t.expiry, nil
}

// CreateAccessAndRefreshTokens issues an access token and a refresh token
// for a code exchange with the offline_access scope or a refresh_token
// grant; current is the refresh token the grant used, which stops working.
func (s *storage) CreateAccessAndRefreshTokens(ctx context.Context, r op.TokenRequest, current string) (string, string, time.Time, error) {
	rt := &refreshToken{
		subject:  r.GetSubject(),
		scopes:   slices.Clone(r.GetScopes()),
		audience: slices.Clone(r.GetAudience()),
		amr:      []string{"pwd"},
		expiry:   time.Now().Add(s.refreshLifetime),
	}
	switch req := r.(type) {
	case op.AuthRequest:
		rt.clientID, rt.authTime = req.GetClientID(), req.GetAuthTime()
	case op.RefreshTokenRequest:
		rt.clientID, rt.authTime = req.GetClientID(), req.GetAuthTime()
	}
	s.mu.Lock()
	if current != "" {
		if _, ok := s.refresh[current]; !ok {
			s.mu.Unlock()
			return "", "", time.Time{}, op.ErrInvalidRefreshToken
		}
		delete(s.refresh, current)
	}
	for tok, old := range s.refresh {
		if time.Now().After(old.expiry) {
			delete(s.refresh, tok)
		}
	}
	token := randomID()
	s.refresh[token] = rt
	s.mu.Unlock()
	id, exp, err := s.CreateAccessToken(ctx, r)
	if err != nil {
		return "", "", time.Time{}, err
	}
	return id, token, exp, nil
}

// TokenRequestByRefreshToken returns the grant a live refresh token renews.
func (s *storage) TokenRequestByRefreshToken(_ context.Context, token string) (op.RefreshTokenRequest, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	rt, ok := s.refresh[token]
	if !ok || time.Now().After(rt.expiry) {
		return nil, op.ErrInvalidRefreshToken
	}
	c := *rt
	return &c, nil
}

// GetRefreshTokenInfo names the user and token id of a refresh token (for
// revocation: the token is its own id).
func (s *storage) GetRefreshTokenInfo(_ context.Context, clientID, token string) (string, string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	rt, ok := s.refresh[token]
	if !ok || rt.clientID != clientID {
		return "", "", op.ErrInvalidRefreshToken
	}
	return rt.subject, token, nil
}

// TerminateSession ends what the provider keeps of a user's sessions with
// a client (sign-out at the provider): their refresh tokens. It keeps no
// login session of its own (every login asks for the password).
func (s *storage) TerminateSession(_ context.Context, userID, clientID string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for tok, rt := range s.refresh {
		if rt.subject == userID && rt.clientID == clientID {
			delete(s.refresh, tok)
		}
	}
	return nil
}

func (s *storage) RevokeToken(_ context.Context, tokenID, _, _ string) *oidc.Error {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.tokens, tokenID)
	delete(s.refresh, tokenID)
	return nil
}

func (s *storage) SigningKey(context.Context) (op.SigningKey, error) { return s.key, nil }

func (s *storage) SignatureAlgorithms(context.Context) ([]jose.SignatureAlgorithm, error) {
	return []jose.SignatureAlgorithm{jose.RS256}, nil
}

func (s *storage) KeySet(context.Context) ([]op.Key, error) {
	return []op.Key{publicKey{s.key}}, nil
}

func (s *storage) GetClientByClientID(_ context.Context, id string) (op.Client, error) {
	c, ok := s.clients[id]
	if !ok {
		return nil, notFound{"client"}
	}
	return c, nil
}

func (s *storage) AuthorizeClientIDSecret(_ context.Context, id, secret string) error {
	c, ok := s.clients[id]
	if !ok || c.Secret == "" || subtle.ConstantTimeCompare([]byte(secret), []byte(c.Secret)) != 1 {
		return errors.New("invalid client credentials")
	}
	return nil
}

// userinfo fills the standard claims of user for the scopes, plus the
// roles claim (as Zitadel does with "assert roles on authentication").
func (s *storage) userinfo(info *oidc.UserInfo, userID string, scopes []string) error {
	u, ok := s.users[userID]
	if !ok {
		return notFound{"user"}
	}
	for _, sc := range scopes {
		switch sc {
		case oidc.ScopeOpenID:
			info.Subject = u.Username
		case oidc.ScopeProfile:
			info.Name = u.Name
			info.PreferredUsername = u.Username
		case oidc.ScopeEmail:
			info.Email = u.Email
			info.EmailVerified = oidc.Bool(u.Email != "")
		}
	}
	info.AppendClaims(auth.ZitadelRolesClaim, s.roleClaim(u))
	return nil
}

// roleClaim renders the user's roles in the shape of Zitadel's project
// role claim: {"<role key>": {"<org id>": "<org domain>"}}.
func (s *storage) roleClaim(u User) map[string]any {
	out := make(map[string]any, len(u.Roles))
	for _, r := range u.Roles {
		out[r] = map[string]string{s.orgID: s.orgDomain}
	}
	return out
}

func (s *storage) SetUserinfoFromScopes(_ context.Context, info *oidc.UserInfo, userID, _ string, scopes []string) error {
	return s.userinfo(info, userID, scopes)
}

func (s *storage) SetUserinfoFromToken(_ context.Context, info *oidc.UserInfo, tokenID, _, _ string) error {
	s.mu.Lock()
	t, ok := s.tokens[tokenID]
	s.mu.Unlock()
	if !ok || time.Now().After(t.expiry) {
		return notFound{"token"}
	}
	return s.userinfo(info, t.subject, t.scopes)
}

func (s *storage) SetIntrospectionFromToken(_ context.Context, resp *oidc.IntrospectionResponse, tokenID, _, clientID string) error {
	s.mu.Lock()
	t, ok := s.tokens[tokenID]
	s.mu.Unlock()
	if !ok || time.Now().After(t.expiry) {
		return notFound{"token"}
	}
	if !slices.Contains(t.audience, clientID) {
		return errors.New("token was not issued for this client")
	}
	info := new(oidc.UserInfo)
	if err := s.userinfo(info, t.subject, t.scopes); err != nil {
		return err
	}
	resp.SetUserInfo(info)
	resp.Active = true
	resp.Scope = t.scopes
	resp.ClientID = t.clientID
	resp.Audience = t.audience
	resp.Expiration = oidc.FromTime(t.expiry)
	return nil
}

// GetPrivateClaimsFromScopes adds identity and roles to JWT access tokens,
// so an API verifying only the access token learns who calls and what they
// may do.
func (s *storage) GetPrivateClaimsFromScopes(_ context.Context, userID, _ string, _ []string) (map[string]any, error) {
	u, ok := s.users[userID]
	if !ok {
		return nil, notFound{"user"}
	}
	claims := map[string]any{
		auth.ZitadelRolesClaim: s.roleClaim(u),
		"preferred_username":   u.Username,
	}
	if u.Name != "" {
		claims["name"] = u.Name
	}
	if u.Email != "" {
		claims["email"] = u.Email
	}
	return claims, nil
}

func (s *storage) GetKeyByIDAndClientID(context.Context, string, string) (*jose.JSONWebKey, error) {
	return nil, errors.New("JWT profile client authentication is not supported")
}

func (s *storage) ValidateJWTProfileScopes(context.Context, string, []string) ([]string, error) {
	return nil, errors.New("JWT profile grant is not supported")
}

func (s *storage) Health(context.Context) error { return nil }

// String is for logs.
func (c *client) String() string { return fmt.Sprintf("client %s", c.ID) }
