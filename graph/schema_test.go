package graph

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/vektah/gqlparser/v2"
	"github.com/vektah/gqlparser/v2/ast"
	"github.com/vektah/gqlparser/v2/formatter"

	"github.com/flexplane/flexplane/graph/generated"
)

// public are the root fields any signed-in caller may use without a VDC
// scope or the platform admin role (rule 4 of the layout, docs/develop/layout.md). Each
// answers only what the caller may see (e.g. vdcs lists the caller's VDCs).
var public = []string{
	"Query.me", "Query.tenant",
	"Query.vdcs", "Query.vdc",
	"Query.images", "Query.image",
	"Query.computeProfiles", "Query.computeProfile",
	"Query.storageProfiles", "Query.storageProfile",
	"Query.zones", "Query.zonesConnection", "Query.zone", "Query.regions",
	// node(id:) answers each kind of object in the scope its own field
	// declares (VMs, networks and operations of the VDC header, hosts for
	// platform admins), checked by TestInventory/reads/node.
	"Query.node",
	// Any signed-in user, for the keys of their own token subject only,
	// checked by TestSSHKeysPerUser.
	"Mutation.addSSHKey", "Mutation.deleteSSHKey",
}

// loadSchema parses graph/*.graphqls as gqlgen does (extensions merged).
func loadSchema(t *testing.T) *ast.Schema {
	t.Helper()
	files, err := filepath.Glob("*.graphqls")
	if err != nil || len(files) == 0 {
		t.Fatalf("no schema files: %v", err)
	}
	var srcs []*ast.Source
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		srcs = append(srcs, &ast.Source{Name: f, Input: string(b)})
	}
	s, err := gqlparser.LoadSchema(srcs...)
	if err != nil {
		t.Fatalf("schema: %v", err)
	}
	return s
}

// TestRootFieldsDeclareAccess: every Query, Mutation and Subscription
// field carries @vdc or @platformAdmin, or is on the public list; the
// list names only fields that exist and carry neither.
func TestRootFieldsDeclareAccess(t *testing.T) {
	t.Parallel()
	s := loadSchema(t)
	seen := map[string]bool{}
	n := 0
	for _, root := range []*ast.Definition{s.Query, s.Mutation, s.Subscription} {
		if root == nil {
			t.Fatal("the schema lacks a root type")
		}
		for _, f := range root.Fields {
			if f.Position == nil || f.Position.Src.BuiltIn { // __schema, __type
				continue
			}
			name := root.Name + "." + f.Name
			n++
			guarded := f.Directives.ForName("vdc") != nil || f.Directives.ForName("platformAdmin") != nil
			isPublic := slices.Contains(public, name)
			seen[name] = true
			switch {
			case guarded && isPublic:
				t.Errorf("%s (%s) carries a directive and is on the public list: drop it from the list", name, f.Position.Src.Name)
			case !guarded && !isPublic:
				t.Errorf("%s (%s) carries neither @vdc nor @platformAdmin and is not on the public list", name, f.Position.Src.Name)
			}
		}
	}
	for _, p := range public {
		if !seen[p] {
			t.Errorf("the public list names %s, which the schema does not have", p)
		}
	}
	if n < 30 {
		t.Fatalf("only %d root fields found; the schema was not read", n)
	}
}

// TestRootTypesInSchemaFile: Query, Mutation and Subscription are declared
// in schema.graphqls and only extended by the domain files, so gqlgen
// (follow-schema layout) generates the root types' code there, not in one
// domain's file.
func TestRootTypesInSchemaFile(t *testing.T) {
	t.Parallel()
	s := loadSchema(t)
	for _, root := range []*ast.Definition{s.Query, s.Mutation, s.Subscription} {
		if root == nil || root.Position == nil {
			t.Fatal("the schema lacks a root type")
		}
		if got := root.Position.Src.Name; got != "schema.graphqls" {
			t.Errorf("type %s is declared in %s, want schema.graphqls (domain files extend it)", root.Name, got)
		}
	}
}

// TestServedSchemaIsTheSDLFile: the schema the server executes (gqlgen's,
// as introspection shows it) is exactly the published SDL file
// graph/flexplane.graphql that clients generate code from, so a change of
// the Go side cannot change what is served without that file's diff
// showing it (`make check-generated` keeps the file equal to the
// *.graphqls sources).
func TestServedSchemaIsTheSDLFile(t *testing.T) {
	t.Parallel()
	served := generated.NewExecutableSchema(generated.Config{Resolvers: &Resolver{}}).Schema()
	b, err := os.ReadFile("flexplane.graphql")
	if err != nil {
		t.Fatal(err)
	}
	published, err := gqlparser.LoadSchema(&ast.Source{Name: "flexplane.graphql", Input: string(b)})
	if err != nil {
		t.Fatalf("flexplane.graphql: %v", err)
	}
	format := func(s *ast.Schema) string {
		var buf bytes.Buffer
		formatter.NewFormatter(&buf).FormatSchema(s)
		return buf.String()
	}
	got, want := format(served), format(published)
	if got == want {
		return
	}
	gl, wl := strings.Split(got, "\n"), strings.Split(want, "\n")
	for i := range min(len(gl), len(wl)) {
		if gl[i] != wl[i] {
			t.Fatalf("the served schema differs from flexplane.graphql at line %d:\nserved:    %s\npublished: %s\n(run make generate)", i+1, gl[i], wl[i])
		}
	}
	t.Fatalf("the served schema has %d lines, flexplane.graphql %d (run make generate)", len(gl), len(wl))
}
