package rollout

import (
	"testing"

	"github.com/flexplane/flexplane/pkg/release"
)

func TestTargetUpdateAvailable(t *testing.T) {
	t.Parallel()
	var none *Service
	if got := none.Target("v1.2.0"); got.Latest != nil || got.Shipped != "v1.2.0" {
		t.Errorf("nil service: %+v", got)
	}
	shipped := Target{Shipped: "v1.2.0"}
	published := Target{Latest: map[string]string{release.Platform(): "v1.3.0", "linux/arm64": "v1.1.0"}, Shipped: "v9.9.9"}
	for _, c := range []struct {
		t                 Target
		version, platform string
		want              bool
	}{
		{Target{}, "v1.0.0", "", false},
		{shipped, "v1.2.0", "", false},
		{shipped, "v1.1.0", "", true},
		{shipped, "", "", false},
		{published, "v1.2.0", "", true},
		{published, "v1.3.0", release.Platform(), false},
		{published, "v1.0.0", "linux/arm64", true},
		{published, "v1.2.0", "linux/arm64", false},
		{published, "not-a-version", "", true},
		{published, "v1.0.0", "plan9/386", false},
	} {
		if got := c.t.UpdateAvailable(c.version, c.platform); got != c.want {
			t.Errorf("%+v: %q on %q: %v, want %v", c.t, c.version, c.platform, got, c.want)
		}
	}
}
