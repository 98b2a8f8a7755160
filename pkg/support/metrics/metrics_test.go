package metrics_test

import (
	"fmt"
	"testing"

	"github.com/flexplane/flexplane/pkg/support/metrics"
)

// TestBoundedLabel shows that past its cap every new value becomes Other
// while the values seen before keep their own label.
func TestBoundedLabel(t *testing.T) {
	t.Parallel()
	b := metrics.NewBoundedLabel(3)
	for i := range 3 {
		if v := b.Value(fmt.Sprint("op", i)); v != fmt.Sprint("op", i) {
			t.Errorf("value %d = %q", i, v)
		}
	}
	if v := b.Value("op3"); v != metrics.Other {
		t.Errorf("fourth value = %q, want %q", v, metrics.Other)
	}
	if v := b.Value("op1"); v != "op1" {
		t.Errorf("a known value after the cap = %q", v)
	}
}
