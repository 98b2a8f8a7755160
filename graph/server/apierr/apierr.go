// Package apierr defines the errors the GraphQL API shows its clients: a
// code (extensions.code) and a message safe to show, plus for bad input the
// offending field and for an unreachable zone the zone. The cause of an
// INTERNAL error is kept for the logs and never shown.
package apierr

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/flexplane/flexplane/pkg/auth"
	"github.com/flexplane/flexplane/pkg/catalog"
	"github.com/flexplane/flexplane/pkg/compute"
	"github.com/flexplane/flexplane/pkg/estate"
	"github.com/flexplane/flexplane/pkg/loadbalancer"
	"github.com/flexplane/flexplane/pkg/network"
	"github.com/flexplane/flexplane/pkg/rollout"
	"github.com/flexplane/flexplane/pkg/support/fault"
	"github.com/flexplane/flexplane/pkg/tenancy/quota"
	"github.com/flexplane/flexplane/pkg/tenantkube"
)

// Code is the value of extensions.code.
type Code string

// The codes clients may see.
const (
	Unauthenticated Code = "UNAUTHENTICATED"
	NotFound        Code = "NOT_FOUND"
	BadUserInput    Code = "BAD_USER_INPUT"
	Conflict        Code = "CONFLICT"
	QuotaExceeded   Code = "QUOTA_EXCEEDED"
	// CapacityExceeded: no host of the zone can take the VM; nothing was
	// done.
	CapacityExceeded Code = "CAPACITY_EXCEEDED"
	ZoneUnavailable  Code = "ZONE_UNAVAILABLE"
	// Forbidden: the caller is a member of the VDC but its role there
	// does not allow the action (outside the VDC the answer is NOT_FOUND).
	Forbidden Code = "FORBIDDEN"
	// Unavailable: a service the whole request depends on (the identity
	// provider) cannot be reached; retrying later may work.
	Unavailable Code = "UNAVAILABLE"
	// RateLimited: the caller sent more mutations than its rate limit
	// allows; nothing of the operation ran, and extensions.retryAfter says
	// in how many seconds it may try again.
	RateLimited Code = "RATE_LIMITED"
	Internal    Code = "INTERNAL"
)

// Error is an error meant for API clients.
type Error struct {
	Code Code
	// Message is shown to the client as is.
	Message string
	// Field is the input field at fault (BAD_USER_INPUT), e.g.
	// "input.quotas.vcpus".
	Field string
	// Zone is the zone at fault (ZONE_UNAVAILABLE).
	Zone string
	// RetryAfter is the whole seconds, at least 1, until a refused caller
	// may try again (RATE_LIMITED); shown as extensions.retryAfter.
	RetryAfter int
	// Cause is logged, never shown.
	Cause error
}

func (e *Error) Error() string {
	if e.Cause != nil {
		return fmt.Sprintf("%s: %s: %v", e.Code, e.Message, e.Cause)
	}
	return fmt.Sprintf("%s: %s", e.Code, e.Message)
}

// Unwrap returns the cause.
func (e *Error) Unwrap() error { return e.Cause }

// Extensions returns the GraphQL error extensions of e.
func (e *Error) Extensions() map[string]any {
	ext := map[string]any{"code": string(e.Code)}
	if e.Field != "" {
		ext["field"] = e.Field
	}
	if e.Zone != "" {
		ext["zone"] = e.Zone
	}
	if e.RetryAfter > 0 {
		ext["retryAfter"] = e.RetryAfter
	}
	return ext
}

// New returns an error with code and a formatted message.
func New(code Code, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...)}
}

// BadInput reports an invalid input field.
func BadInput(field, format string, args ...any) *Error {
	return &Error{Code: BadUserInput, Field: field, Message: fmt.Sprintf(format, args...)}
}

// ZoneDown reports a zone that could not be reached.
func ZoneDown(zone string, cause error) *Error {
	return &Error{Code: ZoneUnavailable, Zone: zone, Message: fmt.Sprintf("zone %s is unavailable", zone), Cause: cause}
}

// From classifies any error for clients. fieldPrefix is where the input
// of the failed call sits in the request: it is prepended to the field of
// catalog validation errors (e.g. "input" turns "quotas.vcpus" into
// "input.quotas.vcpus") and of compute errors ("nics[0].address" becomes
// "input.nics[0].address"). Errors it does not know are INTERNAL with the
// original as Cause.
func From(err error, fieldPrefix string) *Error {
	var (
		ae *Error
		ce *compute.Error
		ve *catalog.ValidationError
		nf *catalog.NotFoundError
		ex *catalog.AlreadyExistsError
		cf *catalog.ConflictError
		ke *tenantkube.Error
		fe *fault.Error
		qe *quota.ExceededError
		ze *estate.ZoneError
		ne *network.InputError
		re *rollout.Error
	)
	switch {
	case err == nil:
		return nil
	case errors.As(err, &ae):
		return ae
	case errors.As(err, &ce):
		return fromCompute(ce, fieldPrefix)
	case errors.As(err, &ke):
		return fromKube(ke, fieldPrefix)
	case errors.As(err, &fe):
		return fromFault(fe, fieldPrefix)
	case errors.As(err, &ze):
		return ZoneDown(ze.Zone.Name, ze.Err)
	case errors.As(err, &ne):
		field := joinField(fieldPrefix, ne.Field)
		return BadInput(field, "%s: %s", field, ne.Message)
	case errors.Is(err, network.ErrExists):
		return &Error{Code: Conflict, Message: "the VDC already has a network of that name in the zone", Cause: err}
	case errors.Is(err, network.ErrInUse):
		msg := err.Error()
		if _, after, ok := strings.Cut(msg, network.ErrInUse.Error()+": "); ok {
			msg = "the network is in use: " + after
		}
		return &Error{Code: Conflict, Message: msg, Cause: err}
	case errors.As(err, &re):
		e := fromKind(rolloutCodes[re.Kind], re.Message, "", re.Field, fieldPrefix, nil, re)
		if e.Code == NotFound {
			e.Message = e.Field + ": " + re.Message
		}
		return e
	case errors.As(err, &qe):
		return &Error{Code: QuotaExceeded, Field: "quotas." + qe.Resource, Message: qe.Error()}
	case errors.As(err, &ve):
		field := joinField(fieldPrefix, ve.Field)
		return BadInput(field, "%s: %s", field, ve.Message)
	case errors.As(err, &nf):
		return &Error{Code: NotFound, Message: nf.Error()}
	case errors.As(err, &ex) && ex.Kind == catalog.KindLoadBalancer:
		return &Error{Code: Conflict, Message: "the VDC has a load balancer of that name already"}
	case errors.As(err, &ex):
		return &Error{Code: Conflict, Message: ex.Error()}
	case errors.Is(err, loadbalancer.ErrNotFound):
		return &Error{Code: NotFound, Message: "load balancer not found"}
	case errors.As(err, &cf):
		return &Error{Code: Conflict, Message: cf.Error()}
	case errors.Is(err, auth.ErrIssuerUnavailable):
		return &Error{Code: Unavailable, Message: "the identity provider cannot be reached; try again shortly", Cause: err}
	case errors.Is(err, auth.ErrUnauthenticated):
		return &Error{Code: Unauthenticated, Message: auth.PublicReason(err), Cause: err}
	case errors.Is(err, context.DeadlineExceeded):
		return &Error{Code: Internal, Message: "the request timed out", Cause: err}
	}
	return &Error{Code: Internal, Message: "internal error", Cause: err}
}

// computeCodes maps the kinds of compute errors to codes.
var computeCodes = map[compute.ErrorKind]Code{
	compute.KindInternal:         Internal,
	compute.KindNotFound:         NotFound,
	compute.KindBadInput:         BadUserInput,
	compute.KindConflict:         Conflict,
	compute.KindQuotaExceeded:    QuotaExceeded,
	compute.KindZoneUnavailable:  ZoneUnavailable,
	compute.KindCapacityExceeded: CapacityExceeded,
}

// fromCompute maps an error of the VM lifecycle: its field (relative to
// the call's input) goes under fieldPrefix; an exceeded quota names the
// VDC's quota field ("quotas.vcpus"), which is no input.
func fromCompute(ce *compute.Error, fieldPrefix string) *Error {
	code, ok := computeCodes[ce.Kind]
	if !ok {
		code = Internal
	}
	e := &Error{Code: code, Message: ce.Message, Zone: ce.Zone, Cause: ce.Cause}
	if ce.Field != "" {
		e.Field = joinField(fieldPrefix, ce.Field)
	}
	if qe := (*quota.ExceededError)(nil); errors.As(ce, &qe) {
		e.Field = "quotas." + qe.Resource
	}
	if code == Internal && e.Cause == nil {
		e.Cause = ce
	}
	return e
}

// kubeCodes maps the kinds of managed Kubernetes errors to codes.
var kubeCodes = map[tenantkube.ErrorKind]Code{
	tenantkube.KindInternal:      Internal,
	tenantkube.KindBadInput:      BadUserInput,
	tenantkube.KindNotFound:      NotFound,
	tenantkube.KindConflict:      Conflict,
	tenantkube.KindQuotaExceeded: QuotaExceeded,
	tenantkube.KindUnavailable:   Unavailable,
}

// fromKube maps an error of managed Kubernetes; its field goes under
// fieldPrefix, and an exceeded quota names the VDC's quota field.
func fromKube(ke *tenantkube.Error, fieldPrefix string) *Error {
	e := fromKind(kubeCodes[ke.Kind], ke.Message, "", ke.Field, fieldPrefix, ke.Cause, ke)
	if qe := (*quota.ExceededError)(nil); errors.As(ke, &qe) {
		e.Field = "quotas." + qe.Resource
	}
	return e
}

// rolloutCodes maps the kinds of refused rollouts to codes.
var rolloutCodes = map[rollout.ErrorKind]Code{
	rollout.KindBadInput: BadUserInput,
	rollout.KindNotFound: NotFound,
	rollout.KindConflict: Conflict,
}

// faultCodes maps the kinds of the capability services' errors to codes.
var faultCodes = map[fault.Kind]Code{
	fault.Internal:        Internal,
	fault.NotFound:        NotFound,
	fault.BadInput:        BadUserInput,
	fault.Conflict:        Conflict,
	fault.ZoneUnavailable: ZoneUnavailable,
	fault.Forbidden:       Forbidden,
}

// fromFault maps an error of a capability service (networks, edge
// gateways, load balancers, VDCs): its field goes under fieldPrefix and
// heads the message of bad input.
func fromFault(fe *fault.Error, fieldPrefix string) *Error {
	return fromKind(faultCodes[fe.Kind], fe.Message, fe.Zone, fe.Field, fieldPrefix, fe.Cause, fe)
}

// fromKind is the error of a domain error whose kind maps to code (""
// for a kind with no code: Internal): its field (relative to the call's
// input) goes under fieldPrefix and heads the message of bad input; an
// internal error without a cause keeps the domain error itself as its
// cause, for the log.
func fromKind(code Code, message, zone, field, fieldPrefix string, cause, domain error) *Error {
	if code == "" {
		code = Internal
	}
	e := &Error{Code: code, Message: message, Zone: zone, Cause: cause}
	if field != "" {
		e.Field = joinField(fieldPrefix, field)
		if code == BadUserInput {
			e.Message = e.Field + ": " + message
		}
	}
	if code == Internal && e.Cause == nil {
		e.Cause = domain
	}
	return e
}

// joinField places field (relative to an input) under prefix: "nics[0]"
// under "input" is "input.nics[0]".
func joinField(prefix, field string) string {
	if prefix == "" {
		return field
	}
	return prefix + "." + field
}
