package devidp

import (
	"context"
	"html/template"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/zitadel/oidc/v3/pkg/op"
)

// The device authorization grant (RFC 8628), as Zitadel offers it to
// native applications: a CLI asks the device authorization endpoint for a
// device code and a short user code, shows the user code and DevicePath,
// and polls the token endpoint; the user opens DevicePath in any browser,
// enters the user code and signs in, and the CLI's next poll gets the
// tokens.

// DevicePath is the page where a user enters the user code of a device
// authorization (the verification_uri of the grant).
const DevicePath = "/device"

// deviceLifetime is how long a device authorization waits for its user.
const deviceLifetime = 10 * time.Minute

// devicePollInterval is the interval the provider asks clients to poll
// at: short, since the dev provider runs on loopback.
const devicePollInterval = time.Second

// deviceAuth is one device authorization, from the device authorization
// request until its code is exchanged or it expires.
type deviceAuth struct {
	clientID string
	userCode string
	scopes   []string
	expires  time.Time
	// Set when the user signed in.
	subject  string
	authTime time.Time
}

// StoreDeviceAuthorization implements op.DeviceAuthorizationStorage.
func (s *storage) StoreDeviceAuthorization(_ context.Context, clientID, deviceCode, userCode string, expires time.Time, scopes []string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for code, d := range s.devices { // purge expired ones: user codes are short
		if time.Now().After(d.expires) {
			delete(s.devices, code)
		}
	}
	for _, d := range s.devices {
		if d.userCode == userCode {
			return op.ErrDuplicateUserCode
		}
	}
	s.devices[deviceCode] = &deviceAuth{clientID: clientID, userCode: userCode, scopes: slices.Clone(scopes), expires: expires}
	return nil
}

// GetDeviceAuthorizatonState implements op.DeviceAuthorizationStorage
// (the misspelling is the interface's).
func (s *storage) GetDeviceAuthorizatonState(_ context.Context, clientID, deviceCode string) (*op.DeviceAuthorizationState, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	d, ok := s.devices[deviceCode]
	if !ok || d.clientID != clientID {
		return nil, notFound{"device authorization"}
	}
	st := &op.DeviceAuthorizationState{
		ClientID: d.clientID,
		Audience: []string{d.clientID},
		Scopes:   slices.Clone(d.scopes),
		Expires:  d.expires,
	}
	if d.subject != "" {
		st.Done, st.Subject, st.AMR, st.AuthTime = true, d.subject, []string{"pwd"}, d.authTime
		delete(s.devices, deviceCode) // a device code is exchanged once
	}
	return st, nil
}

// completeDevice marks the live device authorization of userCode as signed
// in by username.
func (s *storage) completeDevice(userCode, username string) bool {
	userCode = strings.ToUpper(strings.TrimSpace(userCode))
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, d := range s.devices {
		if d.userCode == userCode && d.subject == "" && time.Now().Before(d.expires) {
			d.subject, d.authTime = username, time.Now()
			return true
		}
	}
	return false
}

var devicePage = template.Must(template.New("device").Parse(`<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>flexplane dev device login</title></head>
<body><main>
<h1>flexplane development login for a device</h1>
{{if .Done}}<p role="status">Signed in: return to your terminal.</p>{{else}}
{{if .Error}}<p role="alert">{{.Error}}</p>{{end}}
<form method="post" action="{{.Action}}">
<label>Code <input name="user_code" value="{{.UserCode}}" required autofocus></label>
<label>Username <input name="username" autocomplete="username" required></label>
<label>Password <input name="password" type="password" autocomplete="current-password" required></label>
<button type="submit">Sign in</button>
</form>{{end}}
</main></body></html>
`))

// deviceHandler is the page of DevicePath: GET shows the form (the user
// code filled in from ?user_code=), POST checks the password and completes
// the device authorization.
type deviceHandler struct {
	storage *storage
	log     *slog.Logger
}

func (h *deviceHandler) render(w http.ResponseWriter, status int, userCode, msg string, done bool) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_ = devicePage.Execute(w, struct {
		Action, UserCode, Error string
		Done                    bool
	}{DevicePath, userCode, msg, done})
}

func (h *deviceHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch r.Method {
	case http.MethodGet:
		h.render(w, http.StatusOK, r.URL.Query().Get("user_code"), "", false)
	case http.MethodPost:
		if err := r.ParseForm(); err != nil {
			http.Error(w, "bad form", http.StatusBadRequest)
			return
		}
		code := r.PostForm.Get("user_code")
		user, ok := h.storage.checkPassword(r.PostForm.Get("username"), r.PostForm.Get("password"))
		if !ok {
			h.log.Info("devidp: device login refused", "username", r.PostForm.Get("username"))
			h.render(w, http.StatusUnauthorized, code, "Wrong username or password.", false)
			return
		}
		if !h.storage.completeDevice(code, user.Username) {
			h.render(w, http.StatusBadRequest, code, "Unknown or expired code: start again from your terminal.", false)
			return
		}
		h.render(w, http.StatusOK, "", "", true)
	default:
		w.Header().Set("Allow", "GET, POST")
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
	}
}
