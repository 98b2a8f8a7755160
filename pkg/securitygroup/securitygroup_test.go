package securitygroup_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/flexplane/flexplane/pkg/catalog"
	"github.com/flexplane/flexplane/pkg/compute"
	"github.com/flexplane/flexplane/pkg/dev/catalogtest"
	"github.com/flexplane/flexplane/pkg/securitygroup"
	"github.com/flexplane/flexplane/pkg/support/fault"
)

// noVMs is a VDC without VMs: the groups' limits do not read VMs.
type noVMs struct{}

func (noVMs) Members(context.Context, string) ([]compute.Member, map[string]error) { return nil, nil }
func (noVMs) SecurityGroups(context.Context, string, string) ([]string, error)     { return nil, nil }
func (noVMs) SetSecurityGroups(context.Context, string, string, []string) (*compute.VM, error) {
	return nil, nil
}

// TestGroupsPerVDC: a VDC has at most catalog.MaxSecurityGroups groups; the
// create past it is CONFLICT and writes nothing; another VDC is not
// counted against it.
func TestGroupsPerVDC(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	store, err := catalog.OpenDir(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range []string{"red", "blue"} {
		if _, err := catalog.Create(ctx, store, catalogtest.VDC(v, 1)); err != nil {
			t.Fatal(err)
		}
	}
	svc, err := securitygroup.New(securitygroup.Config{Store: store, VMs: noVMs{}})
	if err != nil {
		t.Fatal(err)
	}
	for i := range catalog.MaxSecurityGroups {
		if _, err := svc.Create(ctx, "red", securitygroup.Input{Name: fmt.Sprintf("g%d", i)}); err != nil {
			t.Fatalf("group %d: %v", i, err)
		}
	}
	if _, err := svc.Create(ctx, "red", securitygroup.Input{Name: "one-more"}); !fault.Is(err, fault.Conflict) {
		t.Fatalf("group %d: %v, want CONFLICT", catalog.MaxSecurityGroups+1, err)
	}
	if gs, err := svc.List(ctx, "red"); err != nil || len(gs) != catalog.MaxSecurityGroups {
		t.Fatalf("red's groups: %d, %v", len(gs), err)
	}
	if _, err := svc.Create(ctx, "blue", securitygroup.Input{Name: "g0"}); err != nil {
		t.Fatalf("blue's first group: %v", err)
	}
}
