package catalog_test

import (
	"errors"
	"testing"

	"github.com/flexplane/flexplane/pkg/catalog"
)

// TestZoneOvercommit: a zone's ratios default to 1.0 for memory and 4.0
// for vCPUs (no policy, or fields unset); set ones are in percent, and
// ones out of bounds are refused on their field.
func TestZoneOvercommit(t *testing.T) {
	t.Parallel()
	var none *catalog.ZonePolicy
	if m, c := none.Overcommit(); m != 1 || c != 4 {
		t.Errorf("no policy: %v %v, want 1 4", m, c)
	}
	p := &catalog.ZonePolicy{ObjectMeta: catalog.ObjectMeta{Name: "fra1"}}
	if m, c := p.Overcommit(); m != 1 || c != 4 {
		t.Errorf("unset: %v %v, want 1 4", m, c)
	}
	p.MemoryOvercommitPercent, p.CPUOvercommitPercent = 150, 800
	if m, c := p.Overcommit(); m != 1.5 || c != 8 {
		t.Errorf("set: %v %v, want 1.5 8", m, c)
	}
	if err := p.Validate(); err != nil {
		t.Errorf("valid policy: %v", err)
	}
	for _, c := range []struct {
		mem, cpu int
		field    string
	}{{5, 0, "memoryOvercommitPercent"}, {401, 0, "memoryOvercommitPercent"}, {0, -1, "cpuOvercommitPercent"}, {0, 1601, "cpuOvercommitPercent"}} {
		bad := &catalog.ZonePolicy{ObjectMeta: catalog.ObjectMeta{Name: "fra1"},
			ZonePolicySpec: catalog.ZonePolicySpec{MemoryOvercommitPercent: c.mem, CPUOvercommitPercent: c.cpu}}
		ve := (*catalog.ValidationError)(nil)
		if err := bad.Validate(); !errors.As(err, &ve) || ve.Field != c.field {
			t.Errorf("%d %d: %v, want a validation error on %s", c.mem, c.cpu, err, c.field)
		}
	}
}
