// Package auth verifies bearer tokens and turns them into a Principal: who
// is calling, whether they are a platform admin, and which VDCs they may use
// with which role. Users bring OpenID Connect tokens; a VDC's service
// accounts bring tokens flexplane issued (ServiceAccountVerifier, see
// serviceaccount.go).
//
// Tokens are verified with github.com/coreos/go-oidc/v3 against the
// issuer's discovery document and signing keys (JWKS): signature, issuer,
// audience (the client id) and expiry. Roles come from one claim whose name
// is configurable; it may be Zitadel's project role claim, an object whose
// keys are role keys ({"vdc:prod:member": {"<orgId>": "<orgDomain>"}}), or a
// plain array of role-key strings.
//
// Role keys (the convention to configure in the identity provider's
// project):
//
//	platform-admin           manages the platform: zones, hosts, profiles,
//	                         images and VDCs; may use every VDC as admin
//	vdc:<vdc>:admin          administers the VDC <vdc>
//	vdc:<vdc>:member         works in the VDC <vdc> (create and run VMs)
//	vdc:<vdc>:viewer         reads the VDC <vdc>
//
// Other role keys are ignored, so a project may carry roles of other
// applications.
package auth

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coreos/go-oidc/v3/oidc"
)

// ZitadelRolesClaim is Zitadel's claim listing the project roles granted to
// the user; the default roles claim.
const ZitadelRolesClaim = "urn:zitadel:iam:org:project:roles"

// PlatformAdminRole is the role key of platform administrators.
const PlatformAdminRole = "platform-admin"

// Role is a user's role within one VDC.
type Role string

// VDC roles, from most to least privileged.
const (
	RoleAdmin  Role = "admin"
	RoleMember Role = "member"
	RoleViewer Role = "viewer"
)

func (r Role) rank() int {
	switch r {
	case RoleAdmin:
		return 3
	case RoleMember:
		return 2
	case RoleViewer:
		return 1
	}
	return 0
}

// Valid reports whether r is one of the defined roles.
func (r Role) Valid() bool { return r.rank() > 0 }

// AtLeast reports whether r grants everything min grants.
func (r Role) AtLeast(min Role) bool { return r.Valid() && r.rank() >= min.rank() }

// VDCRoleKey returns the role key granting role in vdc ("vdc:<vdc>:<role>").
func VDCRoleKey(vdc string, role Role) string { return "vdc:" + vdc + ":" + string(role) }

// ParseVDCRoleKey splits a "vdc:<vdc>:<role>" key; ok is false for other keys.
func ParseVDCRoleKey(key string) (vdc string, role Role, ok bool) {
	rest, found := strings.CutPrefix(key, "vdc:")
	if !found {
		return "", "", false
	}
	i := strings.LastIndexByte(rest, ':')
	if i <= 0 {
		return "", "", false
	}
	vdc, role = rest[:i], Role(rest[i+1:])
	if !role.Valid() {
		return "", "", false
	}
	return vdc, role, true
}

// Principal is the verified caller of a request.
type Principal struct {
	// Issuer is the token's "iss": with Subject, it names the caller
	// (a user or a service account) across issuers.
	Issuer string
	// Subject is the token's "sub": the stable user id at the issuer.
	Subject string
	// Name is for display: the name claim, else preferred_username, else
	// the subject.
	Name string
	// Email is the email claim, if any.
	Email string
	// PlatformAdmin is true for holders of the platform-admin role.
	PlatformAdmin bool
	// Username is the login name the identity provider asserts (the
	// token's preferred_username): what VDC member bindings name. Empty
	// for service accounts.
	Username string
	// ServiceAccount is true for a VDC's service account (Subject is then
	// the account's id and VDCRoles holds its one VDC).
	ServiceAccount bool
	// VDCRoles holds the explicit VDC memberships, by VDC name.
	VDCRoles map[string]Role
}

// RoleWith returns the caller's role in vdc counting the VDC's own grants
// (granted returns the role, "admin", "member", "viewer" or "", the VDC
// grants a user name): the higher of that and RoleIn. A service account
// has only its own role.
func (p *Principal) RoleWith(vdc string, granted func(user string) string) (role Role, ok bool) {
	role, ok = p.RoleIn(vdc)
	if p.ServiceAccount || p.Username == "" || granted == nil {
		return role, ok
	}
	bound := Role(granted(p.Username))
	if !bound.Valid() {
		return role, ok
	}
	if !ok || bound.rank() > role.rank() {
		return bound, true
	}
	return role, true
}

// RoleIn returns the caller's role in vdc: its explicit membership, or
// admin for platform admins. ok is false when the caller may not use vdc.
func (p *Principal) RoleIn(vdc string) (role Role, ok bool) {
	if p.PlatformAdmin {
		return RoleAdmin, true
	}
	role, ok = p.VDCRoles[vdc]
	return role, ok
}

// MemberVDCs returns the names of the VDCs with an explicit membership,
// sorted.
func (p *Principal) MemberVDCs() []string {
	out := make([]string, 0, len(p.VDCRoles))
	for v := range p.VDCRoles {
		out = append(out, v)
	}
	slices.Sort(out)
	return out
}

// RoleKeys returns the caller's roles as role keys (PlatformAdminRole,
// VDCRoleKey), sorted.
func (p *Principal) RoleKeys() []string {
	var keys []string
	if p.PlatformAdmin {
		keys = append(keys, PlatformAdminRole)
	}
	for v, r := range p.VDCRoles {
		keys = append(keys, VDCRoleKey(v, r))
	}
	slices.Sort(keys)
	return keys
}

// KubeUser is the caller's user name in the kubeconfigs of tenant
// clusters: "oidc:" and the token's subject, which the issuer (one per
// orchestrator) guarantees to be this user's and no one else's. Never the
// email claim: a user may set any address there, another user's too.
func (p *Principal) KubeUser() string {
	return "oidc:" + p.Subject
}

// ClaimNames says which token claims carry identity and roles. Empty fields
// take the defaults documented on each.
type ClaimNames struct {
	// Roles is the claim with the role keys; default ZitadelRolesClaim.
	Roles string
	// Name is the display-name claim; default "name" (then
	// "preferred_username" is tried).
	Name string
	// Email is the email claim; default "email".
	Email string
}

func (c ClaimNames) withDefaults() ClaimNames {
	if c.Roles == "" {
		c.Roles = ZitadelRolesClaim
	}
	if c.Name == "" {
		c.Name = "name"
	}
	if c.Email == "" {
		c.Email = "email"
	}
	return c
}

// PrincipalFromClaims builds a Principal from a token's verified claims.
// Unknown role keys are ignored; for several roles in one VDC the most
// privileged wins. A roles claim of another shape than an object or an
// array of strings is an error.
func PrincipalFromClaims(claims map[string]any, names ClaimNames) (*Principal, error) {
	names = names.withDefaults()
	p := &Principal{VDCRoles: map[string]Role{}}
	p.Subject, _ = claims["sub"].(string)
	if p.Subject == "" {
		return nil, errors.New("token has no subject")
	}
	p.Issuer, _ = claims["iss"].(string)
	p.Email, _ = claims[names.Email].(string)
	p.Name, _ = claims[names.Name].(string)
	p.Username, _ = claims["preferred_username"].(string)
	if p.Name == "" {
		p.Name, _ = claims["preferred_username"].(string)
	}
	if p.Name == "" {
		p.Name = p.Subject
	}
	var keys []string
	switch v := claims[names.Roles].(type) {
	case nil:
	case map[string]any:
		for k := range v {
			keys = append(keys, k)
		}
	case []any:
		for _, k := range v {
			s, ok := k.(string)
			if !ok {
				return nil, fmt.Errorf("claim %q: array holds a %T, want strings", names.Roles, k)
			}
			keys = append(keys, s)
		}
	default:
		return nil, fmt.Errorf("claim %q is a %T, want an object or an array of strings", names.Roles, v)
	}
	for _, k := range keys {
		if k == PlatformAdminRole {
			p.PlatformAdmin = true
			continue
		}
		vdc, role, ok := ParseVDCRoleKey(k)
		if !ok {
			continue
		}
		if cur, had := p.VDCRoles[vdc]; !had || role.rank() > cur.rank() {
			p.VDCRoles[vdc] = role
		}
	}
	return p, nil
}

// Config configures a Verifier.
type Config struct {
	// Issuer is the OIDC issuer URL; its discovery document is fetched by
	// NewVerifier. Required.
	Issuer string
	// Audience is the value the token's "aud" must contain: the client id
	// of the portal application (Zitadel also puts the project id there).
	// Required.
	Audience string
	// CLIClientID is the client id of the command line's native OIDC
	// application (flexctl's device login), whose tokens are accepted as
	// the portal's: their "aud" or "azp" may name it instead of
	// Audience. "" accepts the portal's tokens only.
	CLIClientID string
	// Claims names the identity and role claims; the zero value reads
	// Zitadel's tokens.
	Claims ClaimNames
	// HTTPClient fetches discovery and keys; nil is http.DefaultClient.
	HTTPClient *http.Client
	// Now is the clock for expiry checks; nil is time.Now.
	Now func() time.Time
}

// Verifier checks bearer tokens. It is safe for concurrent use; signing keys
// are fetched (and refetched on an unknown key id) as needed.
type Verifier struct {
	cfg    Config
	client *http.Client

	// verifier is nil until the issuer has been discovered; then every
	// request reads it without taking mu.
	verifier atomic.Pointer[oidc.IDTokenVerifier]

	mu       sync.Mutex
	fetching bool      // a discovery is under way, protected by mu
	lastTry  time.Time // protected by mu
	lastErr  error     // of the last discovery, protected by mu
}

// ErrUnauthenticated is matched (errors.Is) by every error Verify returns
// for a token it refuses, and by ErrNoToken.
var ErrUnauthenticated = errors.New("unauthenticated")

// ErrNoToken reports a request without a bearer token.
var ErrNoToken = fmt.Errorf("%w: no bearer token", ErrUnauthenticated)

// ErrIssuerUnavailable is matched by the errors of Verify when the issuer's
// discovery document cannot be fetched: the token was not judged at all.
var ErrIssuerUnavailable = errors.New("the identity provider is unavailable")

// discoveryTimeout bounds one attempt at the issuer's discovery document.
const discoveryTimeout = 5 * time.Second

// retryDiscoveryAfter is how long a failed discovery is remembered before
// the next request tries again, so a down issuer is not asked on every
// request.
const retryDiscoveryAfter = 2 * time.Second

// NewVerifier fetches the issuer's discovery document and returns a
// Verifier for it; it fails when the issuer cannot be reached. ctx bounds
// the discovery request only.
func NewVerifier(ctx context.Context, cfg Config) (*Verifier, error) {
	v, err := NewLazyVerifier(cfg)
	if err != nil {
		return nil, err
	}
	if _, err := v.discover(ctx); err != nil {
		return nil, fmt.Errorf("auth: new verifier: %w", err)
	}
	return v, nil
}

// NewLazyVerifier returns a Verifier that fetches the issuer's discovery
// document when it first verifies a token, and again on later requests
// while the issuer cannot be reached (at most once per 2 s). A server can
// so start before its identity provider; until the provider answers,
// Verify fails with ErrIssuerUnavailable. Only cfg is checked here.
func NewLazyVerifier(cfg Config) (*Verifier, error) {
	if cfg.Issuer == "" || cfg.Audience == "" {
		return nil, errors.New("auth: new verifier: issuer and audience are required")
	}
	client := cfg.HTTPClient
	if client == nil {
		client = http.DefaultClient
	}
	return &Verifier{cfg: cfg, client: client}, nil
}

// Ready fetches the issuer's discovery document if that has not happened
// yet; it reports why the issuer is unavailable, if it is.
func (v *Verifier) Ready(ctx context.Context) error {
	_, err := v.discover(ctx)
	return err
}

// discover returns the token verifier, fetching the discovery document
// first if needed. A failure is remembered for retryDiscoveryAfter, and
// while one caller asks the issuer the others do not wait for it.
func (v *Verifier) discover(ctx context.Context) (*oidc.IDTokenVerifier, error) {
	if iv := v.verifier.Load(); iv != nil {
		return iv, nil
	}
	v.mu.Lock()
	if iv := v.verifier.Load(); iv != nil {
		v.mu.Unlock()
		return iv, nil
	}
	now := time.Now()
	if v.fetching || (v.lastErr != nil && now.Sub(v.lastTry) < retryDiscoveryAfter) {
		err := v.lastErr
		if err == nil {
			err = fmt.Errorf("%w: %s: its discovery document is being fetched", ErrIssuerUnavailable, v.cfg.Issuer)
		}
		v.mu.Unlock()
		return nil, err
	}
	v.fetching, v.lastTry = true, now
	v.mu.Unlock()

	ctx, cancel := context.WithTimeout(oidc.ClientContext(ctx, v.client), discoveryTimeout)
	defer cancel()
	iv, err := v.fetch(ctx)

	v.mu.Lock()
	defer v.mu.Unlock()
	v.fetching = false
	if err != nil {
		v.lastErr = fmt.Errorf("%w: %s: %w", ErrIssuerUnavailable, v.cfg.Issuer, err)
		return nil, v.lastErr
	}
	v.verifier.Store(iv)
	v.lastErr = nil
	return iv, nil
}

// fetch reads the discovery document and builds the token verifier.
func (v *Verifier) fetch(ctx context.Context) (*oidc.IDTokenVerifier, error) {
	provider, err := oidc.NewProvider(ctx, v.cfg.Issuer)
	if err != nil {
		return nil, err
	}
	var pc struct {
		JWKSURL string   `json:"jwks_uri"`
		Algs    []string `json:"id_token_signing_alg_values_supported"`
	}
	if err := provider.Claims(&pc); err != nil {
		return nil, err
	}
	keys := newKeySet(pc.JWKSURL, v.client, pc.Algs)
	// The audience is checked by checkClaims: the token may be the
	// portal's or the command line's.
	return oidc.NewVerifier(v.cfg.Issuer, keys, &oidc.Config{
		SkipClientIDCheck:    true,
		SupportedSigningAlgs: pc.Algs,
		Now:                  v.cfg.Now,
	}), nil
}

// maxIssuedAtSkew is how far in the future a token's iat may be (the
// issuer's clock may run a little ahead of ours).
const maxIssuedAtSkew = time.Minute

// RefusedError is a token Verify refused. Reason is what a client may be
// told; Cause (which may hold the verifier's internals, such as the
// server's clock) is for the logs.
type RefusedError struct {
	Reason string
	Cause  error
}

func (e *RefusedError) Error() string {
	if e.Cause == nil {
		return "unauthenticated: " + e.Reason
	}
	return "unauthenticated: " + e.Reason + ": " + e.Cause.Error()
}

// Unwrap makes errors.Is(err, ErrUnauthenticated) true, and reaches Cause.
func (e *RefusedError) Unwrap() []error { return []error{ErrUnauthenticated, e.Cause} }

// PublicReason is the client-safe account of an error of Verify or
// BearerToken: a RefusedError's reason, the message of the others (which
// carry none of the verifier's internals).
func PublicReason(err error) string {
	var re *RefusedError
	if errors.As(err, &re) {
		return "unauthenticated: " + re.Reason
	}
	return err.Error()
}

func refused(reason string, cause error) error { return &RefusedError{Reason: reason, Cause: cause} }

// refusal names, without the verifier's details, why go-oidc refused a
// token.
func refusal(err error) error {
	var expired *oidc.TokenExpiredError
	msg := err.Error()
	switch {
	case errors.As(err, &expired):
		return refused("the token has expired", err)
	case errors.Is(err, errSignature) || strings.Contains(msg, "signature"):
		return refused("the token's signature is not valid", err)
	case strings.Contains(msg, "malformed"):
		return refused("the token is malformed", err)
	case strings.Contains(msg, "different provider"):
		return refused("the token was issued by another provider", err)
	case strings.Contains(msg, "nbf"):
		return refused("the token is not valid yet", err)
	}
	return refused("the token is not valid", err)
}

// checkClaims refuses what go-oidc lets through: times that are not
// numbers (it reads "exp": "1700000000" as a time), a token issued in
// the future, and a token authorized for another client (azp).
func (v *Verifier) checkClaims(claims map[string]any) error {
	for _, name := range []string{"exp", "iat", "nbf"} {
		if c, ok := claims[name]; ok {
			if _, isNumber := c.(float64); !isNumber {
				return refused(fmt.Sprintf("the token's %q claim is not a number", name), nil)
			}
		}
	}
	if _, ok := claims["exp"]; !ok {
		return refused("the token has no expiry", nil)
	}
	if iat, ok := claims["iat"].(float64); ok {
		now := time.Now
		if v.cfg.Now != nil {
			now = v.cfg.Now
		}
		if time.Unix(int64(iat), 0).After(now().Add(maxIssuedAtSkew)) {
			return refused("the token is issued in the future", nil)
		}
	}
	if !v.ours(claims["aud"]) {
		return refused("the token was not issued to this application", fmt.Errorf("its audience is %v", claims["aud"]))
	}
	if azp, ok := claims["azp"]; ok && !v.ours(azp) {
		return refused("the token was not issued to this application", fmt.Errorf("azp is %v", azp))
	}
	return nil
}

// ours reports whether a token's "aud" (a string or a list of them) or
// "azp" names the portal's or the command line's client.
func (v *Verifier) ours(claim any) bool {
	is := func(id any) bool {
		s, ok := id.(string)
		return ok && s != "" && (s == v.cfg.Audience || s == v.cfg.CLIClientID)
	}
	if list, ok := claim.([]any); ok {
		return slices.ContainsFunc(list, is)
	}
	return is(claim)
}

// Verify checks a raw JWT and returns its Principal. Errors match
// ErrUnauthenticated (a *RefusedError saying why the token was refused),
// or match ErrIssuerUnavailable when the issuer could not be asked.
func (v *Verifier) Verify(ctx context.Context, rawToken string) (*Principal, error) {
	iv, err := v.discover(ctx)
	if err != nil {
		return nil, err
	}
	var fetchErr error
	tok, err := iv.Verify(context.WithValue(ctx, fetchErrKey{}, &fetchErr), rawToken)
	if err != nil {
		if fetchErr != nil {
			return nil, fetchErr
		}
		return nil, refusal(err)
	}
	var claims map[string]any
	if err := tok.Claims(&claims); err != nil {
		return nil, refused("the token is malformed", err)
	}
	if err := v.checkClaims(claims); err != nil {
		return nil, err
	}
	p, err := PrincipalFromClaims(claims, v.cfg.Claims)
	if err != nil {
		return nil, refused("the token's claims are not valid", err)
	}
	return p, nil
}

// BearerToken extracts the token of an "Authorization: Bearer <token>"
// header value; an empty value is ErrNoToken.
func BearerToken(header string) (string, error) {
	if header == "" {
		return "", ErrNoToken
	}
	scheme, tok, ok := strings.Cut(header, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") || strings.TrimSpace(tok) == "" {
		return "", fmt.Errorf("%w: authorization header is not \"Bearer <token>\"", ErrUnauthenticated)
	}
	return strings.TrimSpace(tok), nil
}

type principalKey struct{}

// NewContext returns ctx carrying p.
func NewContext(ctx context.Context, p *Principal) context.Context {
	return context.WithValue(ctx, principalKey{}, p)
}

// FromContext returns the Principal stored by NewContext.
func FromContext(ctx context.Context) (*Principal, bool) {
	p, ok := ctx.Value(principalKey{}).(*Principal)
	return p, ok && p != nil
}
