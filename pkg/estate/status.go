package estate

import "github.com/flexplane/flexplane/pkg/mesh/fleet"

// ZoneStatus is how much of a zone answers; its values are the API's
// ZoneStatus enum.
type ZoneStatus string

// The statuses of a zone.
const (
	ZoneOnline   ZoneStatus = "ONLINE"   // every host is online
	ZoneDegraded ZoneStatus = "DEGRADED" // some hosts are online
	ZoneOffline  ZoneStatus = "OFFLINE"  // no host is online
)

// StatusOf decides z's status from its hosts'.
func StatusOf(z fleet.Zone) ZoneStatus {
	online := 0
	for _, h := range z.Hosts {
		if h.Status == fleet.StatusOnline {
			online++
		}
	}
	switch {
	case online == len(z.Hosts):
		return ZoneOnline
	case online > 0:
		return ZoneDegraded
	}
	return ZoneOffline
}

// HostDown reports whether h is not online, and why.
func HostDown(h fleet.Host) (down bool, why string) {
	switch h.Status {
	case fleet.StatusOnline:
		return false, ""
	case fleet.StatusDegraded:
		return true, "the agent cannot reach Proxmox: " + h.Detail
	}
	return true, h.Detail
}
