package apierr_test

import (
	"errors"
	"fmt"
	"io/fs"
	"testing"

	"github.com/flexplane/flexplane/graph/server/apierr"
	"github.com/flexplane/flexplane/pkg/auth"
	"github.com/flexplane/flexplane/pkg/catalog"
	"github.com/flexplane/flexplane/pkg/compute"
	"github.com/flexplane/flexplane/pkg/loadbalancer"
	"github.com/flexplane/flexplane/pkg/support/fault"
	"github.com/flexplane/flexplane/pkg/tenancy/quota"
)

func TestFrom(t *testing.T) {
	t.Parallel()
	cause := fmt.Errorf("read /secret/path: %w", fs.ErrPermission)
	cases := []struct {
		err     error
		code    apierr.Code
		field   string
		message string
	}{
		{fmt.Errorf("op: %w", &catalog.ValidationError{Field: "quotas.vms", Message: "must be between 0 and 10, got -1"}),
			apierr.BadUserInput, "input.quotas.vms", "input.quotas.vms: must be between 0 and 10, got -1"},
		{fmt.Errorf("op: %w", &catalog.NotFoundError{Kind: catalog.KindImage, Name: "x"}), apierr.NotFound, "", `Image "x" not found`},
		{&catalog.AlreadyExistsError{Kind: catalog.KindVDC, Name: "p"}, apierr.Conflict, "", `VDC "p" already exists`},
		{&catalog.ConflictError{Kind: catalog.KindVDC, Name: "p", Expected: "1", Actual: "2"}, apierr.Conflict, "", `VDC "p" was modified: resourceVersion 1 is stale (now 2)`},
		{auth.ErrNoToken, apierr.Unauthenticated, "", "unauthenticated: no bearer token"},
		{fmt.Errorf("wrapped: %w", apierr.ZoneDown("fra1", cause)), apierr.ZoneUnavailable, "", "zone fra1 is unavailable"},
		{cause, apierr.Internal, "", "internal error"},
		// Compute errors name fields relative to the call's input; the
		// edge places them in the request.
		{fmt.Errorf("op: %w", &compute.Error{Kind: compute.KindBadInput, Field: "nics[0].address", Message: "bad"}),
			apierr.BadUserInput, "input.nics[0].address", "bad"},
		{&compute.Error{Kind: compute.KindConflict, Field: "nics[1].network", Message: "full"}, apierr.Conflict, "input.nics[1].network", "full"},
		{&compute.Error{Kind: compute.KindNotFound, Message: "no such VM"}, apierr.NotFound, "", "no such VM"},
		{&compute.Error{Kind: compute.KindQuotaExceeded, Message: "over", Cause: fmt.Errorf("reserve: %w", &quota.ExceededError{Resource: "vcpus"})},
			apierr.QuotaExceeded, "quotas.vcpus", "over"},
		{&compute.Error{Kind: compute.KindZoneUnavailable, Zone: "fra1", Message: "zone fra1 is unavailable", Cause: cause},
			apierr.ZoneUnavailable, "", "zone fra1 is unavailable"},
		{&compute.Error{Kind: compute.KindInternal, Message: "cloning failed", Cause: cause}, apierr.Internal, "", "cloning failed"},
		{fmt.Errorf("op: %w", &compute.Error{Kind: compute.KindCapacityExceeded, Message: "no host of zone fra1 can take the VM", Cause: cause}),
			apierr.CapacityExceeded, "", "no host of zone fra1 can take the VM"},
		// The capability services' errors: bad input names its field,
		// placed in the request, before the message.
		{fmt.Errorf("op: %w", fault.Invalid("pools[0].backends[1].port", "port 0 is out of range")), apierr.BadUserInput,
			"input.pools[0].backends[1].port", "input.pools[0].backends[1].port: port 0 is out of range"},
		{fault.New(fault.Conflict, "the edge gateway keeps changing"), apierr.Conflict, "", "the edge gateway keeps changing"},
		{fault.New(fault.NotFound, "port forward not found"), apierr.NotFound, "", "port forward not found"},
		{fault.ZoneDown("fra1", cause), apierr.ZoneUnavailable, "", "zone fra1 is unavailable"},
		{fmt.Errorf("op: %w", loadbalancer.ErrNotFound), apierr.NotFound, "", "load balancer not found"},
		{&catalog.AlreadyExistsError{Kind: catalog.KindLoadBalancer, Name: "p.web"}, apierr.Conflict, "", "the VDC has a load balancer of that name already"},
	}
	for _, c := range cases {
		e := apierr.From(c.err, "input")
		if e.Code != c.code || e.Field != c.field || e.Message != c.message {
			t.Errorf("From(%v) = %+v", c.err, e)
		}
		if ext := e.Extensions(); ext["code"] != string(c.code) {
			t.Errorf("extensions of %v: %v", c.err, ext)
		}
	}
	if e := apierr.From(cause, ""); !errors.Is(e, fs.ErrPermission) {
		t.Error("internal error lost its cause")
	}
	if e := apierr.From(&compute.Error{Kind: compute.KindBadInput, Field: "name", Message: "x"}, ""); e.Field != "name" {
		t.Errorf("compute field without prefix: %q", e.Field)
	}
	if e := apierr.From(&compute.Error{Kind: compute.KindZoneUnavailable, Zone: "fra1", Cause: cause}, ""); e.Extensions()["zone"] != "fra1" || !errors.Is(e, fs.ErrPermission) {
		t.Errorf("compute zone error: %+v", e)
	}
	if e := apierr.From(fault.ZoneDown("fra1", cause), ""); e.Extensions()["zone"] != "fra1" || !errors.Is(e, fs.ErrPermission) {
		t.Errorf("fault zone error: %+v", e)
	}
	if ext := apierr.ZoneDown("hel1", cause).Extensions(); ext["zone"] != "hel1" {
		t.Errorf("zone extension: %v", ext)
	}
	if apierr.From(nil, "") != nil {
		t.Error("From(nil) is not nil")
	}
}
