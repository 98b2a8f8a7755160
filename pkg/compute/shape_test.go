package compute

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// serviceMethodBudget is the most methods *Service may declare: its public
// API (the entry points that start operations and the read queries).
// An operation's logic is on its scope, in its own file; a new operation
// adds an entry point and phases, not helpers on the Service.
const serviceMethodBudget = 40

// TestServiceShape keeps the package's shape (package doc, "Engine and
// phases"): the Service is a thin public front, and each operation is a
// phase list over a scope of its own, in the scope's file.
//
//   - *Service declares at most serviceMethodBudget methods, all exported:
//     no phase body or operation helper is a Service method;
//   - Service embeds nothing (no promoted methods widen it unseen);
//   - every phase list (a function returning []phase[S]) is a plain
//     function, not a method, declared in the file that declares S, and
//     names no Service (its phases are methods of S).
func TestServiceShape(t *testing.T) {
	t.Parallel()
	fset := token.NewFileSet()
	names, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	typeFile := map[string]string{} // type name -> file declaring it
	type list struct{ fn, file, scope, recv string }
	var lists []list
	var methods []string
	for _, name := range names {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		src, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		f, err := parser.ParseFile(fset, name, src, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range f.Decls {
			switch d := d.(type) {
			case *ast.GenDecl:
				for _, sp := range d.Specs {
					ts, ok := sp.(*ast.TypeSpec)
					if !ok {
						continue
					}
					typeFile[ts.Name.Name] = name
					if st, ok := ts.Type.(*ast.StructType); ok && ts.Name.Name == "Service" {
						for _, fld := range st.Fields.List {
							if len(fld.Names) == 0 {
								t.Errorf("%s: Service embeds %s: its promoted methods widen the Service; name the field", name, exprString(fld.Type))
							}
						}
					}
				}
			case *ast.FuncDecl:
				recv := recvType(d)
				if recv == "Service" {
					methods = append(methods, name+": "+d.Name.Name)
					if !d.Name.IsExported() {
						t.Errorf("%s: (*Service).%s is not the public API: put it on the scope of the operation it serves (or the finder, the engine)", name, d.Name.Name)
					}
				}
				if s, ok := phaseListScope(d); ok {
					lists = append(lists, list{fn: d.Name.Name, file: name, scope: s, recv: recv})
					if d.Body != nil && mentions(d.Body, "Service") {
						t.Errorf("%s: phase list %s names the Service: its phases are methods of %s", name, d.Name.Name, s)
					}
				}
			}
		}
	}
	if len(methods) > serviceMethodBudget {
		t.Errorf("*Service declares %d methods, more than its budget of %d:\n\t%s", len(methods), serviceMethodBudget, strings.Join(methods, "\n\t"))
	}
	if len(lists) == 0 {
		t.Fatal("no phase list found")
	}
	for _, l := range lists {
		if l.recv != "" {
			t.Errorf("%s: phase list %s is a method of %s; make it a function of the scope's file", l.file, l.fn, l.recv)
		}
		if f := typeFile[l.scope]; f != l.file {
			t.Errorf("%s: phase list %s is over %s, declared in %s: an operation's phases and scope share its file", l.file, l.fn, l.scope, f)
		}
	}
}

// recvType is the name of d's receiver type ("" for a function).
func recvType(d *ast.FuncDecl) string {
	if d.Recv == nil || len(d.Recv.List) == 0 {
		return ""
	}
	e := d.Recv.List[0].Type
	if st, ok := e.(*ast.StarExpr); ok {
		e = st.X
	}
	if id, ok := e.(*ast.Ident); ok {
		return id.Name
	}
	return exprString(e)
}

// phaseListScope reports whether d returns []phase[S] for a scope type S
// (not a type parameter: phase.go's helpers are generic), and S.
func phaseListScope(d *ast.FuncDecl) (string, bool) {
	if d.Type.TypeParams != nil || d.Type.Results == nil || len(d.Type.Results.List) != 1 {
		return "", false
	}
	arr, ok := d.Type.Results.List[0].Type.(*ast.ArrayType)
	if !ok || arr.Len != nil {
		return "", false
	}
	ix, ok := arr.Elt.(*ast.IndexExpr)
	if !ok {
		return "", false
	}
	if id, ok := ix.X.(*ast.Ident); !ok || id.Name != "phase" {
		return "", false
	}
	s, ok := ix.Index.(*ast.Ident)
	if !ok {
		return "", false
	}
	return s.Name, true
}

// mentions reports whether n names ident.
func mentions(n ast.Node, ident string) bool {
	found := false
	ast.Inspect(n, func(n ast.Node) bool {
		if id, ok := n.(*ast.Ident); ok && id.Name == ident {
			found = true
		}
		return !found
	})
	return found
}

func exprString(e ast.Expr) string {
	switch e := e.(type) {
	case *ast.Ident:
		return e.Name
	case *ast.StarExpr:
		return "*" + exprString(e.X)
	case *ast.SelectorExpr:
		return exprString(e.X) + "." + e.Sel.Name
	}
	return "?"
}

// TestShapeFindsPhaseLists: the rule above sees the phase lists it checks
// (a rule that sees none would pass whatever the code).
func TestShapeFindsPhaseLists(t *testing.T) {
	t.Parallel()
	f, err := parser.ParseFile(token.NewFileSet(), "x.go", `package x
func a() []phase[aScope] { return nil }
func (x *Service) b() []phase[bScope] { return nil }
func c() []int { return nil }
func d() []phase[dScope] { return []phase[dScope]{step("x", (*Service).x)} }`, 0)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, d := range f.Decls {
		if fd, ok := d.(*ast.FuncDecl); ok {
			if s, ok := phaseListScope(fd); ok {
				got = append(got, recvType(fd)+"/"+s+"/"+fmt.Sprint(mentions(fd.Body, "Service")))
			}
		}
	}
	if want := []string{"/aScope/false", "Service/bScope/false", "/dScope/true"}; !slices.Equal(got, want) {
		t.Fatalf("phase lists %v, want %v", got, want)
	}
}
