// Package server serves flexplane's GraphQL API over HTTP: POST and GET
// queries, a websocket transport for subscriptions, introspection and a
// GraphiQL page for humans, behind bearer authentication (users' OIDC
// tokens, service accounts' tokens) and the
// FlexPlane-VDC-ID header. It maps every error to a client-safe message
// with extensions.code (see package apierr) and logs internal causes.
//
// The orchestrator mounts the handler, e.g.
//
//	h, err := server.New(server.Config{Verifier: v, Resolver: &graph.Resolver{...}})
//	mux.Handle("/graphql", h)
//	mux.Handle("/graphql/"+graphiql.AssetDir, h) // the GraphiQL page's assets
package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"runtime/debug"
	"strings"
	"time"

	"github.com/99designs/gqlgen/graphql"
	"github.com/99designs/gqlgen/graphql/handler"
	"github.com/99designs/gqlgen/graphql/handler/extension"
	"github.com/99designs/gqlgen/graphql/handler/lru"
	"github.com/99designs/gqlgen/graphql/handler/transport"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/vektah/gqlparser/v2/ast"
	"github.com/vektah/gqlparser/v2/gqlerror"
	"github.com/vektah/gqlparser/v2/validator/rules"
	"go.opentelemetry.io/otel/trace"

	"github.com/flexplane/flexplane/graph"
	"github.com/flexplane/flexplane/graph/generated"
	"github.com/flexplane/flexplane/graph/server/apierr"
	"github.com/flexplane/flexplane/graph/server/graphiql"
	"github.com/flexplane/flexplane/pkg/audit"
	"github.com/flexplane/flexplane/pkg/auth"
	"github.com/flexplane/flexplane/pkg/support/fault"
)

// Config configures the GraphQL handler. Verifier and Resolver are
// required; zero values of the rest are sensible defaults.
type Config struct {
	// Verifier checks users' bearer tokens (OIDC); service accounts'
	// tokens (auth.ServiceAccountTokenPrefix) are checked against the
	// VDCs of Resolver.VDCs.
	Verifier *auth.Verifier
	// Resolver holds the domain dependencies (catalog, tenant, zone
	// registry, enrollment keys). Resolver.Catalog is also used to check
	// the FlexPlane-VDC-ID header.
	Resolver *graph.Resolver
	// Logger receives internal errors and panics; nil discards.
	Logger *slog.Logger
	// MaxDepth is the deepest field nesting a query may have (introspection
	// fields are not counted); 0 is 12.
	MaxDepth int
	// MaxComplexity bounds the complexity of an operation (each field costs
	// 1 plus its children; list fields their children times first, see
	// complexity); 0 is 1000.
	MaxComplexity int
	// MaxBodyBytes bounds request bodies; 0 is 1 MiB.
	MaxBodyBytes int64
	// MaxUploadBytes bounds the body of a multipart request (uploadImage's
	// file and its operation, which stream: see uploadTransport) instead
	// of MaxBodyBytes; 0 is 64 GiB and 1 MiB.
	MaxUploadBytes int64
	// Metrics receives the API's Prometheus metrics (operations and their
	// durations); nil keeps none.
	Metrics prometheus.Registerer
	// TracerProvider gives the span of each operation; nil traces nothing.
	TracerProvider trace.TracerProvider
	// Audit receives an audit event for every mutation field; nil audits
	// nothing.
	Audit audit.Sink
	// MaxQueryBytes bounds the text of one GraphQL document (the query,
	// not its variables); 0 is 16 KiB.
	MaxQueryBytes int
	// MaxTokens bounds the lexical tokens of one document: the parser
	// stops there, so parsing and validation (whose cost can grow with
	// the square of the fields) work on a bounded document; 0 is 2000
	// (the full introspection query has about 250).
	MaxTokens int
	// MaxValidationErrors bounds the validation errors reported for one
	// document (and so the work of formatting them); 0 is 10.
	MaxValidationErrors int
	// MaxSameNameFields bounds the fields of one response name that one
	// selection set may collect (validation compares them pairwise); 0 is
	// 10.
	MaxSameNameFields int
	// MaxIntrospectionFields bounds the __schema and __type fields of one
	// operation (each answers up to the whole schema); 0 is 2.
	MaxIntrospectionFields int
	// RateLimits bound how fast one caller may run mutations and
	// openConsole; the zero value takes the defaults (10 mutation fields
	// per second after a burst of 30, openConsole 5 per second).
	RateLimits RateLimits
}

// New returns the handler of the GraphQL endpoint. It answers at whatever
// path it is mounted on: POST and GET queries (GET cannot mutate), websocket
// upgrades, and a GraphiQL page for a GET that asks for HTML.
func New(cfg Config) (http.Handler, error) {
	if cfg.Verifier == nil || cfg.Resolver == nil || cfg.Resolver.Catalog == nil {
		return nil, errors.New("server: new: Verifier, Resolver and Resolver.Catalog are required")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.MaxDepth == 0 {
		cfg.MaxDepth = 12
	}
	if cfg.MaxComplexity == 0 {
		cfg.MaxComplexity = 1000
	}
	if cfg.MaxBodyBytes == 0 {
		cfg.MaxBodyBytes = 1 << 20
	}
	if cfg.MaxUploadBytes == 0 {
		cfg.MaxUploadBytes = 64<<30 + 1<<20
	}
	if cfg.MaxQueryBytes == 0 {
		cfg.MaxQueryBytes = 16 << 10
	}
	if cfg.MaxTokens == 0 {
		cfg.MaxTokens = 2000
	}
	if cfg.MaxValidationErrors == 0 {
		cfg.MaxValidationErrors = 10
	}
	if cfg.MaxSameNameFields == 0 {
		cfg.MaxSameNameFields = 10
	}
	if cfg.MaxIntrospectionFields == 0 {
		cfg.MaxIntrospectionFields = 2
	}
	if cfg.Resolver.Logger == nil {
		cfg.Resolver.Logger = cfg.Logger
	}
	page, err := graphiql.New("flexplane GraphQL")
	if err != nil {
		return nil, fmt.Errorf("server: new: %w", err)
	}
	h := &apiHandler{cfg: cfg, log: cfg.Logger, graphiql: page, limiter: newRateLimiter(cfg.RateLimits)}
	if cfg.Resolver.VDCs != nil {
		h.accounts = auth.NewServiceAccountVerifier(serviceAccountStore{cfg.Resolver.VDCs}, nil)
	}

	srv := handler.New(generated.NewExecutableSchema(generated.Config{
		Resolvers:  cfg.Resolver,
		Directives: directives(),
		Complexity: complexity(),
	}))
	srv.AddTransport(transport.Websocket{
		KeepAlivePingInterval: 10 * time.Second,
		InitTimeout:           10 * time.Second,
		InitFunc:              h.websocketInit,
	})
	srv.AddTransport(transport.Options{})
	srv.AddTransport(transport.GET{})
	srv.AddTransport(transport.POST{})
	srv.AddTransport(uploadTransport{})
	srv.SetQueryCache(lru.New[*ast.QueryDocument](1000))
	if cfg.Metrics != nil {
		// Used first, it is the outermost operation interceptor: it also
		// counts the operations aroundOperation refuses.
		m, err := newOpMetrics(cfg.Metrics)
		if err != nil {
			return nil, fmt.Errorf("server: new: metrics: %w", err)
		}
		srv.Use(m)
	}
	if cfg.TracerProvider != nil {
		srv.Use(opTracing{tracer: cfg.TracerProvider.Tracer(TracerName)})
	}
	if cfg.Audit != nil {
		srv.Use(&auditor{sink: cfg.Audit})
	}
	srv.SetParserTokenLimit(cfg.MaxTokens)
	srv.SetValidationRulesFn(func() *rules.Rules { return cappedRules(cfg.MaxValidationErrors, cfg.MaxSameNameFields) })
	srv.Use(queryLimit{maxBytes: cfg.MaxQueryBytes})
	srv.Use(extension.Introspection{})
	srv.Use(depthLimit{max: cfg.MaxDepth, maxIntrospection: cfg.MaxIntrospectionFields})
	srv.Use(extension.FixedComplexityLimit(cfg.MaxComplexity))
	srv.SetErrorPresenter(h.present)
	srv.SetRecoverFunc(func(ctx context.Context, v any) error {
		h.log.Error("graphql: panic", "panic", v, "stack", string(debug.Stack()))
		return apierr.New(apierr.Internal, "internal error")
	})
	srv.AroundOperations(h.aroundOperation)
	h.srv = srv
	return h, nil
}

type apiHandler struct {
	cfg      Config
	log      *slog.Logger
	srv      *handler.Server
	graphiql *graphiql.Handler
	limiter  *rateLimiter                 // nil: no rate limit
	accounts *auth.ServiceAccountVerifier // nil without Resolver.VDCs
}

func (h *apiHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if _, ok := graphiql.Asset(r); ok {
		h.graphiql.ServeAsset(w, r)
		return
	}
	if r.Method == http.MethodGet && r.URL.Query().Get("query") == "" && !isWebsocket(r) &&
		strings.Contains(r.Header.Get("Accept"), "text/html") {
		h.graphiql.ServePage(w, r)
		return
	}
	limit := h.cfg.MaxBodyBytes
	if r.Method == http.MethodPost && isMultipart(r) {
		limit = h.cfg.MaxUploadBytes
	}
	r.Body = http.MaxBytesReader(w, r.Body, limit)
	ctx := r.Context()
	if v := r.Header.Get(graph.VDCHeader); v != "" {
		ctx = withVDCName(ctx, v)
	}
	header := r.Header.Get("Authorization")
	// Browsers cannot set headers on websocket upgrades: such connections
	// authenticate in their connection_init payload (websocketInit). CORS
	// preflights carry no credentials and get only the allowed methods.
	if !(isWebsocket(r) && header == "") && r.Method != http.MethodOptions {
		tok, err := auth.BearerToken(header)
		if err == nil {
			var p *auth.Principal
			if p, err = h.verify(ctx, tok); err == nil {
				ctx = auth.NewContext(ctx, p)
			}
		}
		if err != nil {
			h.unauthenticated(w, r.WithContext(ctx), err)
			return
		}
	}
	r = r.WithContext(ctx)
	if !isWebsocket(r) {
		w, r = withThrottle(w, r)
	}
	h.srv.ServeHTTP(w, r)
}

// verify checks a bearer token: a service account's (by its prefix) or a
// user's OIDC token.
func (h *apiHandler) verify(ctx context.Context, tok string) (*auth.Principal, error) {
	if auth.IsServiceAccountToken(tok) {
		if h.accounts == nil {
			return nil, &auth.RefusedError{Reason: "service account tokens are not accepted here"}
		}
		return h.accounts.Verify(ctx, tok)
	}
	return h.cfg.Verifier.Verify(ctx, tok)
}

func isWebsocket(r *http.Request) bool {
	return strings.EqualFold(r.Header.Get("Upgrade"), "websocket")
}

// unauthenticated answers 401 with a GraphQL error body, or 503 when the
// token could not be judged because the identity provider is unreachable
// (the client should retry, not sign in again); a mutation of r is audited.
func (h *apiHandler) unauthenticated(w http.ResponseWriter, r *http.Request, err error) {
	ae := apierr.From(err, "")
	body := gqlerror.List{{Message: ae.Message, Extensions: ae.Extensions()}}
	h.auditUnauthenticated(r, body)
	w.Header().Set("Content-Type", "application/json")
	if ae.Code == apierr.Unavailable {
		h.log.Warn("graphql: cannot verify tokens", "err", err)
		w.Header().Set("Retry-After", "2")
		w.WriteHeader(http.StatusServiceUnavailable)
	} else {
		h.log.Debug("graphql: unauthenticated", "err", err)
		w.Header().Set("WWW-Authenticate", `Bearer error="invalid_token"`)
		w.WriteHeader(http.StatusUnauthorized)
	}
	_ = json.NewEncoder(w).Encode(graphql.Response{Errors: body})
}

// websocketInit authenticates a websocket connection from its
// connection_init payload ("Authorization": "Bearer <token>", and
// optionally "FlexPlane-VDC-ID"). A refused connection is closed with code
// 4403 (graphql-transport-ws "Forbidden") and the reason
// "UNAUTHENTICATED: <why>", or while the identity provider cannot be
// reached with 1013 ("try again later") and "UNAVAILABLE: <why>".
func (h *apiHandler) websocketInit(ctx context.Context, payload transport.InitPayload) (context.Context, *transport.InitPayload, error) {
	if v := payload.GetString(graph.VDCHeader); v != "" {
		ctx = withVDCName(ctx, v)
	}
	if header := payload.Authorization(); header != "" {
		tok, err := auth.BearerToken(header)
		var p *auth.Principal
		if err == nil {
			p, err = h.verify(ctx, tok)
		}
		if err != nil {
			return refuseWebsocket(ctx, err)
		}
		ctx = auth.NewContext(ctx, p)
	}
	if _, ok := auth.FromContext(ctx); !ok {
		return refuseWebsocket(ctx, auth.ErrNoToken)
	}
	return ctx, nil, nil
}

func refuseWebsocket(ctx context.Context, err error) (context.Context, *transport.InitPayload, error) {
	ae := apierr.From(err, "")
	// 4403 is graphql-transport-ws "Forbidden"; 1013 is the websocket
	// protocol's "try again later".
	code, closeCode := apierr.Unauthenticated, 4403
	if ae.Code == apierr.Unavailable {
		code, closeCode = apierr.Unavailable, 1013
	}
	reason := string(code) + ": " + ae.Message
	if len(reason) > 120 { // a close frame's reason has at most 123 bytes
		reason = reason[:120]
	}
	ctx = transport.WithWebsocketCloseCode(ctx, closeCode)
	ctx = transport.AppendCloseReason(ctx, reason)
	return ctx, nil, err
}

// aroundOperation takes a mutation's tokens from its caller's rate limits
// (RATE_LIMITED when they are spent) and begins the operation's state
// (beginOperation: a caller is required, and the FlexPlane-VDC-ID header
// names a VDC the caller may use, else NOT_FOUND); a refusal fails the
// whole operation before any resolver runs.
func (h *apiHandler) aroundOperation(ctx context.Context, next graphql.OperationHandler) graphql.ResponseHandler {
	oc := graphql.GetOperationContext(ctx)
	if err := h.limiter.limit(ctx, oc); err != nil {
		return h.fail(ctx, err)
	}
	subscription := oc.Operation != nil && oc.Operation.Operation == ast.Subscription
	ctx, err := beginOperation(ctx, h.cfg.Resolver.Catalog, subscription)
	if err != nil {
		return h.fail(ctx, err)
	}
	return next(ctx)
}

func (h *apiHandler) fail(ctx context.Context, err error) graphql.ResponseHandler {
	return graphql.OneShot(&graphql.Response{Errors: gqlerror.List{h.present(ctx, err)}})
}

// present turns any error into one a client may see: apierr errors as they
// are; gqlgen's own request errors (parse, validation, limits) as
// BAD_USER_INPUT with their original code in extensions.reason; anything
// else is logged and shown as INTERNAL.
func (h *apiHandler) present(ctx context.Context, err error) *gqlerror.Error {
	gqlErr := graphql.DefaultErrorPresenter(ctx, err)
	var (
		ae *apierr.Error
		fe *fault.Error
	)
	if errors.As(err, &ae) || errors.As(err, &fe) {
		ae = apierr.From(err, "") // a service's kinded error, as paging's on first and after

		if ae.Code == apierr.Internal {
			h.log.Error("graphql: internal error", "path", gqlErr.Path.String(), "err", ae)
		}
		return &gqlerror.Error{Message: ae.Message, Path: gqlErr.Path, Locations: gqlErr.Locations, Extensions: ae.Extensions()}
	}
	var ge *gqlerror.Error
	if errors.As(err, &ge) && ge.Err == nil {
		ext := map[string]any{"code": string(apierr.BadUserInput)}
		if reason, ok := ge.Extensions["code"]; ok {
			ext["reason"] = reason
		}
		return &gqlerror.Error{Message: withoutBody(ge.Message), Path: ge.Path, Locations: ge.Locations, Rule: ge.Rule, Extensions: ext}
	}
	h.log.Error("graphql: internal error", "path", gqlErr.Path.String(), "err", err)
	return &gqlerror.Error{Message: "internal error", Path: gqlErr.Path, Extensions: map[string]any{"code": string(apierr.Internal)}}
}

// undecodable starts gqlgen's message for a POST body that is not a JSON
// GraphQL request, which it ends with " body:" and the whole body.
const undecodable = "json request body could not be decoded: "

// withoutBody drops the request body gqlgen appends to the message of an
// undecodable request: an answer does not echo what it was sent.
func withoutBody(msg string) string {
	rest, ok := strings.CutPrefix(msg, undecodable)
	if !ok {
		return msg
	}
	why, _, _ := strings.Cut(rest, " body:")
	return "the request body is not a JSON GraphQL request: " + why
}
