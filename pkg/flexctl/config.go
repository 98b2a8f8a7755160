package flexctl

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/flexplane/flexplane/pkg/support/atomicfile"
)

// Environment variables flexctl reads; a flag wins over its variable, and
// the variable over the current context of the configuration file.
const (
	EnvEndpoint = "FLEXPLANE_ENDPOINT"
	EnvVDC      = "FLEXPLANE_VDC"
	EnvToken    = "FLEXPLANE_TOKEN"
)

// File is flexctl's configuration file, config.yaml in
// $XDG_CONFIG_HOME/flexplane (default ~/.config/flexplane). It holds
// tokens, so it is written with mode 0600.
type File struct {
	// CurrentContext names the context used when --context is not given.
	CurrentContext string `json:"currentContext,omitempty"`
	// Contexts are the named endpoints, VDCs and logins.
	Contexts []Context `json:"contexts,omitempty"`
}

// Context is one named place to work: an API endpoint, a VDC in it, and
// the login (set by flexctl login) used there.
type Context struct {
	// Name is how flexctl config and --context call it.
	Name string `json:"name"`
	// Endpoint is the API's base URL, e.g. http://127.0.0.1:8080 (the
	// GraphQL endpoint is Endpoint + "/graphql").
	Endpoint string `json:"endpoint,omitempty"`
	// VDC is the VDC requests act in (the FlexPlane-VDC-ID header).
	VDC string `json:"vdc,omitempty"`
	// Token is an access token (a user's from flexctl login, or a
	// service account's set by hand).
	Token string `json:"token,omitempty"`
	// RefreshToken renews Token when it has expired (from flexctl login,
	// when the identity provider issued one).
	RefreshToken string `json:"refreshToken,omitempty"`
	// Expiry is when Token expires (zero: unknown).
	Expiry time.Time `json:"expiry,omitzero"`
	// TokenURL and ClientID are where and as whom RefreshToken is used.
	TokenURL string `json:"tokenURL,omitempty"`
	ClientID string `json:"clientID,omitempty"`
}

// ConfigPath is the configuration file's path for the environment getenv
// reads: $XDG_CONFIG_HOME/flexplane/config.yaml, else
// $HOME/.config/flexplane/config.yaml.
func ConfigPath(getenv func(string) string) (string, error) {
	if d := getenv("XDG_CONFIG_HOME"); d != "" && filepath.IsAbs(d) {
		return filepath.Join(d, "flexplane", "config.yaml"), nil
	}
	home := getenv("HOME")
	if home == "" {
		return "", errors.New("config path: neither XDG_CONFIG_HOME nor HOME is set")
	}
	return filepath.Join(home, ".config", "flexplane", "config.yaml"), nil
}

// LoadFile reads the configuration file at path; a missing file is an
// empty configuration.
func LoadFile(path string) (*File, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return &File{}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("load config: %w", err)
	}
	var f File
	if err := yaml.UnmarshalStrict(b, &f); err != nil {
		return nil, fmt.Errorf("load config %s: %w", path, err)
	}
	return &f, nil
}

// Save writes f to path (mode 0600, its directory 0700), replacing the
// file at once so that a reader never sees half of it.
func (f *File) Save(path string) error {
	b, err := yaml.Marshal(f)
	if err != nil {
		return fmt.Errorf("save config: %w", err)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return fmt.Errorf("save config: %w", err)
	}
	if err := atomicfile.WriteFile(path, b, 0o600); err != nil {
		return fmt.Errorf("save config: %w", err)
	}
	return nil
}

// Context returns the context called name, or nil.
func (f *File) Context(name string) *Context {
	for i := range f.Contexts {
		if f.Contexts[i].Name == name {
			return &f.Contexts[i]
		}
	}
	return nil
}

// Upsert returns the context called name, adding an empty one if there is
// none.
func (f *File) Upsert(name string) *Context {
	if c := f.Context(name); c != nil {
		return c
	}
	f.Contexts = append(f.Contexts, Context{Name: name})
	slices.SortFunc(f.Contexts, func(a, b Context) int { return strings.Compare(a.Name, b.Name) })
	return f.Context(name)
}

// Settings are what a command works with, resolved from flags, the
// environment and the configuration file.
type Settings struct {
	// Context is the context in use ("" when the file has none).
	Context string
	// Endpoint is the API's base URL, without "/graphql".
	Endpoint string
	// VDC is the VDC to act in ("" sends no VDC header).
	VDC string
	// Token is the bearer token ("" sends none).
	Token string
	// FromContext reports whether Token is the context's (so that it may
	// be renewed with the context's refresh token and saved back).
	FromContext bool
}

// Overrides are the global flags: each non-empty one wins over its
// environment variable and the context.
type Overrides struct {
	Context, Endpoint, VDC, Token string
}

// Resolve picks each setting from the flag, else the environment variable,
// else the context named by the flag or the file's current context. It
// fails for a --context the file does not have.
func Resolve(f *File, o Overrides, getenv func(string) string) (Settings, error) {
	var s Settings
	name := o.Context
	if name == "" {
		name = f.CurrentContext
	}
	var ctx Context
	if name != "" {
		c := f.Context(name)
		if c == nil {
			if o.Context != "" {
				return Settings{}, usageErrorf("no context %q in the configuration (flexctl config get-contexts lists them)", name)
			}
		} else {
			ctx = *c
			s.Context = name
		}
	}
	s.Endpoint = first(o.Endpoint, getenv(EnvEndpoint), ctx.Endpoint)
	s.VDC = first(o.VDC, getenv(EnvVDC), ctx.VDC)
	s.Token = first(o.Token, getenv(EnvToken))
	if s.Token == "" && ctx.Token != "" {
		s.Token, s.FromContext = ctx.Token, true
	}
	s.Endpoint = strings.TrimSuffix(s.Endpoint, "/")
	return s, nil
}

func first(vals ...string) string {
	for _, v := range vals {
		if v != "" {
			return v
		}
	}
	return ""
}
