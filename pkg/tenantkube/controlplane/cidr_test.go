package controlplane

import (
	"errors"
	"net/netip"
	"testing"
)

// TestValidateCIDRs: the defaults and the bounds pass; a range that is no
// IPv4 prefix, has host bits, is out of bounds, or overlaps the other or
// a network to avoid is refused as the range at fault, matching
// ErrInvalid.
func TestValidateCIDRs(t *testing.T) {
	t.Parallel()
	lan := netip.MustParsePrefix("10.1.0.0/24")
	for _, c := range []struct{ svc, pod string }{
		{"10.96.0.0/12", "10.244.0.0/16"},
		{"172.20.0.0/24", "100.64.0.0/10"},
		{"10.96.0.0/12", "11.0.0.0/8"},
		{"192.168.0.0/16", "10.244.0.0/20"},
	} {
		if _, _, err := ValidateCIDRs(c.svc, c.pod, lan); err != nil {
			t.Errorf("%s, %s: %v", c.svc, c.pod, err)
		}
	}
	for _, c := range []struct {
		svc, pod string
		atPod    bool
	}{
		{"", "10.244.0.0/16", false},
		{"10.96.0.1/12", "10.244.0.0/16", false},
		{"fd00::/108", "10.244.0.0/16", false},
		{"10.0.0.0/11", "172.16.0.0/16", false},
		{"10.96.0.0/25", "10.244.0.0/16", false},
		{"10.96.0.0/12", "banana", true},
		{"10.96.0.0/12", "10.244.0.0/21", true},
		{"10.96.0.0/12", "0.0.0.0/7", true},
		{"10.96.0.0/12", "10.100.0.0/16", true},
		{"10.1.0.0/16", "10.244.0.0/16", false},
		{"10.96.0.0/12", "10.0.0.0/12", true},
	} {
		_, _, err := ValidateCIDRs(c.svc, c.pod, lan)
		var ce *CIDRError
		if !errors.As(err, &ce) || ce.Pod != c.atPod || !errors.Is(err, ErrInvalid) || ce.Message == "" {
			t.Errorf("%q, %q: %v, want the %s range refused", c.svc, c.pod, err, map[bool]string{false: "service", true: "pod"}[c.atPod])
		}
	}
}
