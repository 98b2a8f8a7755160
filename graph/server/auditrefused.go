package server

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"sync/atomic"

	"github.com/99designs/gqlgen/graphql"
	"github.com/vektah/gqlparser/v2/ast"
	"github.com/vektah/gqlparser/v2/gqlerror"
	"github.com/vektah/gqlparser/v2/lexer"
	"github.com/vektah/gqlparser/v2/parser"

	"github.com/flexplane/flexplane/pkg/audit"
)

// Mutations refused before any of their fields ran are audited too: a
// request that does not parse or validate (or exceeds a limit), one whose
// VDC the caller may not use, and one without a valid token. Each gets one
// event per mutation field the request names (its verb; "mutation" when
// the request is too broken to name them), with the refusal's code and
// message.

// unnamedVerb is the verb of a refused mutation whose fields cannot be read.
const unnamedVerb = "mutation"

// maxScan bounds how much of a request that does not parse is scanned for
// a mutation.
const maxScan = 64 << 10

type opAuditKey struct{}

// opAudit is what the auditor knows of one operation.
type opAudit struct {
	ran atomic.Bool // a mutation field ran (and was audited)
}

// MutateOperationParameters keeps the request's query on the operation
// context before any limit refuses it, so that a refused mutation can be
// named. The auditor is used before the limits, so it runs first.
func (a *auditor) MutateOperationParameters(ctx context.Context, params *graphql.RawParams) *gqlerror.Error {
	if oc := graphql.GetOperationContext(ctx); oc != nil {
		oc.RawQuery, oc.OperationName = params.Query, params.OperationName
	}
	return nil
}

// InterceptOperation audits a mutation an inner interceptor refused
// (a VDC the caller may not use): no field of it ran.
func (a *auditor) InterceptOperation(ctx context.Context, next graphql.OperationHandler) graphql.ResponseHandler {
	st := &opAudit{}
	rh := next(context.WithValue(ctx, opAuditKey{}, st))
	oc := graphql.GetOperationContext(ctx)
	if oc == nil || oc.Operation == nil || oc.Operation.Operation != ast.Mutation {
		return rh
	}
	return func(rctx context.Context) *graphql.Response {
		resp := rh(rctx)
		if resp != nil && !st.ran.Load() {
			a.refusedFields(ctx, oc, resp.Errors)
		}
		return resp
	}
}

// InterceptResponse audits a mutation gqlgen refused before it had an
// operation to run (parse, validation, limits): such a response has no
// operation state of InterceptOperation.
func (a *auditor) InterceptResponse(ctx context.Context, next graphql.ResponseHandler) *graphql.Response {
	resp := next(ctx)
	if _, ok := ctx.Value(opAuditKey{}).(*opAudit); ok || resp == nil {
		return resp
	}
	oc := graphql.GetOperationContext(ctx)
	if oc == nil {
		return resp
	}
	if verbs, ok := refusedMutation(oc.RawQuery, oc.OperationName); ok {
		a.refused(ctx, oc, verbs, resp.Errors)
	}
	return resp
}

// refusedFields emits one event per mutation field of oc's operation, which
// parsed and validated (refused by the VDC's scope or a rate limit), with
// the first error of errs: each described with its arguments and the ids
// they name, as an event of a field that ran is.
func (a *auditor) refusedFields(ctx context.Context, oc *graphql.OperationContext, errs gqlerror.List) {
	fields := topFields(oc.Operation)
	if len(fields) == 0 {
		a.refused(ctx, oc, []string{unnamedVerb}, errs)
		return
	}
	for _, f := range fields {
		ev := newEvent(ctx, f.Name, oc)
		ev.ObjectRef.IDs = a.describe(&ev, f, oc.Variables)
		ev.ResponseStatus = refusal(errs)
		a.sink.Emit(ev)
	}
}

// refused emits one event per verb with the first error of errs.
func (a *auditor) refused(ctx context.Context, oc *graphql.OperationContext, verbs []string, errs gqlerror.List) {
	for _, verb := range verbs {
		ev := newEvent(ctx, verb, oc)
		ev.ResponseStatus = refusal(errs)
		a.sink.Emit(ev)
	}
}

func refusal(errs gqlerror.List) audit.ResponseStatus {
	if len(errs) == 0 {
		return audit.ResponseStatus{Code: "INTERNAL", Message: "refused"}
	}
	code, _ := errs[0].Extensions["code"].(string)
	return audit.ResponseStatus{Code: code, Message: errs[0].Message}
}

// mutationFields names the fields of mutation op ([unnamedVerb] when it
// selects none directly, e.g. only through fragments).
func mutationFields(op *ast.OperationDefinition) []string {
	var out []string
	for _, f := range topFields(op) {
		out = append(out, f.Name)
	}
	if len(out) == 0 {
		return []string{unnamedVerb}
	}
	return out
}

// topFields are the fields op selects directly, but __typename.
func topFields(op *ast.OperationDefinition) []*ast.Field {
	var out []*ast.Field
	for _, sel := range op.SelectionSet {
		if f, ok := sel.(*ast.Field); ok && f.Name != "__typename" {
			out = append(out, f)
		}
	}
	return out
}

// refusedMutation reports whether query (operation name, if any) asks for
// a mutation, and its fields: from the parsed document when it parses,
// else whether a top-level "mutation" keyword is in its first maxScan
// bytes.
func refusedMutation(query, name string) ([]string, bool) {
	if query == "" {
		return nil, false
	}
	if len(query) <= maxScan {
		if doc, err := parser.ParseQuery(&ast.Source{Input: query}); err == nil {
			var op *ast.OperationDefinition
			if name != "" {
				op = doc.Operations.ForName(name)
			} else if len(doc.Operations) == 1 {
				op = doc.Operations[0]
			}
			if op == nil {
				for _, o := range doc.Operations {
					if o.Operation == ast.Mutation {
						return []string{unnamedVerb}, true // which one ran is unknown
					}
				}
				return nil, false
			}
			if op.Operation != ast.Mutation {
				return nil, false
			}
			return mutationFields(op), true
		}
	}
	if len(query) > maxScan {
		query = query[:maxScan]
	}
	lx := lexer.New(&ast.Source{Input: query})
	depth := 0
	for {
		tok, err := lx.ReadToken()
		if err != nil || tok.Kind == lexer.EOF {
			return nil, false
		}
		switch {
		case tok.Kind == lexer.BraceL:
			depth++
		case tok.Kind == lexer.BraceR:
			depth--
		case depth == 0 && tok.Kind == lexer.Name && tok.Value == "mutation":
			return []string{unnamedVerb}, true
		}
	}
}

// auditUnauthenticated audits a mutation refused for its token: the
// request's body (a POST) or URL (a GET) names it.
func (h *apiHandler) auditUnauthenticated(r *http.Request, errs gqlerror.List) {
	if h.cfg.Audit == nil {
		return
	}
	var params struct {
		Query         string `json:"query"`
		OperationName string `json:"operationName"`
	}
	switch r.Method {
	case http.MethodGet:
		params.Query, params.OperationName = r.URL.Query().Get("query"), r.URL.Query().Get("operationName")
	case http.MethodPost:
		if !strings.Contains(r.Header.Get("Content-Type"), "json") {
			return
		}
		if json.NewDecoder(io.LimitReader(r.Body, h.cfg.MaxBodyBytes)).Decode(&params) != nil {
			return
		}
	default:
		return
	}
	verbs, ok := refusedMutation(params.Query, params.OperationName)
	if !ok {
		return
	}
	a := &auditor{sink: h.cfg.Audit}
	oc := &graphql.OperationContext{OperationName: params.OperationName}
	a.refused(r.Context(), oc, verbs, errs)
}
