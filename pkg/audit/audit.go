// Package audit records who changed what: one Event per GraphQL mutation
// (shaped after Kubernetes' audit.k8s.io/v1 Event, without depending on
// it), with the caller, the VDC, the objects, the outcome, the trace and
// the Proxmox tasks the mutation started, and its arguments with every
// secret redacted. Sinks write events as JSON lines (stdout or a file) and
// post them to a webhook in batches, retrying, from a bounded queue whose
// overflow is dropped and counted.
package audit

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"sync"
	"time"
)

// APIVersion is the apiVersion of every Event.
const APIVersion = "audit.flexplane.io/v1"

// Redacted replaces the value of every secret argument.
const Redacted = "[redacted]"

// Stage is where in a request's life an event was recorded.
type Stage string

// Stages.
const (
	// StageResponseComplete: the mutation was answered.
	StageResponseComplete Stage = "ResponseComplete"
)

// Event is one audited mutation.
type Event struct {
	// Kind is always "Event"; APIVersion is APIVersion.
	Kind       string `json:"kind"`
	APIVersion string `json:"apiVersion"`
	// AuditID is unique per event.
	AuditID string `json:"auditID"`
	Stage   Stage  `json:"stage"`
	// Verb is the mutation's field name (createVM, deleteNetwork, ...).
	Verb string `json:"verb"`
	// OperationName is the client's name of the GraphQL operation, if any.
	OperationName string `json:"operationName,omitempty"`
	// User is who called.
	User User `json:"user"`
	// VDC is the VDC the request was scoped to (its FlexPlane-VDC-ID
	// header), empty for platform-level mutations.
	VDC string `json:"vdc,omitempty"`
	// ObjectRef names what the mutation was about.
	ObjectRef ObjectRef `json:"objectRef"`
	// RequestObject is the mutation's arguments, secrets replaced by
	// Redacted.
	RequestObject map[string]any `json:"requestObject,omitempty"`
	// ResponseStatus is the outcome.
	ResponseStatus ResponseStatus `json:"responseStatus"`
	// RequestReceivedTimestamp is when the request arrived; StageTimestamp
	// when the mutation was answered.
	RequestReceivedTimestamp time.Time `json:"requestReceivedTimestamp"`
	StageTimestamp           time.Time `json:"stageTimestamp"`
	// TraceID is the OpenTelemetry trace of the request, if traced.
	TraceID string `json:"traceID,omitempty"`
	// UPIDs are the Proxmox tasks the mutation started while it ran (work a
	// mutation leaves running, such as a VM create, is an Operation whose
	// id is in ObjectRef).
	UPIDs []string `json:"upids,omitempty"`
}

// User is the caller of a mutation, as its token says.
type User struct {
	// Subject is the token's subject: the stable user id at the issuer.
	Subject string `json:"subject"`
	Name    string `json:"name,omitempty"`
	// PlatformAdmin is true for platform admins; Roles are the caller's
	// VDC roles ("VDC:role").
	PlatformAdmin bool     `json:"platformAdmin,omitempty"`
	Roles         []string `json:"roles,omitempty"`
}

// ObjectRef names the objects of a mutation.
type ObjectRef struct {
	// Resource is the mutation's object type, from its result type (VM,
	// Network, Operation, ...).
	Resource string `json:"resource"`
	// IDs are the ids and names found in its arguments and its answer,
	// in order, without repeats.
	IDs []string `json:"ids,omitempty"`
}

// ResponseStatus is the outcome of a mutation.
type ResponseStatus struct {
	// Code is "OK", or the GraphQL error code (extensions.code) of its
	// first error.
	Code string `json:"code"`
	// Message is the first error's message as the client saw it.
	Message string `json:"message,omitempty"`
}

// Sink receives events. Emit must not block for long: sinks that do I/O
// queue.
type Sink interface {
	Emit(Event)
}

// tasksKey is the context key of a request's task recorder.
type tasksKey struct{}

// Tasks collects the UPIDs of the Proxmox tasks started on behalf of one
// mutation. It is safe for concurrent use; once Close is called it takes
// no more (background work outliving the mutation is not its own).
type Tasks struct {
	mu     sync.Mutex
	upids  []string // protected by mu
	closed bool     // protected by mu
}

// WithTasks returns a context whose Proxmox tasks are recorded in t.
func WithTasks(ctx context.Context, t *Tasks) context.Context {
	return context.WithValue(ctx, tasksKey{}, t)
}

// NoteTask records upid on the recorder of ctx, if any.
func NoteTask(ctx context.Context, upid string) {
	if t, ok := ctx.Value(tasksKey{}).(*Tasks); ok && upid != "" {
		t.mu.Lock()
		defer t.mu.Unlock()
		if !t.closed {
			t.upids = append(t.upids, upid)
		}
	}
}

// Close stops recording and returns the UPIDs recorded.
func (t *Tasks) Close() []string {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.closed = true
	return t.upids
}

// SystemSubject is the User.Subject of an event no caller asked for, such
// as Proxmox's HA manager recovering a VM (docs/operate/high-availability.md).
const SystemSubject = "system:flexplane"

// System is an event of something that happened without a mutation (verb
// names it, e.g. "recoverVM"), of vdc's resource with ids, recorded now.
func System(verb, vdc, resource string, ids ...string) Event {
	now := time.Now().UTC()
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	return Event{Kind: "Event", APIVersion: APIVersion, AuditID: hex.EncodeToString(b), Stage: StageResponseComplete,
		Verb: verb, User: User{Subject: SystemSubject}, VDC: vdc, ObjectRef: ObjectRef{Resource: resource, IDs: ids},
		ResponseStatus: ResponseStatus{Code: "OK"}, RequestReceivedTimestamp: now, StageTimestamp: now}
}
