package deptest_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// ownLoop is the comment that marks a test's loop that sleeps on purpose,
// on the line above the loop, with why: a loop that must sample at a fixed
// fine interval to catch a short window, or one that paces load. Waiting
// for a condition is not a reason.
const ownLoop = "poll:own-loop"

// TestTestsWaitWithPoll: no test or test harness writes its own polling
// loop (a for loop that sleeps): it waits for a condition with pkg/dev/poll,
// which checks at a growing interval and fails with what it waited for,
// or with testing/synctest where it waits on timers it owns. A loop that
// must keep its own pace says why in a "poll:own-loop" comment above it.
func TestTestsWaitWithPoll(t *testing.T) {
	t.Parallel()
	root := filepath.Join("..", "..", "..")
	var found int
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			switch d.Name() {
			case "node_modules", ".git", ".dev", "testdata", ".output", ".nuxt":
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") {
			return nil
		}
		rel, _ := filepath.Rel(root, path)
		rel = filepath.ToSlash(rel)
		// poll is where the one loop lives; the harness packages of
		// pkg/dev are test code even outside _test.go files.
		if strings.HasPrefix(rel, "pkg/dev/poll/") || !strings.HasSuffix(rel, "_test.go") && !strings.HasPrefix(rel, "pkg/dev/") {
			return nil
		}
		found++
		for _, l := range sleepingLoops(t, path) {
			t.Errorf("%s:%d: a loop that sleeps: wait for the condition with pkg/dev/poll (Until, True, Context), "+
				"or on synctest's clock; a loop that must keep its own pace says why in a %q comment above it", rel, l, ownLoop)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if found < 100 {
		t.Fatalf("checked %d test files: the walk is not finding the module's tests", found)
	}
}

// sleepingLoops is the lines of the for loops in the Go file at path
// whose body calls time.Sleep, but for those marked with ownLoop.
func sleepingLoops(t *testing.T, path string) []int {
	t.Helper()
	src, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, path, src, parser.ParseComments)
	if err != nil {
		t.Fatal(err)
	}
	timePkg := ""
	for _, imp := range f.Imports {
		if p, _ := strconv.Unquote(imp.Path.Value); p == "time" {
			timePkg = "time"
			if imp.Name != nil {
				timePkg = imp.Name.Name
			}
		}
	}
	if timePkg == "" {
		return nil
	}
	marked := map[int]bool{}
	for _, cg := range f.Comments {
		for _, c := range cg.List {
			if strings.Contains(c.Text, ownLoop) {
				marked[fset.Position(cg.End()).Line+1] = true
			}
		}
	}
	var lines []int
	ast.Inspect(f, func(n ast.Node) bool {
		var body *ast.BlockStmt
		var post ast.Stmt
		switch l := n.(type) {
		case *ast.ForStmt:
			body, post = l.Body, l.Post
		case *ast.RangeStmt:
			body = l.Body
		default:
			return true
		}
		line := fset.Position(n.Pos()).Line
		if marked[line] {
			return true
		}
		if sleeps(body, timePkg) || post != nil && sleeps(post, timePkg) {
			lines = append(lines, line)
			return false
		}
		return true
	})
	return lines
}

// sleeps reports whether n calls pkg.Sleep outside a function literal (a
// goroutine started in a loop keeps its own pace) and outside a nested
// loop (which is judged on its own).
func sleeps(n ast.Node, pkg string) bool {
	found := false
	ast.Inspect(n, func(m ast.Node) bool {
		switch c := m.(type) {
		case *ast.FuncLit, *ast.ForStmt, *ast.RangeStmt:
			return m == n
		case *ast.CallExpr:
			if sel, ok := c.Fun.(*ast.SelectorExpr); ok && sel.Sel.Name == "Sleep" {
				if id, ok := sel.X.(*ast.Ident); ok && id.Name == pkg {
					found = true
				}
			}
		}
		return !found
	})
	return found
}
