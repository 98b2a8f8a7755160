package gqltest_test

import (
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/flexplane/flexplane/graph"
	"github.com/flexplane/flexplane/pkg/dev/gqltest"
)

func TestVDCHeaderIsGraphs(t *testing.T) {
	if gqltest.VDCHeader != graph.VDCHeader {
		t.Fatalf("gqltest.VDCHeader %q, graph.VDCHeader %q", gqltest.VDCHeader, graph.VDCHeader)
	}
}

// TestPost: the request carries the query, variables and headers; an
// answer with errors is a *ResponseError after its data is decoded; a
// body that is no JSON is an error.
func TestPost(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var body struct {
			Query     string
			Variables map[string]any
		}
		_ = json.NewDecoder(r.Body).Decode(&body)
		switch body.Query {
		case "text":
			w.Header().Set("Content-Type", "text/plain")
			_, _ = w.Write([]byte("no"))
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]any{
			"data":   map[string]any{"echo": map[string]any{"auth": r.Header.Get("Authorization"), "vdc": r.Header.Get(gqltest.VDCHeader), "x": body.Variables["x"]}},
			"errors": []any{map[string]any{"message": "nope", "extensions": map[string]any{"code": "NOT_FOUND"}}},
		})
	}))
	t.Cleanup(srv.Close)
	r, err := gqltest.Post(t.Context(), nil, srv.URL, gqltest.Request{Query: "q", Variables: map[string]any{"x": "y"}, Authorization: "Bearer t", VDC: "blue"})
	if err != nil {
		t.Fatal(err)
	}
	var out struct{ Echo struct{ Auth, VDC, X string } }
	if err := r.Decode(&out); err != nil || out.Echo.Auth != "Bearer t" || out.Echo.VDC != "blue" || out.Echo.X != "y" {
		t.Errorf("decoded %+v, %v", out, err)
	}
	var re *gqltest.ResponseError
	if err := r.Err(); !errors.As(err, &re) || !re.HasCode("NOT_FOUND") || r.Code(t) != "NOT_FOUND" {
		t.Errorf("Err() = %v", err)
	}
	if _, err := gqltest.Post(t.Context(), nil, srv.URL, gqltest.Request{Query: "text"}); err == nil {
		t.Error("a text/plain answer is no error")
	}
}
