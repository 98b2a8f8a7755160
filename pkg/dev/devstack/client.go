package devstack

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
)

// VDCHeader is the request header that names the VDC a request works in.
const VDCHeader = "FlexPlane-VDC-ID"

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
type GraphQLError struct {
	Message    string         `json:"message"`
	Path       []any          `json:"path,omitempty"`
	Extensions map[string]any `json:"extensions,omitempty"`
}

// Code is extensions.code.
func (e GraphQLError) Code() string { c, _ := e.Extensions["code"].(string); return c }

// ResponseError is returned when a response carries GraphQL errors.
type ResponseError struct {
	Errors []GraphQLError
}

func (e *ResponseError) Error() string {
	msgs := make([]string, len(e.Errors))
	for i, x := range e.Errors {
		msgs[i] = x.Message
		if c := x.Code(); c != "" {
			msgs[i] += " (" + c + ")"
		}
	}
	return "graphql: " + strings.Join(msgs, "; ")
}

// HasCode reports whether one of the errors carries code.
func (e *ResponseError) HasCode(code string) bool {
	for _, x := range e.Errors {
		if x.Code() == code {
			return true
		}
	}
	return false
}

// Do runs query in vdc ("" sends no VDC header) and decodes data into out
// (nil discards it). A response with errors returns a *ResponseError, after
// decoding whatever data came with it.
func (c *Client) Do(ctx context.Context, vdc, query string, vars map[string]any, out any) error {
	body, err := json.Marshal(map[string]any{"query": query, "variables": vars})
	if err != nil {
		return fmt.Errorf("graphql: %w", err)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.URL, bytes.NewReader(body))
	if err != nil {
		return fmt.Errorf("graphql: %w", err)
	}
	req.Header.Set("Content-Type", "application/json")
	if c.Token != "" {
		req.Header.Set("Authorization", "Bearer "+c.Token)
	}
	if vdc != "" {
		req.Header.Set(VDCHeader, vdc)
	}
	hc := c.HTTPClient
	if hc == nil {
		hc = http.DefaultClient
	}
	resp, err := hc.Do(req)
	if err != nil {
		return fmt.Errorf("graphql: %w", err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		return fmt.Errorf("graphql: %w", err)
	}
	var r struct {
		Data   json.RawMessage `json:"data"`
		Errors []GraphQLError  `json:"errors"`
	}
	if !strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json") || json.Unmarshal(raw, &r) != nil {
		return fmt.Errorf("graphql: status %d: %.200q", resp.StatusCode, raw)
	}
	if out != nil && len(r.Data) > 0 && string(r.Data) != "null" {
		if err := json.Unmarshal(r.Data, out); err != nil {
			return fmt.Errorf("graphql: decode data: %w", err)
		}
	}
	if len(r.Errors) > 0 {
		return &ResponseError{Errors: r.Errors}
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("graphql: status %d: %.200q", resp.StatusCode, raw)
	}
	return nil
}
