package images_test

import (
	"testing"
	"time"

	"github.com/flexplane/flexplane/pkg/compute/images"
)

// TestCopyCutOff: a copy guest's description is cut off when its last
// beat is older than the limit, missing or unreadable, and alive within it.
func TestCopyCutOff(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 12, 6, 12, 0, 0, 0, time.UTC)
	beat := func(at time.Time) string {
		return "flexplane template of image blue.app v1 (sha256:00)\ncopy alive at " + at.Format(time.RFC3339Nano)
	}
	for _, c := range []struct {
		name, description string
		cut               bool
	}{
		{"a beat within the limit", beat(now.Add(-time.Minute)), false},
		{"a beat at the limit", beat(now.Add(-2 * time.Minute)), false},
		{"a beat past the limit", beat(now.Add(-2*time.Minute - time.Second)), true},
		{"no beat", "flexplane template of image blue.app v1 (sha256:00)", true},
		{"an unreadable beat", "copy alive at yesterday", true},
	} {
		if got := images.CopyCutOff(c.description, 2*time.Minute, now); got != c.cut {
			t.Errorf("%s: cut off %v, want %v", c.name, got, c.cut)
		}
	}
}
