// Package devidp is a development OpenID provider: a real OIDC issuer
// (github.com/zitadel/oidc/v3 pkg/op) that runs in-process on a loopback
// address, for `make dev` and tests. It is not for production, where
// Zitadel is the identity provider.
//
// Users and their passwords are configured in Go. Browser clients (the
// portal) use the authorization code flow with PKCE and a plain login page;
// scripts and tests get real signed tokens with Login (or the CodeFlow
// function), which drives the same code flow over HTTP. Command-line
// clients (flexctl login) use the device authorization grant (RFC 8628):
// the user enters the code they show at DevicePath. Access tokens are
// JWTs whose audience is the client id and which carry the user's roles in
// Zitadel's project role claim (see package auth for the role keys), so
// the API verifies them exactly as it verifies Zitadel's.
//
// The signing key lives in Config.KeyDir and survives restarts, so tokens
// written to disk stay valid. Authorization requests and the bookkeeping of
// issued tokens (userinfo, introspection) live in memory. Refresh tokens
// are not supported: log in again.
package devidp

import (
	"context"
	"errors"
	"fmt"
	"html/template"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/zitadel/oidc/v3/pkg/op"
)

// User is an account of the development provider.
type User struct {
	// Username is the login name and the token subject.
	Username string
	// Password is compared in constant time; dev only, kept in memory.
	Password string
	// Name and Email fill the profile and email claims.
	Name, Email string
	// Roles are role keys, e.g. auth.PlatformAdminRole or
	// auth.VDCRoleKey("prod", auth.RoleMember).
	Roles []string
}

// Client is an OAuth client (an application) of the provider.
type Client struct {
	// ID is the client id, and the audience of its tokens.
	ID string
	// Secret empty makes a public client (a browser app) that must use
	// PKCE; otherwise the client authenticates with HTTP basic auth.
	Secret string
	// RedirectURIs are the allowed redirect URIs (http allowed: dev mode).
	RedirectURIs []string
	// PostLogoutRedirectURIs are the allowed redirects after logout.
	PostLogoutRedirectURIs []string
}

// Config configures a Server.
type Config struct {
	// Addr is the listen address; "" is 127.0.0.1:0 (a free port). The
	// issuer is http://<bound address>.
	Addr string
	// KeyDir holds the signing key (created on first start). Required.
	KeyDir string
	// Users and Clients are the accounts and applications.
	Users   []User
	Clients []Client
	// TokenLifetime is the validity of access and ID tokens; 0 is 1h.
	TokenLifetime time.Duration
	// RenewableTokenLifetime is the validity of access and ID tokens of a
	// login that can renew them (its scopes include offline_access, so it
	// holds a refresh token): the portal's sessions. 0 is TokenLifetime.
	// The dev stack keeps it short so that renewal shows.
	RenewableTokenLifetime time.Duration
	// RefreshLifetime is the validity of a refresh token (issued, as
	// Zitadel does, to a code exchange that asked for the offline_access
	// scope, and rotated on every use); 0 is 720h, Zitadel's default idle
	// expiration.
	RefreshLifetime time.Duration
	// OrgID and OrgDomain fill the values of the role claim; defaults
	// "flexplane-dev" and "dev.flexplane.local".
	OrgID, OrgDomain string
	// Logger receives request errors; nil discards.
	Logger *slog.Logger
}

// Server is a running development provider.
type Server struct {
	cfg     Config
	log     *slog.Logger
	storage *storage
	crypto  [32]byte
	issuer  string
	srv     *http.Server
	ln      net.Listener

	mu   sync.Mutex
	done chan struct{} // closed when Serve returns; protected by mu
}

// New checks cfg and loads (or creates) the keys; Start serves.
func New(cfg Config) (*Server, error) {
	if cfg.KeyDir == "" {
		return nil, errors.New("devidp: new: KeyDir is required")
	}
	if cfg.TokenLifetime == 0 {
		cfg.TokenLifetime = time.Hour
	}
	if cfg.RenewableTokenLifetime == 0 {
		cfg.RenewableTokenLifetime = cfg.TokenLifetime
	}
	if cfg.RefreshLifetime == 0 {
		cfg.RefreshLifetime = 720 * time.Hour
	}
	if cfg.TokenLifetime < 0 || cfg.RefreshLifetime < 0 || cfg.RenewableTokenLifetime < 0 {
		return nil, errors.New("devidp: new: token lifetimes must be positive")
	}
	if cfg.OrgID == "" {
		cfg.OrgID = "flexplane-dev"
	}
	if cfg.OrgDomain == "" {
		cfg.OrgDomain = "dev.flexplane.local"
	}
	if cfg.Addr == "" {
		cfg.Addr = "127.0.0.1:0"
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	key, crypto, err := loadKeys(cfg.KeyDir)
	if err != nil {
		return nil, fmt.Errorf("devidp: new: keys: %w", err)
	}
	st := &storage{
		key:               key,
		users:             map[string]User{},
		clients:           map[string]*client{},
		lifetime:          cfg.TokenLifetime,
		refreshLifetime:   cfg.RefreshLifetime,
		renewableLifetime: cfg.RenewableTokenLifetime,
		orgID:             cfg.OrgID,
		orgDomain:         cfg.OrgDomain,
		requests:          map[string]*authRequest{},
		codes:             map[string]string{},
		tokens:            map[string]*accessToken{},
		refresh:           map[string]*refreshToken{},
		devices:           map[string]*deviceAuth{},
	}
	for _, u := range cfg.Users {
		if u.Username == "" || u.Password == "" {
			return nil, fmt.Errorf("devidp: new: user %q needs a username and a password", u.Username)
		}
		if _, dup := st.users[u.Username]; dup {
			return nil, fmt.Errorf("devidp: new: user %q listed twice", u.Username)
		}
		st.users[u.Username] = u
	}
	for _, c := range cfg.Clients {
		if c.ID == "" || len(c.RedirectURIs) == 0 {
			return nil, fmt.Errorf("devidp: new: client %q needs an id and redirect URIs", c.ID)
		}
		if _, dup := st.clients[c.ID]; dup {
			return nil, fmt.Errorf("devidp: new: client %q listed twice", c.ID)
		}
		st.clients[c.ID] = &client{Client: c, lifetime: cfg.TokenLifetime}
	}
	return &Server{cfg: cfg, log: log, storage: st, crypto: crypto}, nil
}

// Start listens on Config.Addr and serves the provider in the background.
func (s *Server) Start() error {
	ln, err := net.Listen("tcp", s.cfg.Addr)
	if err != nil {
		return fmt.Errorf("devidp: start: %w", err)
	}
	s.issuer = "http://" + ln.Addr().String()
	for _, c := range s.storage.clients {
		c.loginURL = s.issuer + loginPath
	}
	provider, err := op.NewProvider(&op.Config{
		CryptoKey:                s.crypto,
		CodeMethodS256:           true,
		AuthMethodPost:           true,
		SupportedScopes:          []string{"openid", "profile", "email", "offline_access"},
		GrantTypeRefreshToken:    true,
		DefaultLogoutRedirectURI: loggedOutPath,
		DeviceAuthorization: op.DeviceAuthorizationConfig{
			Lifetime:     deviceLifetime,
			PollInterval: devicePollInterval,
			UserFormPath: DevicePath,
			UserCode:     op.UserCodeBase20,
		},
	}, s.storage, op.StaticIssuer(s.issuer), op.WithAllowInsecure(), op.WithLogger(s.log))
	if err != nil {
		ln.Close()
		return fmt.Errorf("devidp: start: %w", err)
	}
	mux := http.NewServeMux()
	mux.Handle(loginPath, &loginHandler{storage: s.storage, callback: op.AuthCallbackURL(provider), issuer: s.issuer, log: s.log})
	mux.Handle(DevicePath, &deviceHandler{storage: s.storage, log: s.log})
	mux.HandleFunc(loggedOutPath, func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = w.Write([]byte("You are signed out of the flexplane development provider.\n"))
	})
	mux.Handle("/", provider)
	s.ln = ln
	s.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	done := make(chan struct{})
	s.mu.Lock()
	s.done = done
	s.mu.Unlock()
	go func() {
		defer close(done)
		if err := s.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			s.log.Error("devidp: serve", "err", err)
		}
	}()
	s.log.Info("devidp: serving", "issuer", s.issuer)
	return nil
}

// Issuer is the issuer URL (valid after Start).
func (s *Server) Issuer() string { return s.issuer }

// Close stops the server at once and waits for it to return.
func (s *Server) Close() error {
	if s.srv == nil {
		return nil
	}
	err := s.srv.Close()
	s.mu.Lock()
	done := s.done
	s.mu.Unlock()
	<-done
	return err
}

// Login runs the authorization code flow with PKCE over HTTP, as a browser
// would, for a configured user and public client and its first redirect
// URI, and returns the tokens. It is how `make dev` and tests mint tokens.
func (s *Server) Login(ctx context.Context, clientID, username, password string) (*Tokens, error) {
	c, ok := s.storage.clients[clientID]
	if !ok {
		return nil, fmt.Errorf("devidp: login: unknown client %q", clientID)
	}
	return CodeFlow(ctx, nil, FlowParams{
		Issuer:      s.issuer,
		ClientID:    clientID,
		RedirectURI: c.Client.RedirectURIs[0],
		Username:    username,
		Password:    password,
	})
}

const (
	loginPath     = "/login"
	loggedOutPath = "/logged-out"
)

var loginPage = template.Must(template.New("login").Parse(`<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>flexplane dev login</title></head>
<body><main>
<h1>flexplane development login</h1>
{{if .Error}}<p role="alert">{{.Error}}</p>{{end}}
<form method="post" action="{{.Action}}">
<input type="hidden" name="authRequestID" value="{{.ID}}">
<label>Username <input name="username" autocomplete="username" required autofocus></label>
<label>Password <input name="password" type="password" autocomplete="current-password" required></label>
<button type="submit">Sign in</button>
</form>
</main></body></html>
`))

// loginHandler is the provider's login page: GET shows the form of an
// authorization request, POST checks the password and hands the request
// back to the provider, which redirects to the client with a code.
type loginHandler struct {
	storage  *storage
	callback func(context.Context, string) string
	issuer   string
	log      *slog.Logger
}

func (h *loginHandler) render(w http.ResponseWriter, status int, id, msg string) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_ = loginPage.Execute(w, struct{ Action, ID, Error string }{loginPath, id, msg})
}

func (h *loginHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch r.Method {
	case http.MethodGet:
		id := r.URL.Query().Get("authRequestID")
		if _, err := h.storage.AuthRequestByID(r.Context(), id); err != nil {
			http.Error(w, "unknown or expired login request: start again from the application", http.StatusBadRequest)
			return
		}
		h.render(w, http.StatusOK, id, "")
	case http.MethodPost:
		if err := r.ParseForm(); err != nil {
			http.Error(w, "bad form", http.StatusBadRequest)
			return
		}
		id := r.PostForm.Get("authRequestID")
		if _, err := h.storage.AuthRequestByID(r.Context(), id); err != nil {
			http.Error(w, "unknown or expired login request: start again from the application", http.StatusBadRequest)
			return
		}
		user, ok := h.storage.checkPassword(r.PostForm.Get("username"), r.PostForm.Get("password"))
		if !ok {
			h.log.Info("devidp: login refused", "username", r.PostForm.Get("username"))
			h.render(w, http.StatusUnauthorized, id, "Wrong username or password.")
			return
		}
		if err := h.storage.completeLogin(id, user.Username); err != nil {
			http.Error(w, "unknown or expired login request", http.StatusBadRequest)
			return
		}
		http.Redirect(w, r, h.callback(op.ContextWithIssuer(r.Context(), h.issuer), id), http.StatusFound)
	default:
		w.Header().Set("Allow", "GET, POST")
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
	}
}
