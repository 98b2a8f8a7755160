package tenantkube

import "fmt"

// ErrorKind classifies an *Error.
type ErrorKind int

// The kinds of errors the service returns.
const (
	// KindInternal: an unexpected failure; Message is safe to show.
	KindInternal ErrorKind = iota
	// KindBadInput: an input field is invalid; Field names it.
	KindBadInput
	// KindNotFound: no such cluster or node pool in the VDC (another
	// VDC's answers the same), or a network that is not the VDC's.
	KindNotFound
	// KindConflict: the name is taken, or the object is being deleted.
	KindConflict
	// KindQuotaExceeded: the workers would exceed the VDC's quota.
	KindQuotaExceeded
	// KindUnavailable: managed Kubernetes is not configured here.
	KindUnavailable
)

// Error is what the service returns for a refused or failed call; the
// API layer maps Kind to a code.
type Error struct {
	Kind ErrorKind
	// Field is the offending input field (KindBadInput, KindNotFound of
	// an input), e.g. "size".
	Field   string
	Message string
	// Cause is the underlying error, logged and never shown.
	Cause error
}

func (e *Error) Error() string {
	if e.Cause != nil {
		return fmt.Sprintf("tenantkube: %s: %v", e.Message, e.Cause)
	}
	return "tenantkube: " + e.Message
}

// Unwrap returns the cause.
func (e *Error) Unwrap() error { return e.Cause }

func badInput(field, format string, args ...any) *Error {
	return &Error{Kind: KindBadInput, Field: field, Message: fmt.Sprintf(format, args...)}
}

func notFound(what string) *Error { return &Error{Kind: KindNotFound, Message: "no such " + what} }

func internal(msg string, err error) *Error {
	return &Error{Kind: KindInternal, Message: msg, Cause: err}
}

// ErrUnavailable is returned by every call of a Service that has no
// management cluster.
var ErrUnavailable = &Error{Kind: KindUnavailable, Message: "managed Kubernetes needs the Kubernetes backend (a management cluster)"}
