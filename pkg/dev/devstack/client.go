package devstack

import (
	"context"
	"net/http"

	"github.com/flexplane/flexplane/pkg/dev/gqltest"
)

// VDCHeader is the request header that names the VDC a request works in.
const VDCHeader = gqltest.VDCHeader

// Client calls the stack's GraphQL API with one user's bearer token.
type Client struct {
	// URL is the GraphQL endpoint, e.g. http://127.0.0.1:8080/graphql.
	URL string
	// Token is the bearer token ("" sends none).
	Token string
	// HTTPClient defaults to http.DefaultClient.
	HTTPClient *http.Client
}

// GraphQLError is one error of a GraphQL response.
type GraphQLError = gqltest.Error

// ResponseError is returned when a response carries GraphQL errors.
type ResponseError = gqltest.ResponseError

// Do runs query in vdc ("" sends no VDC header) and decodes data into out
// (nil discards it). A response with errors returns a *ResponseError, after
// decoding whatever data came with it.
func (c *Client) Do(ctx context.Context, vdc, query string, vars map[string]any, out any) error {
	req := gqltest.Request{Query: query, Variables: vars, VDC: vdc}
	if c.Token != "" {
		req.Authorization = "Bearer " + c.Token
	}
	r, err := gqltest.Post(ctx, c.HTTPClient, c.URL, req)
	if err != nil {
		return err
	}
	if out != nil {
		if err := r.Decode(out); err != nil {
			return err
		}
	}
	return r.Err()
}
