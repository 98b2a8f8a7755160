package flexctl

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/Khan/genqlient/graphql"
	"github.com/vektah/gqlparser/v2/gqlerror"
	"golang.org/x/oauth2"
)

// GraphQLPath is the API's path under the endpoint.
const GraphQLPath = "/graphql"

// VDCHeader names the VDC a request acts in.
const VDCHeader = "FlexPlane-VDC-ID"

// APIError is a refusal of the API: the first GraphQL error's message and
// its extensions.code.
type APIError struct {
	Message string
	Code    string
	// Field is extensions.field, when the API names the input at fault.
	Field string
}

// Error is the message and the code, after the input field at fault when
// the API names one ("input.schedule: … (BAD_USER_INPUT)").
func (e *APIError) Error() string {
	if e.Field != "" {
		return fmt.Sprintf("%s: %s (%s)", e.Field, e.Message, e.Code)
	}
	return fmt.Sprintf("%s (%s)", e.Message, e.Code)
}

// AsAPIError turns what the generated client (package api) returned into
// an *APIError when it carries a GraphQL error (an answer with errors, or
// an HTTP refusal such as 401 with a GraphQL body), else wraps err with op.
// The Terraform provider (pkg/tfprovider) reads its errors the same way.
func AsAPIError(op string, err error) error {
	if err == nil {
		return nil
	}
	var list gqlerror.List
	var httpErr *graphql.HTTPError
	switch {
	case errors.As(err, &list) && len(list) > 0:
	case errors.As(err, &httpErr) && len(httpErr.Response.Errors) > 0:
		list = httpErr.Response.Errors
	case errors.As(err, &httpErr):
		return fmt.Errorf("%s: the API answered HTTP %d", op, httpErr.StatusCode)
	default:
		return fmt.Errorf("%s: %w", op, err)
	}
	e := list[0]
	ae := &APIError{Message: e.Message, Code: "ERROR"}
	if c, ok := e.Extensions["code"].(string); ok && c != "" {
		ae.Code = c
	}
	if f, ok := e.Extensions["field"].(string); ok {
		ae.Field = f
	}
	return ae
}

// headerTransport adds the bearer token and the VDC header to requests.
type headerTransport struct {
	base       http.RoundTripper
	token, vdc string
}

func (t *headerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	if t.token != "" {
		r.Header.Set("Authorization", "Bearer "+t.token)
	}
	if t.vdc != "" {
		r.Header.Set(VDCHeader, t.vdc)
	}
	return t.base.RoundTrip(r)
}

// client returns the GraphQL client of the resolved settings: it needs an
// endpoint, and renews the context's token first when it has expired and
// the context holds a refresh token (saving the new one).
func (a *app) client(ctx context.Context) (graphql.Client, error) {
	s, err := a.settings()
	if err != nil {
		return nil, err
	}
	if s.Endpoint == "" {
		return nil, usageErrorf("no endpoint: give --endpoint, set %s, or set one in a context (flexctl config set-context)", EnvEndpoint)
	}
	token := s.Token
	if s.FromContext {
		if token, err = a.renew(ctx, s.Context); err != nil {
			return nil, err
		}
	}
	return NewGraphQLClient(s.Endpoint, token, s.VDC, a.env.HTTPClient), nil
}

// NewGraphQLClient returns the generated client's transport for the API at
// endpoint (the base URL, without GraphQLPath), sending token as the bearer
// token and vdc as the VDC header (each left out when empty), over hc (nil:
// http.DefaultClient).
func NewGraphQLClient(endpoint, token, vdc string, hc *http.Client) graphql.Client {
	if hc == nil {
		hc = http.DefaultClient
	}
	base := hc.Transport
	if base == nil {
		base = http.DefaultTransport
	}
	c := *hc
	c.Transport = &headerTransport{base: base, token: token, vdc: vdc}
	return graphql.NewClient(endpoint+GraphQLPath, &c)
}

// renew returns the token of context name, renewed with its refresh token
// when it expires within a minute.
func (a *app) renew(ctx context.Context, name string) (string, error) {
	f, path, err := a.loadFile()
	if err != nil {
		return "", err
	}
	c := f.Context(name)
	if c == nil {
		return "", nil
	}
	if c.RefreshToken == "" || c.TokenURL == "" || c.Expiry.IsZero() || time.Until(c.Expiry) > time.Minute {
		return c.Token, nil
	}
	cfg := oauth2.Config{ClientID: c.ClientID, Endpoint: oauth2.Endpoint{TokenURL: c.TokenURL, AuthStyle: oauth2.AuthStyleInParams}}
	tok, err := cfg.TokenSource(context.WithValue(ctx, oauth2.HTTPClient, a.env.HTTPClient),
		&oauth2.Token{AccessToken: c.Token, RefreshToken: c.RefreshToken, Expiry: c.Expiry.Add(-time.Hour)}).Token()
	if err != nil {
		return "", fmt.Errorf("renew the token of context %q (run flexctl login again): %w", name, err)
	}
	c.Token, c.Expiry = tok.AccessToken, tok.Expiry
	if tok.RefreshToken != "" {
		c.RefreshToken = tok.RefreshToken
	}
	if err := f.Save(path); err != nil {
		return "", err
	}
	return c.Token, nil
}
