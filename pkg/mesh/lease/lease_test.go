package lease

import (
	"testing"
	"time"
)

// TestTimingsDefaults: zero fields take the defaults, set ones stay.
func TestTimingsDefaults(t *testing.T) {
	t.Parallel()
	if got := (Timings{}).WithDefaults(); got != (Timings{DefaultDuration, DefaultRenewDeadline, DefaultRetryPeriod}) {
		t.Errorf("defaults: %+v", got)
	}
	set := Timings{Duration: 2 * time.Second, RenewDeadline: time.Second, RetryPeriod: 300 * time.Millisecond}
	if got := set.WithDefaults(); got != set {
		t.Errorf("set timings changed: %+v", got)
	}
	if got := (Timings{Duration: 4 * time.Second}).WithDefaults(); got.Duration != 4*time.Second || got.RetryPeriod != DefaultRetryPeriod {
		t.Errorf("partly set: %+v", got)
	}
}
