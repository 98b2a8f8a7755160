package catalog

import (
	"errors"
	"fmt"
)

// Sentinels matched with errors.Is against the typed errors below.
var (
	ErrNotFound      = errors.New("not found")
	ErrAlreadyExists = errors.New("already exists")
	ErrConflict      = errors.New("conflict")
	ErrInvalid       = errors.New("invalid")
)

// NotFoundError reports that no object of Kind has Name.
type NotFoundError struct {
	Kind Kind
	Name string
}

func (e *NotFoundError) Error() string { return fmt.Sprintf("%s %q not found", e.Kind, e.Name) }

// Is makes errors.Is(err, ErrNotFound) true.
func (e *NotFoundError) Is(target error) bool { return target == ErrNotFound }

// AlreadyExistsError reports a Create of a name that is taken.
type AlreadyExistsError struct {
	Kind Kind
	Name string
}

func (e *AlreadyExistsError) Error() string {
	return fmt.Sprintf("%s %q already exists", e.Kind, e.Name)
}

// Is makes errors.Is(err, ErrAlreadyExists) true.
func (e *AlreadyExistsError) Is(target error) bool { return target == ErrAlreadyExists }

// ConflictError reports a conditional Update or Delete whose resourceVersion
// is not the stored one: someone else wrote the object in between.
type ConflictError struct {
	Kind Kind
	Name string
	// Expected is the resourceVersion the caller read; Actual the stored one.
	Expected, Actual string
}

func (e *ConflictError) Error() string {
	return fmt.Sprintf("%s %q was modified: resourceVersion %s is stale (now %s)",
		e.Kind, e.Name, e.Expected, e.Actual)
}

// Is makes errors.Is(err, ErrConflict) true.
func (e *ConflictError) Is(target error) bool { return target == ErrConflict }

// ValidationError reports one invalid field. Field is the path of the
// field as clients see it, e.g. "name", "quotas.vcpus" or "pools[1].zone".
type ValidationError struct {
	Field   string
	Message string
	// err is the domain's sentinel behind the refusal, if any (such as
	// ErrPoolExhausted), matched by errors.Is.
	err error
}

// Unwrap returns the sentinel behind the refusal, if any.
func (e *ValidationError) Unwrap() error { return e.err }

func (e *ValidationError) Error() string { return fmt.Sprintf("%s: %s", e.Field, e.Message) }

// Is makes errors.Is(err, ErrInvalid) true.
func (e *ValidationError) Is(target error) bool { return target == ErrInvalid }

func invalid(field, format string, args ...any) error {
	return &ValidationError{Field: field, Message: fmt.Sprintf(format, args...)}
}
