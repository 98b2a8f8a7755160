// Package gqltest is the one GraphQL client of flexplane's tests and dev
// tools: a request over HTTP POST with its bearer token and VDC header
// (Post), and an operation over a websocket in the graphql-transport-ws
// protocol (Subscribe). The harnesses (graph/server's, pkg/dev/meshtest), the
// dev stack's seeding and the benchmark all send their requests with it.
package gqltest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"mime/multipart"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/coder/websocket"
)

// VDCHeader is the request header (and connection_init payload key) that
// names the VDC a request works in; it is graph.VDCHeader.
const VDCHeader = "FlexPlane-VDC-ID"

// Request is one GraphQL request.
type Request struct {
	Query     string
	Variables map[string]any
	// Authorization is the raw Authorization header value, e.g.
	// "Bearer <token>" ("" sends none).
	Authorization string
	// VDC is sent as the FlexPlane-VDC-ID header ("" sends none).
	VDC string
	// File, when set, is sent as a file of the GraphQL multipart request
	// spec, streamed as it is read (a read error cuts the body off), for
	// the variable FileVariable names (e.g. "input.file", whose value in
	// Variables the server replaces).
	File         io.Reader
	FileVariable string
}

// Error is one error of a GraphQL response.
type Error struct {
	Message    string         `json:"message"`
	Path       []any          `json:"path,omitempty"`
	Extensions map[string]any `json:"extensions,omitempty"`
}

// Code is extensions.code.
func (e Error) Code() string { c, _ := e.Extensions["code"].(string); return c }

// Response is the answer to a GraphQL request.
type Response struct {
	// Status is the HTTP status code.
	Status int                        `json:"-"`
	Data   map[string]json.RawMessage `json:"data"`
	Errors []Error                    `json:"errors"`
	// Raw is the body as received.
	Raw string `json:"-"`
}

// Post sends req to the GraphQL endpoint url with hc (nil:
// http.DefaultClient). It fails when the request cannot be made or the
// answer is not a JSON GraphQL response; an answer with GraphQL errors or
// a status other than 200 is a Response (see Err).
func Post(ctx context.Context, hc *http.Client, url string, req Request) (*Response, error) {
	body, err := json.Marshal(map[string]any{"query": req.Query, "variables": req.Variables})
	if err != nil {
		return nil, fmt.Errorf("graphql: %w", err)
	}
	var rd io.Reader = bytes.NewReader(body)
	ctype := "application/json"
	if req.File != nil {
		rd, ctype = multipartBody(body, req.FileVariable, req.File)
	}
	hr, err := http.NewRequestWithContext(ctx, http.MethodPost, url, rd)
	if err != nil {
		return nil, fmt.Errorf("graphql: %w", err)
	}
	hr.Header.Set("Content-Type", ctype)
	if req.Authorization != "" {
		hr.Header.Set("Authorization", req.Authorization)
	}
	if req.VDC != "" {
		hr.Header.Set(VDCHeader, req.VDC)
	}
	if hc == nil {
		hc = http.DefaultClient
	}
	resp, err := hc.Do(hr)
	if err != nil {
		return nil, fmt.Errorf("graphql: %w", err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("graphql: read answer: %w", err)
	}
	r := &Response{Status: resp.StatusCode, Raw: string(raw)}
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
		return nil, fmt.Errorf("graphql: status %d, %s: %.300q", resp.StatusCode, ct, raw)
	}
	if err := json.Unmarshal(raw, r); err != nil {
		return nil, fmt.Errorf("graphql: status %d, body %.300q: %w", resp.StatusCode, raw, err)
	}
	return r, nil
}

// multipartBody is a request of the GraphQL multipart request spec:
// operations, then the map naming variable, then the file as file reads
// it (a read error other than io.EOF cuts the body off).
func multipartBody(operations []byte, variable string, file io.Reader) (io.Reader, string) {
	pr, pw := io.Pipe()
	mw := multipart.NewWriter(pw)
	go func() {
		err := mw.WriteField("operations", string(operations))
		if err == nil {
			m, _ := json.Marshal(map[string][]string{"0": {"variables." + variable}})
			err = mw.WriteField("map", string(m))
		}
		var fw io.Writer
		if err == nil {
			fw, err = mw.CreateFormFile("0", "upload")
		}
		if err == nil {
			_, err = io.Copy(fw, file)
		}
		if err == nil {
			err = mw.Close()
		}
		pw.CloseWithError(err)
	}()
	return pr, mw.FormDataContentType()
}

// ResponseError is an answer that carries GraphQL errors.
type ResponseError struct {
	Status int
	Errors []Error
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
	return slices.ContainsFunc(e.Errors, func(x Error) bool { return x.Code() == code })
}

// Err returns a *ResponseError when r carries GraphQL errors, an error
// when its status is not 200, else nil.
func (r *Response) Err() error {
	if len(r.Errors) > 0 {
		return &ResponseError{Status: r.Status, Errors: r.Errors}
	}
	if r.Status != http.StatusOK {
		return fmt.Errorf("graphql: status %d: %.300q", r.Status, r.Raw)
	}
	return nil
}

// Decode decodes the whole data object into out (a null or absent data
// leaves out as it is).
func (r *Response) Decode(out any) error {
	var body struct {
		Data json.RawMessage `json:"data"`
	}
	if err := json.Unmarshal([]byte(r.Raw), &body); err != nil {
		return fmt.Errorf("graphql: decode data: %w", err)
	}
	if len(body.Data) == 0 || string(body.Data) == "null" {
		return nil
	}
	if err := json.Unmarshal(body.Data, out); err != nil {
		return fmt.Errorf("graphql: decode data: %w", err)
	}
	return nil
}

// Codes returns extensions.code of every error, in order.
func (r *Response) Codes() []string {
	var out []string
	for _, e := range r.Errors {
		out = append(out, e.Code())
	}
	return out
}

// HasCode reports whether an error carries code.
func (r *Response) HasCode(code string) bool { return slices.Contains(r.Codes(), code) }

// OK fails the test unless the request succeeded without errors.
func (r *Response) OK(t testing.TB) *Response {
	t.Helper()
	if len(r.Errors) > 0 || r.Status != http.StatusOK {
		t.Fatalf("graphql: status %d: %s", r.Status, r.Raw)
	}
	return r
}

// Code returns extensions.code of the only error, failing the test unless
// there is exactly one.
func (r *Response) Code(t testing.TB) string {
	t.Helper()
	if len(r.Errors) != 1 {
		t.Fatalf("graphql: want exactly one error, got %s", r.Raw)
	}
	return r.Errors[0].Code()
}

// Into decodes data.field into v, failing the test on error.
func (r *Response) Into(t testing.TB, field string, v any) {
	t.Helper()
	raw, ok := r.Data[field]
	if !ok {
		t.Fatalf("graphql: no data.%s in %s", field, r.Raw)
	}
	if err := json.Unmarshal(raw, v); err != nil {
		t.Fatalf("graphql: data.%s: %v in %s", field, err, r.Raw)
	}
}

// Message is a message of the graphql-transport-ws protocol.
type Message struct {
	ID      string          `json:"id,omitempty"`
	Type    string          `json:"type"`
	Payload json.RawMessage `json:"payload,omitempty"`
}

// Subscribe runs one operation (a subscription, or a query over the
// websocket) at the GraphQL endpoint url in the graphql-transport-ws
// protocol: it sends connection_init with initPayload (e.g. Authorization
// and FlexPlane-VDC-ID), subscribes with query once acknowledged, answers
// pings, and returns the server's messages (keep-alives left out) until
// it completes the operation or sends an error. When the server closes
// the connection first, the messages so far come with the error that
// closed it (a *websocket.CloseError for a close frame).
func Subscribe(ctx context.Context, url string, initPayload map[string]any, query string) ([]Message, error) {
	conn, _, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(url, "http"), &websocket.DialOptions{Subprotocols: []string{"graphql-transport-ws"}})
	if err != nil {
		return nil, fmt.Errorf("graphql: websocket: %w", err)
	}
	defer conn.CloseNow()
	send := func(m Message) error {
		b, err := json.Marshal(m)
		if err != nil {
			return err
		}
		return conn.Write(ctx, websocket.MessageText, b)
	}
	payload := func(v any) json.RawMessage { b, _ := json.Marshal(v); return b }
	if err := send(Message{Type: "connection_init", Payload: payload(initPayload)}); err != nil {
		return nil, fmt.Errorf("graphql: websocket: %w", err)
	}
	var got []Message
	sent := false
	for {
		_, data, err := conn.Read(ctx)
		if err != nil {
			return got, err
		}
		var m Message
		if err := json.Unmarshal(data, &m); err != nil {
			return got, fmt.Errorf("graphql: websocket message %q: %w", data, err)
		}
		switch m.Type {
		case "ping":
			if err := send(Message{Type: "pong"}); err != nil {
				return got, err
			}
			continue
		case "ka", "pong":
			continue
		}
		got = append(got, m)
		switch {
		case m.Type == "connection_ack" && !sent:
			sent = true
			if err := send(Message{ID: "1", Type: "subscribe", Payload: payload(map[string]any{"query": query})}); err != nil {
				return got, err
			}
		case m.Type == "complete" || m.Type == "connection_error" || m.Type == "error":
			return got, nil
		}
	}
}
