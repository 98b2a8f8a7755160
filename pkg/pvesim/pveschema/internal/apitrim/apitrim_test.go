package apitrim

import (
	"encoding/json"
	"strings"
	"testing"
)

// fullSchema builds an api-viewer tree holding every path of Paths (as nested children,
// like Proxmox's) plus one path flexplane does not use.
func fullSchema(t *testing.T, skip string) []byte {
	t.Helper()
	type node struct {
		Path     string         `json:"path"`
		Info     map[string]any `json:"info,omitempty"`
		Children []*node        `json:"children,omitempty"`
	}
	root := &node{Path: "/", Children: nil}
	byPath := map[string]*node{"": root}
	var ensure func(p string) *node
	ensure = func(p string) *node {
		if n, ok := byPath[p]; ok {
			return n
		}
		parent := ensure(p[:strings.LastIndex(p, "/")])
		n := &node{Path: p}
		parent.Children = append(parent.Children, n)
		byPath[p] = n
		return n
	}
	for _, entry := range append(append([]string{}, Paths...), "/access/roles") {
		p, _ := splitEntry(entry)
		if p == skip {
			continue
		}
		ensure(p).Info = map[string]any{
			"GET":  json.RawMessage(`{"zeta": 1, "name": "get", "alpha": 1.50}`),
			"POST": json.RawMessage(`{"name": "post"}`),
		}
	}
	b, err := json.Marshal(root.Children)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestTrim(t *testing.T) {
	t.Parallel()
	out, err := Trim(fullSchema(t, ""))
	if err != nil {
		t.Fatal(err)
	}
	var doc Document
	if err := json.Unmarshal(out, &doc); err != nil {
		t.Fatal(err)
	}
	if len(doc.Endpoints) != len(Paths) {
		t.Fatalf("%d endpoints, want %d", len(doc.Endpoints), len(Paths))
	}
	for i := 1; i < len(doc.Endpoints); i++ {
		if doc.Endpoints[i-1].Path >= doc.Endpoints[i].Path {
			t.Fatalf("endpoints not sorted: %s before %s", doc.Endpoints[i-1].Path, doc.Endpoints[i].Path)
		}
	}
	if strings.Contains(string(out), "/access/roles") {
		t.Fatal("unused path kept")
	}
	// An entry naming its methods keeps only those; a bare path keeps every method.
	named := map[string]bool{}
	for _, entry := range Paths {
		p, methods := splitEntry(entry)
		named[p] = methods != nil
	}
	if !named["/access/users"] {
		t.Fatal("no entry names its methods")
	}
	for _, e := range doc.Endpoints {
		_, post := e.Info["POST"]
		if post == named[e.Path] || len(e.Info) == 0 {
			t.Fatalf("%s kept methods %v", e.Path, e.Info)
		}
	}
	if !strings.Contains(string(out), `"alpha": 1.50`) || strings.Index(string(out), `"alpha"`) > strings.Index(string(out), `"zeta"`) {
		t.Fatal("numbers not kept verbatim or keys not sorted")
	}
	again, err := Trim(fullSchema(t, ""))
	if err != nil || string(again) != string(out) {
		t.Fatalf("output not deterministic (%v)", err)
	}
}

func TestTrimMissingPath(t *testing.T) {
	t.Parallel()
	_, err := Trim(fullSchema(t, "/cluster/nextid"))
	if err == nil || !strings.Contains(err.Error(), "/cluster/nextid") {
		t.Fatalf("err = %v, want the missing path named", err)
	}
	if _, err := Trim([]byte("{")); err == nil {
		t.Fatal("malformed schema accepted")
	}
}
