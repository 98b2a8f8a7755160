package deptest_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestOneGraphQLClient: GraphQL requests and websocket operations are
// sent by pkg/dev/gqltest alone; tests and tools use it rather than a
// client of their own. It looks for what every hand-made client writes:
// a map literal with a "query" key (the request body), the
// "graphql-transport-ws" subprotocol, and websocket.Dial.
func TestOneGraphQLClient(t *testing.T) {
	t.Parallel()
	root, err := filepath.Abs(filepath.Join("..", "..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	// The client's home, this package (whose test names what it looks
	// for), and the home of the console's websocket client, which carries
	// RFB, not GraphQL.
	skip := map[string]bool{"pkg/dev/gqltest": true, "pkg/dev/deptest": true, "pkg/support/rfb": true}
	fset := token.NewFileSet()
	files := 0
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		if d.IsDir() {
			if name := d.Name(); rel != "." && (strings.HasPrefix(name, ".") || name == "node_modules" || name == "testdata" || skip[rel]) {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") {
			return nil
		}
		files++
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		ast.Inspect(f, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.CompositeLit:
				if _, isMap := n.Type.(*ast.MapType); !isMap {
					return true
				}
				for _, e := range n.Elts {
					if kv, ok := e.(*ast.KeyValueExpr); ok && isString(kv.Key, "query") {
						t.Errorf("%s: a GraphQL request body built by hand; use gqltest.Post", fset.Position(kv.Pos()))
					}
				}
			case *ast.BasicLit:
				if isString(n, "graphql-transport-ws") {
					t.Errorf("%s: a graphql-transport-ws client of its own; use gqltest.Subscribe", fset.Position(n.Pos()))
				}
			case *ast.SelectorExpr:
				if x, ok := n.X.(*ast.Ident); ok && x.Name == "websocket" && n.Sel.Name == "Dial" {
					t.Errorf("%s: a websocket dialled by hand; use gqltest.Subscribe", fset.Position(n.Pos()))
				}
			}
			return true
		})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if files < 100 {
		t.Fatalf("only %d Go files read", files)
	}
}

func isString(e ast.Expr, s string) bool {
	lit, ok := e.(*ast.BasicLit)
	if !ok || lit.Kind != token.STRING {
		return false
	}
	v, err := strconv.Unquote(lit.Value)
	return err == nil && v == s
}
