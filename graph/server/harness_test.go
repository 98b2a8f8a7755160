package server_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/flexplane/flexplane/graph"
	"github.com/flexplane/flexplane/graph/server"
	"github.com/flexplane/flexplane/graph/server/graphiql"
	"github.com/flexplane/flexplane/pkg/audit"
	"github.com/flexplane/flexplane/pkg/auth"
	"github.com/flexplane/flexplane/pkg/catalog"
	"github.com/flexplane/flexplane/pkg/dev/devidp"
	"github.com/flexplane/flexplane/pkg/dev/gqltest"
	"github.com/flexplane/flexplane/pkg/dev/syncbuf"
	"github.com/flexplane/flexplane/pkg/estate"
	"github.com/flexplane/flexplane/pkg/vdc"
)

const (
	portal   = "flexplane-portal"
	otherApp = "other-app"
	cbURL    = "http://127.0.0.1:3000/auth/callback"
)

// users of every harness: password is the username + "-pw".
var users = []devidp.User{
	{Username: "admin", Name: "Ada Admin", Roles: []string{auth.PlatformAdminRole}},
	{Username: "alice", Name: "Alice", Email: "alice@example.test", Roles: []string{
		auth.VDCRoleKey("prod", auth.RoleMember), auth.VDCRoleKey("dev", auth.RoleViewer),
		auth.VDCRoleKey("ghost", auth.RoleMember)}},
	{Username: "bob", Roles: []string{auth.VDCRoleKey("staging", auth.RoleMember)}},
	{Username: "pam", Name: "Pam", Roles: []string{auth.VDCRoleKey("prod", auth.RoleAdmin)}},
	{Username: "val", Name: "Val", Roles: []string{auth.VDCRoleKey("prod", auth.RoleViewer)}},
}

// harness is the real stack of this package: a development OpenID provider
// on loopback, a catalog directory, and the API handler served over HTTP.
type harness struct {
	idp     *devidp.Server
	dir     string
	store   *catalog.DirStore
	url     string
	handler http.Handler // the handler behind url, for in-process requests
	logs    *syncbuf.Buffer
	mu      sync.Mutex
	tokens  map[string]string // protected by mu
	options harnessOptions
}

type harnessOptions struct {
	lifetime      time.Duration
	maxDepth      int
	maxComplexity int
	rateLimits    server.RateLimits
	audit         audit.Sink // nil: none
}

func newHarness(t *testing.T, opts harnessOptions) *harness {
	t.Helper()
	us := make([]devidp.User, len(users))
	for i, u := range users {
		u.Password = u.Username + "-pw"
		us[i] = u
	}
	idp, err := devidp.New(devidp.Config{
		KeyDir:        t.TempDir(),
		Users:         us,
		TokenLifetime: opts.lifetime,
		Clients: []devidp.Client{
			{ID: portal, RedirectURIs: []string{cbURL}},
			{ID: otherApp, RedirectURIs: []string{cbURL}},
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := idp.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { idp.Close() })

	h := &harness{idp: idp, dir: t.TempDir(), tokens: map[string]string{}, logs: &syncbuf.Buffer{}, options: opts}
	h.store, err = catalog.OpenDir(h.dir)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for _, name := range []string{"prod", "dev", "staging"} {
		v := &catalog.VDC{}
		v.Name, v.Description = name, name+" VDC"
		v.Quotas = catalog.VDCQuotas{VCPUs: 64, MemoryMiB: 131072, StorageGiB: 2000, VMs: 20}
		if _, err := catalog.Create(ctx, h.store, v); err != nil {
			t.Fatal(err)
		}
	}
	h.handler = h.newHandler(t)
	h.url = serve(t, h.handler)
	return h
}

// startAPI serves one more API handler (an orchestrator replica) with its
// own verifier and its own store on the harness's catalog directory, and
// returns its /graphql URL.
func (h *harness) startAPI(t *testing.T) string {
	t.Helper()
	return serve(t, h.newHandler(t))
}

// newHandler returns an API handler with its own verifier and its own store
// on the harness's catalog directory.
func (h *harness) newHandler(t *testing.T) http.Handler {
	t.Helper()
	v, err := auth.NewVerifier(context.Background(), auth.Config{Issuer: h.idp.Issuer(), Audience: portal})
	if err != nil {
		t.Fatal(err)
	}
	store, err := catalog.OpenDir(h.dir)
	if err != nil {
		t.Fatal(err)
	}
	vdcs, err := vdc.New(vdc.Config{Store: store, Tokens: auth.ServiceAccountTokens{}})
	if err != nil {
		t.Fatal(err)
	}
	handler, err := server.New(server.Config{
		Verifier:      v,
		Resolver:      &graph.Resolver{Catalog: store, Estate: estate.New(estate.Config{Catalog: store}), VDCs: vdcs, Tenant: graph.Tenant{Name: "ACME Cloud", Domain: "cloud.acme.test"}},
		Logger:        slog.New(slog.NewTextHandler(h.logs, nil)),
		MaxDepth:      h.options.maxDepth,
		MaxComplexity: h.options.maxComplexity,
		RateLimits:    h.options.rateLimits,
		Audit:         h.options.audit,
	})
	if err != nil {
		t.Fatal(err)
	}
	return handler
}

// serve serves handler at /graphql on loopback and returns its URL.
func serve(t *testing.T, handler http.Handler) string {
	t.Helper()
	mux := http.NewServeMux()
	mux.Handle("/graphql", handler)
	mux.Handle("/graphql/"+graphiql.AssetDir, handler)
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv.URL + "/graphql"
}

// token returns a real access token of user, minted through the
// authorization code flow of the development provider.
func (h *harness) token(t *testing.T, user string) string {
	t.Helper()
	h.mu.Lock()
	defer h.mu.Unlock()
	if tok, ok := h.tokens[user]; ok {
		return tok
	}
	tok, err := h.idp.Login(context.Background(), portal, user, user+"-pw")
	if err != nil {
		t.Fatal(err)
	}
	h.tokens[user] = tok.AccessToken
	return tok.AccessToken
}

// response is a GraphQL answer.
type response = gqltest.Response

// post sends a GraphQL request with a raw Authorization header value
// ("" for none) and a VDC header ("" for none) to url (gqltest.Post).
func post(t *testing.T, url, authz, vdc, query string, vars map[string]any) *response {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	r, err := gqltest.Post(ctx, nil, url, gqltest.Request{Query: query, Variables: vars, Authorization: authz, VDC: vdc})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// do runs a query as user (signed in through the provider).
func (h *harness) do(t *testing.T, user, vdc, query string, vars map[string]any) *response {
	t.Helper()
	return post(t, h.url, "Bearer "+h.token(t, user), vdc, query, vars)
}

// manifests returns the catalog directory's manifests, to show that a
// refused request changed nothing.
func (h *harness) snapshot(t *testing.T) string {
	t.Helper()
	var b strings.Builder
	for _, k := range catalog.Kinds() {
		objs, err := h.store.List(context.Background(), k)
		if err != nil {
			t.Fatal(err)
		}
		for _, o := range objs {
			js, _ := json.Marshal(o)
			b.Write(js)
			b.WriteByte('\n')
		}
	}
	return b.String()
}
