package server

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"slices"
	"time"

	"github.com/99designs/gqlgen/graphql"
	"github.com/vektah/gqlparser/v2/ast"
	"go.opentelemetry.io/otel/trace"

	"github.com/flexplane/flexplane/graph"
	"github.com/flexplane/flexplane/pkg/audit"
	"github.com/flexplane/flexplane/pkg/auth"
)

// SecretDirective marks the input fields and arguments whose values audit
// events redact.
const SecretDirective = "secret"

// auditor is the HandlerExtension emitting one audit event per mutation
// field: a mutation that refuses (NOT_FOUND for a non-admin, bad input)
// emits one too, with the error's code.
type auditor struct {
	sink   audit.Sink
	schema *ast.Schema // set by Validate
}

var _ interface {
	graphql.HandlerExtension
	graphql.RootFieldInterceptor
	graphql.OperationParameterMutator
	graphql.OperationInterceptor
	graphql.ResponseInterceptor
} = (*auditor)(nil)

// newEvent is the event of mutation field verb of operation oc (nil when
// the request was refused before it had one), its outcome OK until told
// otherwise: who called, the VDC, when and the trace.
func newEvent(ctx context.Context, verb string, oc *graphql.OperationContext) audit.Event {
	ev := audit.Event{
		Kind:           "Event",
		APIVersion:     audit.APIVersion,
		AuditID:        newAuditID(),
		Stage:          audit.StageResponseComplete,
		Verb:           verb,
		StageTimestamp: time.Now().UTC(),
		ResponseStatus: audit.ResponseStatus{Code: "OK"},
	}
	ev.RequestReceivedTimestamp = ev.StageTimestamp
	if oc != nil {
		ev.OperationName = oc.OperationName
		if ev.OperationName == "" && oc.Operation != nil {
			ev.OperationName = oc.Operation.Name
		}
		if !oc.Stats.OperationStart.IsZero() {
			ev.RequestReceivedTimestamp = oc.Stats.OperationStart.UTC()
		}
	}
	if p, ok := auth.FromContext(ctx); ok {
		ev.User = audit.User{Subject: p.Subject, Name: p.Name, PlatformAdmin: p.PlatformAdmin}
		for vdc, role := range p.VDCRoles {
			ev.User.Roles = append(ev.User.Roles, vdc+":"+string(role))
		}
		slices.Sort(ev.User.Roles)
	}
	if s, ok := graph.VDCScopeFrom(ctx); ok && s.VDC != nil {
		ev.VDC = s.VDC.Name
	} else if name, ok := vdcNameFrom(ctx); ok {
		ev.VDC = name // refused before the VDC was resolved: the one asked for
	}
	if sc := trace.SpanContextFromContext(ctx); sc.HasTraceID() {
		ev.TraceID = sc.TraceID().String()
	}
	return ev
}

func (*auditor) ExtensionName() string { return "Audit" }

func (a *auditor) Validate(es graphql.ExecutableSchema) error {
	a.schema = es.Schema()
	return nil
}

func (a *auditor) InterceptRootField(ctx context.Context, next graphql.RootResolver) graphql.Marshaler {
	oc := graphql.GetOperationContext(ctx)
	rf := graphql.GetRootFieldContext(ctx)
	if oc == nil || oc.Operation == nil || oc.Operation.Operation != ast.Mutation || rf == nil || rf.Field.Field == nil ||
		rf.Field.Name == "__typename" {
		return next(ctx)
	}
	if st, ok := ctx.Value(opAuditKey{}).(*opAudit); ok {
		st.ran.Store(true)
	}
	tasks := &audit.Tasks{}
	res := next(audit.WithTasks(ctx, tasks))
	upids := tasks.Close()

	f := rf.Field
	ev := newEvent(ctx, f.Name, oc)
	ev.UPIDs = upids
	ids := a.describe(&ev, f.Field, oc.Variables)
	for _, e := range graphql.GetErrors(ctx) {
		if len(e.Path) > 0 && e.Path[0] == ast.PathName(f.Alias) {
			ev.ResponseStatus.Code, _ = e.Extensions["code"].(string)
			ev.ResponseStatus.Message = e.Message
			break
		}
	}
	if ev.ResponseStatus.Code == "OK" && res != nil {
		// The ids the answer carries (a created object's, an operation's),
		// as far as the client selected them.
		var buf bytes.Buffer
		res.MarshalGQL(&buf)
		var answer any
		if json.Unmarshal(buf.Bytes(), &answer) == nil {
			ids = collectIDs(ids, "", answer)
		}
	}
	ev.ObjectRef.IDs = ids
	a.sink.Emit(ev)
	return res
}

// describe fills ev's resource and request object from mutation field f
// (its arguments with vars, secrets redacted) and returns the ids its
// arguments name. A field without a definition (refused before
// validation) is described by its name only.
func (a *auditor) describe(ev *audit.Event, f *ast.Field, vars map[string]any) []string {
	if f.Definition == nil {
		return nil
	}
	var ids []string
	ev.ObjectRef.Resource = f.Definition.Type.Name()
	args := f.ArgumentMap(vars)
	ev.RequestObject = map[string]any{}
	for _, def := range f.Definition.Arguments {
		v, ok := args[def.Name]
		if !ok {
			continue
		}
		if def.Directives.ForName(SecretDirective) != nil {
			ev.RequestObject[def.Name] = audit.Redacted
			continue
		}
		ev.RequestObject[def.Name] = a.redact(v, def.Type)
		// Values of type ID of any name (vm: of createSnapshot, input.vm
		// of attachDisk), then those named as ids.
		ids = a.typedIDs(ids, v, def.Type)
		ids = collectIDs(ids, def.Name, ev.RequestObject[def.Name])
	}
	return ids
}

// typedIDs appends to ids the values of type ID in v (an argument's value
// of type t), at any depth of its input objects and lists but in their
// @secret fields, once each.
func (a *auditor) typedIDs(ids []string, v any, t *ast.Type) []string {
	if v == nil {
		return ids
	}
	if t.Elem != nil {
		list, _ := v.([]any)
		for _, e := range list {
			ids = a.typedIDs(ids, e, t.Elem)
		}
		return ids
	}
	if id, ok := v.(string); ok {
		if t.NamedType == "ID" && id != "" && !slices.Contains(ids, id) {
			ids = append(ids, id)
		}
		return ids
	}
	obj, ok := v.(map[string]any)
	if !ok || a.schema == nil {
		return ids
	}
	def := a.schema.Types[t.NamedType]
	if def == nil || def.Kind != ast.InputObject {
		return ids
	}
	for _, fd := range def.Fields {
		if fv, ok := obj[fd.Name]; ok && fd.Directives.ForName(SecretDirective) == nil {
			ids = a.typedIDs(ids, fv, fd.Type)
		}
	}
	return ids
}

// redact returns v (an argument's value of type t) with the values of the
// input fields marked @secret replaced by audit.Redacted.
func (a *auditor) redact(v any, t *ast.Type) any {
	if v == nil || a.schema == nil {
		return v
	}
	if t.Elem != nil {
		list, ok := v.([]any)
		if !ok {
			return v
		}
		out := make([]any, len(list))
		for i, e := range list {
			out[i] = a.redact(e, t.Elem)
		}
		return out
	}
	def := a.schema.Types[t.NamedType]
	obj, ok := v.(map[string]any)
	if def == nil || def.Kind != ast.InputObject || !ok {
		return v
	}
	out := make(map[string]any, len(obj))
	for k, fv := range obj {
		fd := def.Fields.ForName(k)
		switch {
		case fd == nil:
			out[k] = fv
		case fd.Directives.ForName(SecretDirective) != nil:
			out[k] = audit.Redacted
		default:
			out[k] = a.redact(fv, fd.Type)
		}
	}
	return out
}

// collectIDs appends to ids the string values of v named id, name or
// ending in Id/ID (at any depth), once each.
func collectIDs(ids []string, key string, v any) []string {
	switch v := v.(type) {
	case map[string]any:
		keys := make([]string, 0, len(v))
		for k := range v {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for _, k := range keys {
			ids = collectIDs(ids, k, v[k])
		}
	case []any:
		for _, e := range v {
			ids = collectIDs(ids, key, e)
		}
	case string:
		if idKey(key) && v != "" && v != audit.Redacted && !slices.Contains(ids, v) {
			ids = append(ids, v)
		}
	}
	return ids
}

func idKey(k string) bool {
	n := len(k)
	return k == "id" || k == "name" || n > 2 && (k[n-2:] == "Id" || k[n-2:] == "ID")
}

func newAuditID() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
