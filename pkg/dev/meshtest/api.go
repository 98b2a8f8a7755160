package meshtest

import (
	"context"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/flexplane/flexplane/graph"
	"github.com/flexplane/flexplane/graph/server"
	"github.com/flexplane/flexplane/pkg/auth"
	"github.com/flexplane/flexplane/pkg/catalog"
	"github.com/flexplane/flexplane/pkg/dev/devidp"
	"github.com/flexplane/flexplane/pkg/dev/gqltest"
	"github.com/flexplane/flexplane/pkg/orchestrator"
)

// APIClientID is the OAuth client (and token audience) of the harness's
// development identity provider.
const APIClientID = "flexplane-portal"

// CLIClientID is the harness provider's client of flexctl (device
// authorization), whose tokens the API accepts too.
const CLIClientID = "flexctl"

// APISpec configures the GraphQL API of a harness (see WithAPI).
type APISpec struct {
	// Users are the identity provider's accounts. A user without a
	// password gets username + "-pw". Default DefaultUsers().
	Users []devidp.User
	// VDCs are created in the catalog before the orchestrator starts.
	// Default DefaultVDCs().
	VDCs []*catalog.VDC
	// ZoneTimeout bounds each zone's part of a request spanning zones.
	// Default 3s.
	ZoneTimeout time.Duration
	// MaxComplexity bounds queries; 0 keeps the API's default.
	MaxComplexity int
	// RateLimits are the API's rate limits per caller; the zero value
	// keeps the API's defaults.
	RateLimits server.RateLimits
	// VMRecoverAfter is the orchestrator's APIConfig.VMRecoverAfter.
	VMRecoverAfter time.Duration
	// VMRecoverInterval is the orchestrator's APIConfig.VMRecoverInterval.
	VMRecoverInterval time.Duration
	// BackupQuotaInterval is the orchestrator's
	// APIConfig.BackupQuotaInterval.
	BackupQuotaInterval time.Duration
	// ImageCopyRecoverInterval is the orchestrator's
	// APIConfig.ImageCopyRecoverInterval.
	ImageCopyRecoverInterval time.Duration
	// SecurityGroupInterval is the orchestrator's
	// APIConfig.SecurityGroupInterval.
	SecurityGroupInterval time.Duration
	// AgentVersion is the agent version the orchestrator ships (the
	// harness's agents report "meshtest"). Default "meshtest".
	AgentVersion string
	// SessionTokenLifetime is the provider's RenewableTokenLifetime: the
	// validity of the access tokens of logins with offline_access (the
	// portal's sessions, which renew them). 0 is the provider's default.
	SessionTokenLifetime time.Duration
	// LoadBalancers are the zones' flexgateway replicas the orchestrator
	// pushes load balancers to.
	LoadBalancers orchestrator.LoadBalancersConfig
	// Kube reaches the management cluster of Kubernetes (the
	// orchestrator's Config.Kube), e.g. a kubetest.Server's kubeconfig.
	Kube orchestrator.KubeConfig
	// Kubernetes is the orchestrator's managed Kubernetes (with Kube).
	Kubernetes orchestrator.ManagedKubernetesConfig
}

// DefaultUsers are the accounts of WithAPI without Users: "admin" (platform
// admin), "alice" (member of "red"), "bob" (member of "blue"), "vera"
// (viewer of "red") and "nobody" (no role).
func DefaultUsers() []devidp.User {
	return []devidp.User{
		{Username: "admin", Name: "Ada Admin", Roles: []string{auth.PlatformAdminRole}},
		{Username: "alice", Name: "Alice", Roles: []string{auth.VDCRoleKey("red", auth.RoleMember)}},
		{Username: "bob", Name: "Bob", Roles: []string{auth.VDCRoleKey("blue", auth.RoleMember)}},
		{Username: "vera", Name: "Vera", Roles: []string{auth.VDCRoleKey("red", auth.RoleViewer)}},
		{Username: "nobody", Name: "Nobody"},
	}
}

// DefaultVDCs are the VDCs of WithAPI without VDCs: "red" and "blue", each
// with room for 20 VMs.
func DefaultVDCs() []*catalog.VDC {
	var out []*catalog.VDC
	for _, name := range []string{"red", "blue"} {
		v := &catalog.VDC{}
		v.Name, v.Description = name, name+" VDC"
		v.Quotas = catalog.VDCQuotas{VCPUs: 64, MemoryMiB: 131072, StorageGiB: 2000, VMs: 20}
		out = append(out, v)
	}
	return out
}

// WithAPI also starts a development OpenID provider (pkg/dev/devidp) and serves
// the GraphQL API on the orchestrator at /graphql, accepting the provider's
// tokens. Use Token and GraphQL to call it.
func WithAPI(spec APISpec) Option {
	return func(o *options) {
		if spec.Users == nil {
			spec.Users = DefaultUsers()
		}
		if spec.VDCs == nil {
			spec.VDCs = DefaultVDCs()
		}
		if spec.AgentVersion == "" {
			spec.AgentVersion = "meshtest"
		}
		if spec.ZoneTimeout == 0 {
			spec.ZoneTimeout = 3 * time.Second
		}
		o.api = &spec
	}
}

// apiState is the API part of a harness.
type apiState struct {
	idp    *devidp.Server
	mu     sync.Mutex
	tokens map[string]string // by user, protected by mu
}

// startIDP starts the identity provider and seeds the catalog; origin is
// the orchestrator's (http://127.0.0.1:port, the port 0 unless WithHandler).
func (h *Harness) startIDP(t testing.TB, origin string) {
	t.Helper()
	spec := h.opts.api
	users := make([]devidp.User, len(spec.Users))
	for i, u := range spec.Users {
		if u.Password == "" {
			u.Password = u.Username + "-pw"
		}
		users[i] = u
	}
	client := devidp.Client{ID: APIClientID, RedirectURIs: []string{"http://127.0.0.1/callback"}}
	if h.opts.web != nil {
		client.RedirectURIs = append(client.RedirectURIs, origin+"/auth/callback")
		client.PostLogoutRedirectURIs = []string{origin + "/"}
	}
	idp, err := devidp.New(devidp.Config{
		KeyDir:                 shortTempDir(t, "fpi"),
		Users:                  users,
		Clients:                []devidp.Client{client, {ID: CLIClientID, RedirectURIs: []string{"http://127.0.0.1/callback"}}},
		Logger:                 h.logger.With("component", "devidp"),
		RenewableTokenLifetime: spec.SessionTokenLifetime,
	})
	if err != nil {
		t.Fatalf("meshtest: %v", err)
	}
	if err := idp.Start(); err != nil {
		t.Fatalf("meshtest: %v", err)
	}
	t.Cleanup(func() { idp.Close() })
	h.api = &apiState{idp: idp, tokens: map[string]string{}}

	store, err := catalog.OpenDir(h.catalogDir())
	if err != nil {
		t.Fatalf("meshtest: %v", err)
	}
	for _, v := range spec.VDCs {
		if _, err := catalog.Create(context.Background(), store, v.DeepCopyObject().(*catalog.VDC)); err != nil {
			t.Fatalf("meshtest: seed VDC %s: %v", v.Name, err)
		}
	}
}

func (h *Harness) catalogDir() string { return h.dataDir + "/catalog" }

// apiConfig is the orchestrator's API configuration (zero without WithAPI).
func (h *Harness) apiConfig() orchestrator.APIConfig {
	if h.opts.api == nil {
		return orchestrator.APIConfig{}
	}
	return orchestrator.APIConfig{
		Issuer:                   h.api.idp.Issuer(),
		Audience:                 APIClientID,
		CLIClientID:              CLIClientID,
		CatalogDir:               h.catalogDir(),
		Tenant:                   graph.Tenant{Name: "Test Cloud", Domain: "cloud.test"},
		ZoneTimeout:              h.opts.api.ZoneTimeout,
		MaxComplexity:            h.opts.api.MaxComplexity,
		RateLimits:               h.opts.api.RateLimits,
		VMRecoverAfter:           h.opts.api.VMRecoverAfter,
		VMRecoverInterval:        h.opts.api.VMRecoverInterval,
		BackupQuotaInterval:      h.opts.api.BackupQuotaInterval,
		ImageCopyRecoverInterval: h.opts.api.ImageCopyRecoverInterval,
		SecurityGroupInterval:    h.opts.api.SecurityGroupInterval,
		AgentVersion:             h.opts.api.AgentVersion,
		Releases:                 orchestrator.ReleasesConfig{PublicKey: h.opts.releaseKey, HostTimeout: h.opts.releaseHostTimeout},
		LoadBalancers:            h.opts.api.LoadBalancers,
		Kubernetes:               h.opts.api.Kubernetes,
	}
}

func (h *Harness) needAPI(t testing.TB) *apiState {
	t.Helper()
	if h.api == nil {
		t.Fatal("meshtest: the harness has no API: start it WithAPI")
	}
	return h.api
}

// IDP is the development identity provider (WithAPI only).
func (h *Harness) IDP(t testing.TB) *devidp.Server { return h.needAPI(t).idp }

// Catalog opens the orchestrator's catalog directory (WithAPI only).
func (h *Harness) Catalog(t testing.TB) *catalog.DirStore {
	t.Helper()
	h.needAPI(t)
	s, err := catalog.OpenDir(h.catalogDir())
	if err != nil {
		t.Fatalf("meshtest: %v", err)
	}
	return s
}

// GraphQLURL is the URL of the GraphQL API.
func (h *Harness) GraphQLURL() string { return h.Orchestrator.URL() + orchestrator.APIPath }

// Token returns a real signed access token of user, minted once through
// the provider's authorization code flow and reused.
func (h *Harness) Token(t testing.TB, user string) string {
	t.Helper()
	a := h.needAPI(t)
	a.mu.Lock()
	defer a.mu.Unlock()
	if tok, ok := a.tokens[user]; ok {
		return tok
	}
	pw := user + "-pw"
	for _, u := range h.opts.api.Users {
		if u.Username == user && u.Password != "" {
			pw = u.Password
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	tok, err := a.idp.Login(ctx, APIClientID, user, pw)
	if err != nil {
		t.Fatalf("meshtest: token of %s: %v", user, err)
	}
	a.tokens[user] = tok.AccessToken
	return tok.AccessToken
}

// GraphQLError is one error of a GraphQL response.
type GraphQLError = gqltest.Error

// GraphQLResponse is the answer to a GraphQL request.
type GraphQLResponse = gqltest.Response

// GraphQL runs a query or mutation as user ("" sends no token) in vdc (""
// sends no FlexPlane-VDC-ID header).
func (h *Harness) GraphQL(t testing.TB, user, vdc, query string, vars map[string]any) *GraphQLResponse {
	t.Helper()
	authz := ""
	if user != "" {
		authz = "Bearer " + h.Token(t, user)
	}
	return PostGraphQL(t, h.GraphQLURL(), authz, vdc, query, vars)
}

// PostGraphQL POSTs a GraphQL request to url with a raw Authorization
// header value ("" for none) and a FlexPlane-VDC-ID header ("" for none)
// (gqltest.Post), failing the test when no GraphQL answer comes back.
func PostGraphQL(t testing.TB, url, authz, vdc, query string, vars map[string]any) *GraphQLResponse {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	r, err := gqltest.Post(ctx, nil, url, gqltest.Request{Query: query, Variables: vars, Authorization: authz, VDC: vdc})
	if err != nil {
		t.Fatalf("meshtest: %v", err)
	}
	return r
}

// LateHandler is a handler for WithHandler that is known only once the
// harness runs (the portal's, which names the harness's identity
// provider): it answers 503 until Set.
type LateHandler struct{ h atomic.Pointer[http.Handler] }

// Set makes l serve h.
func (l *LateHandler) Set(h http.Handler) { l.h.Store(&h) }

func (l *LateHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h := l.h.Load()
	if h == nil {
		http.Error(w, "starting", http.StatusServiceUnavailable)
		return
	}
	(*h).ServeHTTP(w, r)
}
