package compute

import (
	"errors"
	"fmt"
)

// ErrorKind classifies an *Error.
type ErrorKind int

// The kinds of Error.
const (
	// KindInternal: an unexpected failure; Message is safe to show, Cause
	// is for the logs.
	KindInternal ErrorKind = iota
	// KindNotFound: no such VM or operation in the caller's VDC (another
	// VDC's resource is not found, never forbidden).
	KindNotFound
	// KindBadInput: an input field is invalid; Field names it.
	KindBadInput
	// KindConflict: the request conflicts with the state of the VM or of
	// its networks (Field names the input at fault, if any).
	KindConflict
	// KindQuotaExceeded: the create would take the VDC over a quota; the
	// cause is the *quota.ExceededError.
	KindQuotaExceeded
	// KindZoneUnavailable: the zone named by Zone could not be reached.
	KindZoneUnavailable
	// KindCapacityExceeded: no host of the zone can take the VM (none is
	// online, out of maintenance, with the VM's storage and room for its
	// memory, vCPUs and disk); nothing was done.
	KindCapacityExceeded
)

var kindNames = [...]string{
	KindInternal: "internal", KindNotFound: "not found", KindBadInput: "bad input", KindConflict: "conflict",
	KindQuotaExceeded: "quota exceeded", KindZoneUnavailable: "zone unavailable",
	KindCapacityExceeded: "capacity exceeded",
}

func (k ErrorKind) String() string {
	if k < 0 || int(k) >= len(kindNames) {
		return fmt.Sprintf("ErrorKind(%d)", int(k))
	}
	return kindNames[k]
}

// Error is the error of every exported operation of the Service. The
// API layer maps its Kind to an error code and places Field in the
// request (package compute knows its own inputs, not the API's).
type Error struct {
	Kind ErrorKind
	// Message says what is wrong; it may be shown to the caller.
	Message string
	// Field is the offending field relative to the operation's input,
	// e.g. "name" or "nics[0].address" of a CreateInput ("" for none).
	Field string
	// Zone is the name of the zone at fault (KindZoneUnavailable).
	Zone string
	// Cause is the underlying error, for the logs.
	Cause error
}

func (e *Error) Error() string {
	s := "compute: " + e.Kind.String()
	if e.Field != "" {
		s += " (" + e.Field + ")"
	}
	s += ": " + e.Message
	if e.Cause != nil {
		s += ": " + e.Cause.Error()
	}
	return s
}

// Unwrap returns the cause.
func (e *Error) Unwrap() error { return e.Cause }

// IsKind reports whether err is (or wraps) an *Error of kind k.
func IsKind(err error, k ErrorKind) bool {
	var e *Error
	return errors.As(err, &e) && e.Kind == k
}

func newError(kind ErrorKind, format string, args ...any) *Error {
	return &Error{Kind: kind, Message: fmt.Sprintf(format, args...)}
}

// badInput reports an invalid field of the operation's input.
func badInput(field, format string, args ...any) *Error {
	return &Error{Kind: KindBadInput, Field: field, Message: fmt.Sprintf(format, args...)}
}

// zoneDown reports a zone that could not be reached.
func zoneDown(zone string, cause error) *Error {
	return &Error{Kind: KindZoneUnavailable, Zone: zone, Message: fmt.Sprintf("zone %s is unavailable", zone), Cause: cause}
}
