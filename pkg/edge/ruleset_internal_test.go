//go:build linux

package edge

import (
	"fmt"
	"net/netip"
	"testing"
)

// Rules go into runs no two rules of which one packet can match, in order, so that
// a run can be one map lookup without changing which rule decides.
func TestRulesetRuns(t *testing.T) {
	t.Parallel()
	web := Rule{ID: "web", Direction: Inbound, Protocol: "tcp", FromPort: 80, ToPort: 80, Destination: netip.MustParsePrefix("10.1.0.11/32"), Allow: true}
	ssh := Rule{ID: "ssh", Direction: Inbound, Protocol: "tcp", FromPort: 22, ToPort: 22, Destination: netip.MustParsePrefix("10.1.0.11/32")}
	dns := Rule{ID: "dns", Direction: Outbound, Protocol: "udp", FromPort: 53, ToPort: 53}
	anyIn := Rule{ID: "any", Direction: Inbound, Protocol: "any", Source: netip.MustParsePrefix("198.51.100.0/24")}
	ping := Rule{ID: "ping", Direction: Inbound, Protocol: "icmp", Destination: netip.MustParsePrefix("10.1.0.0/24"), Allow: true}
	otherNet := Rule{ID: "other", Direction: Inbound, Protocol: "tcp", FromPort: 1, ToPort: 65535, Destination: netip.MustParsePrefix("10.2.0.0/16")}
	many := make([]Rule, maxRun+1)
	for i := range many {
		many[i] = Rule{ID: fmt.Sprint(i), Direction: Inbound, Protocol: "udp", FromPort: uint16(1000 + i), ToPort: uint16(1000 + i)}
	}
	for _, tc := range []struct {
		name  string
		rules []Rule
		want  []int // the runs' lengths
	}{
		{"disjoint ports, directions, networks", []Rule{web, ssh, dns, otherNet}, []int{4}},
		{"any protocol from a network meets a port", []Rule{web, anyIn, dns, ssh}, []int{1, 2, 1}},
		{"icmp never meets tcp", []Rule{web, ping, ssh}, []int{3}},
		{"icmp meets any protocol", []Rule{ping, anyIn}, []int{1, 1}},
		{"a rule meets itself", []Rule{web, web}, []int{1, 1}},
		{"at most maxRun", many, []int{maxRun, 1}},
		{"none", nil, nil},
	} {
		var got []int
		for _, r := range runs(tc.rules) {
			got = append(got, len(r))
		}
		if fmt.Sprint(got) != fmt.Sprint(tc.want) {
			t.Errorf("%s: runs of %v, want %v", tc.name, got, tc.want)
		}
	}
}
