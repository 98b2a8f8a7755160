// Package fault is the typed error the capability services (networks,
// edge gateways, load balancers, VDCs) return for what the caller did
// wrong or what stands in the way: a kind, a message safe to show, the
// input field at fault (relative to the call's input) and the zone at
// fault. The API layer maps the kind to its code in one place; the
// services import no transport to do so.
package fault

import (
	"errors"
	"fmt"
)

// Kind classifies an Error.
type Kind int

// The kinds of errors.
const (
	// Internal: a fault of the service; the cause is logged, never shown.
	Internal Kind = iota
	// NotFound: the object named does not exist (or is another VDC's).
	NotFound
	// BadInput: an input field is invalid; Field names it.
	BadInput
	// Conflict: the state of the objects refuses the change.
	Conflict
	// ZoneUnavailable: a zone the call needs does not answer; Zone names it.
	ZoneUnavailable
	// Forbidden: the caller may see the object but not do this to it (a
	// member of its VDC whose role is too low).
	Forbidden
)

// Error is a service's error for its callers.
type Error struct {
	Kind Kind
	// Message is safe to show. For BadInput it does not name the field:
	// the API layer puts the field's full path before it.
	Message string
	// Field is the input field at fault (BadInput), relative to the call's
	// input: "position", "pools[0].backends[1].vmId".
	Field string
	// Zone is the name of the zone at fault (ZoneUnavailable).
	Zone string
	// Cause is logged, never shown.
	Cause error
}

func (e *Error) Error() string {
	msg := e.Message
	if e.Field != "" {
		msg = e.Field + ": " + msg
	}
	if e.Cause != nil {
		return fmt.Sprintf("%s: %v", msg, e.Cause)
	}
	return msg
}

// Unwrap returns the cause.
func (e *Error) Unwrap() error { return e.Cause }

// New returns an error of kind with a formatted message.
func New(kind Kind, format string, args ...any) *Error {
	return &Error{Kind: kind, Message: fmt.Sprintf(format, args...)}
}

// Invalid reports the input field at fault.
func Invalid(field, format string, args ...any) *Error {
	return &Error{Kind: BadInput, Field: field, Message: fmt.Sprintf(format, args...)}
}

// ZoneDown reports a zone that could not be reached.
func ZoneDown(zone string, cause error) *Error {
	return &Error{Kind: ZoneUnavailable, Zone: zone, Message: fmt.Sprintf("zone %s is unavailable", zone), Cause: cause}
}

// Is reports whether err is an *Error of kind.
func Is(err error, kind Kind) bool {
	var e *Error
	return errors.As(err, &e) && e.Kind == kind
}
