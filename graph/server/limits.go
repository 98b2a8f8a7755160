package server

import (
	"context"
	"strings"

	"github.com/99designs/gqlgen/graphql"
	"github.com/vektah/gqlparser/v2/ast"
	"github.com/vektah/gqlparser/v2/gqlerror"
	"github.com/vektah/gqlparser/v2/validator/core"
	"github.com/vektah/gqlparser/v2/validator/rules"
)

// The limits below bound what one request can make the server do. In the
// order they act: the document's size (queryLimit) and its tokens (the
// parser's limit) before anything grows with it; during validation the
// fields of one response name in a selection set, whose pairs the
// overlapping-fields rule compares (sameNameLimit), and the number of
// errors (cappedRules); after it the depth, the introspection fields
// (depthLimit) and the complexity (gqlgen's FixedComplexityLimit).

// queryLimit refuses documents longer than maxBytes before they are parsed.
type queryLimit struct{ maxBytes int }

var _ interface {
	graphql.HandlerExtension
	graphql.OperationParameterMutator
} = queryLimit{}

func (queryLimit) ExtensionName() string                   { return "QueryLimit" }
func (queryLimit) Validate(graphql.ExecutableSchema) error { return nil }

func (q queryLimit) MutateOperationParameters(_ context.Context, p *graphql.RawParams) *gqlerror.Error {
	if len(p.Query) > q.maxBytes {
		err := gqlerror.Errorf("query has %d bytes, which exceeds the limit of %d", len(p.Query), q.maxBytes)
		err.Extensions = map[string]any{"code": "QUERY_TOO_LARGE"}
		return err
	}
	return nil
}

// cappedRules returns gqlparser's default validation rules reporting at
// most maxErrors errors between them: the rest of the walk still runs (on
// a document the token limit bounds), but no further error is built. The
// error after the last one kept says so. The overlapping-fields rule, whose
// work grows with the square of the fields of one response name in a
// selection set, runs only on a document with at most maxSameName such
// fields per selection set; another document gets one error instead.
func cappedRules(maxErrors, maxSameName int) *rules.Rules {
	rs := rules.NewDefaultRules()
	n := 0 // errors seen in this validation; one Walk runs the rules in turn
	for name, fn := range rs.GetInner() {
		if name == rules.OverlappingFieldsCanBeMergedRule.Name {
			fn = sameNameLimit(fn, maxSameName)
		}
		rs.ReplaceRule(name, func(obs *core.Events, addError core.AddErrFunc) {
			fn(obs, func(opts ...core.ErrorOption) {
				n++
				switch {
				case n <= maxErrors:
					addError(opts...)
				case n == maxErrors+1:
					addError(core.Message("too many validation errors: only the first %d are reported", maxErrors))
				}
			})
		})
	}
	return rs
}

// sameNameLimit wraps the overlapping-fields rule: the rule gets its own
// walk of the document, run when the document's first operation is
// walked, and only when no selection set (with the fragments it spreads)
// holds more than max fields of one response name.
func sameNameLimit(overlap core.RuleFunc, max int) core.RuleFunc {
	return func(obs *core.Events, addError core.AddErrFunc) {
		inner := &core.Events{}
		overlap(inner, addError)
		done := false
		obs.OnOperation(func(w *core.Walker, _ *ast.OperationDefinition) {
			if done {
				return
			}
			done = true
			c := sameNameCounter{doc: w.Document, max: max, fragments: map[string]map[string]int{}}
			if name, pos, ok := c.exceeded(); ok {
				addError(core.Message("selection set has more than %d fields named %q", max, name), core.At(pos))
				return
			}
			core.Walk(w.Schema, w.Document, inner)
		})
	}
}

// sameNameCounter finds a selection set that collects more than max fields
// of one response name (its own, its inline fragments' and those of the
// fragments it spreads).
type sameNameCounter struct {
	doc       *ast.QueryDocument
	max       int
	fragments map[string]map[string]int // collected counts by fragment; nil while being computed
}

func (c *sameNameCounter) exceeded() (string, *ast.Position, bool) {
	var found string
	var at *ast.Position
	var visit func(set ast.SelectionSet) bool
	visit = func(set ast.SelectionSet) bool {
		if set == nil {
			return false
		}
		for name, n := range c.collect(set) {
			if n > c.max {
				found, at = name, set[0].GetPosition()
				return true
			}
		}
		for _, sel := range set {
			switch s := sel.(type) {
			case *ast.Field:
				if visit(s.SelectionSet) {
					return true
				}
			case *ast.InlineFragment:
				if visit(s.SelectionSet) {
					return true
				}
			}
		}
		return false
	}
	for _, op := range c.doc.Operations {
		if visit(op.SelectionSet) {
			return found, at, true
		}
	}
	for _, f := range c.doc.Fragments {
		if visit(f.SelectionSet) {
			return found, at, true
		}
	}
	return "", nil, false
}

// collect counts the fields by response name that set collects.
func (c *sameNameCounter) collect(set ast.SelectionSet) map[string]int {
	counts := map[string]int{}
	c.add(counts, set)
	return counts
}

func (c *sameNameCounter) add(counts map[string]int, set ast.SelectionSet) {
	for _, sel := range set {
		switch s := sel.(type) {
		case *ast.Field:
			name := s.Alias
			if name == "" {
				name = s.Name
			}
			counts[name]++
		case *ast.InlineFragment:
			c.add(counts, s.SelectionSet)
		case *ast.FragmentSpread:
			for name, n := range c.fragment(s.Name) {
				counts[name] += n
			}
		}
	}
}

// fragment returns the collected counts of the named fragment, computed
// once; a fragment spreading itself (which validation refuses) adds
// nothing the second time.
func (c *sameNameCounter) fragment(name string) map[string]int {
	if counts, seen := c.fragments[name]; seen {
		return counts
	}
	c.fragments[name] = nil
	def := c.doc.Fragments.ForName(name)
	if def == nil {
		return nil
	}
	counts := c.collect(def.SelectionSet)
	c.fragments[name] = counts
	return counts
}

// depthLimit refuses operations nested deeper than max fields or holding
// more than maxIntrospection __schema and __type fields.
type depthLimit struct{ max, maxIntrospection int }

var _ interface {
	graphql.HandlerExtension
	graphql.OperationContextMutator
} = depthLimit{}

func (depthLimit) ExtensionName() string                   { return "DepthLimit" }
func (depthLimit) Validate(graphql.ExecutableSchema) error { return nil }

func (d depthLimit) MutateOperationContext(_ context.Context, oc *graphql.OperationContext) *gqlerror.Error {
	if oc.Operation == nil {
		return nil
	}
	if depth := selectionDepth(oc.Operation.SelectionSet, map[string]bool{}); depth > d.max {
		err := gqlerror.Errorf("operation has depth %d, which exceeds the limit of %d", depth, d.max)
		err.Extensions = map[string]any{"code": "DEPTH_LIMIT_EXCEEDED"}
		return err
	}
	if n := introspectionFields(oc.Operation.SelectionSet, map[string]bool{}); n > d.maxIntrospection {
		err := gqlerror.Errorf("operation has %d __schema and __type fields, which exceeds the limit of %d", n, d.maxIntrospection)
		err.Extensions = map[string]any{"code": "INTROSPECTION_LIMIT_EXCEEDED"}
		return err
	}
	return nil
}

// introspectionFields counts the __schema and __type fields under set,
// through fragments (each spread counts again, as it is answered again).
func introspectionFields(set ast.SelectionSet, onPath map[string]bool) int {
	n := 0
	for _, sel := range set {
		switch s := sel.(type) {
		case *ast.Field:
			if s.Name == "__schema" || s.Name == "__type" {
				n++
			}
		case *ast.InlineFragment:
			n += introspectionFields(s.SelectionSet, onPath)
		case *ast.FragmentSpread:
			if s.Definition == nil || onPath[s.Name] {
				continue
			}
			onPath[s.Name] = true
			n += introspectionFields(s.Definition.SelectionSet, onPath)
			delete(onPath, s.Name)
		}
	}
	return n
}

// selectionDepth is the deepest chain of fields under set. Introspection
// fields are bounded by the schema and not counted; fragments on the
// current path are not entered twice (validation forbids cycles anyway).
func selectionDepth(set ast.SelectionSet, onPath map[string]bool) int {
	deepest := 0
	for _, sel := range set {
		d := 0
		switch s := sel.(type) {
		case *ast.Field:
			if strings.HasPrefix(s.Name, "__") {
				continue
			}
			d = 1 + selectionDepth(s.SelectionSet, onPath)
		case *ast.InlineFragment:
			d = selectionDepth(s.SelectionSet, onPath)
		case *ast.FragmentSpread:
			if s.Definition == nil || onPath[s.Name] {
				continue
			}
			onPath[s.Name] = true
			d = selectionDepth(s.Definition.SelectionSet, onPath)
			delete(onPath, s.Name)
		}
		deepest = max(deepest, d)
	}
	return deepest
}
