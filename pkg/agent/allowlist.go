package agent

import (
	"strings"
)

// A rule allows one method on one path template. Templates are paths below
// /api2/json whose {placeholders} match exactly one segment made of letters,
// digits and ".-_:@!" (node names, VMIDs, storage ids, UPIDs); a final
// {name...} matches one or more such segments (volume ids such as
// "local:iso/debian.iso", which clients send unescaped).
type rule struct {
	method string
	tmpl   string
}

// allowlist is everything flexplane asks of Proxmox. Anything else — the
// whole /access tree, node shells and consoles (execute, termproxy,
// vncproxy, spiceproxy, vncwebsocket), guest agent commands, the QEMU
// monitor, apt, services, ceph, cluster configuration, the firewall's
// cluster options (which set the hosts' own policy: only read), host and
// cluster rules, aliases and a guest's IP sets — is refused.
func allowlist() []rule {
	var rules []rule
	add := func(method string, tmpls ...string) {
		for _, t := range tmpls {
			rules = append(rules, rule{method, t})
		}
	}
	add("GET",
		"/version",
		"/cluster/status", "/cluster/resources", "/cluster/nextid", "/cluster/tasks", "/cluster/replication",
		"/cluster/sdn", "/cluster/sdn/zones", "/cluster/sdn/zones/{zone}",
		"/cluster/sdn/vnets", "/cluster/sdn/vnets/{vnet}",
		"/cluster/sdn/vnets/{vnet}/subnets", "/cluster/sdn/vnets/{vnet}/subnets/{subnet}",
		"/cluster/sdn/ipams", "/cluster/sdn/ipams/{ipam}", "/cluster/sdn/ipams/{ipam}/status",
		"/pools", "/pools/{poolid}",
		"/storage", "/storage/{storage}",
		"/nodes", "/nodes/{node}", "/nodes/{node}/status", "/nodes/{node}/version",
		"/nodes/{node}/certificates/info", "/nodes/{node}/network", "/nodes/{node}/rrddata",
		"/nodes/{node}/qemu", "/nodes/{node}/qemu/{vmid}", "/nodes/{node}/qemu/{vmid}/config",
		"/nodes/{node}/qemu/{vmid}/pending", "/nodes/{node}/qemu/{vmid}/status",
		"/nodes/{node}/qemu/{vmid}/status/current", "/nodes/{node}/qemu/{vmid}/rrddata",
		"/nodes/{node}/qemu/{vmid}/migrate", "/nodes/{node}/qemu/{vmid}/snapshot",
		"/nodes/{node}/qemu/{vmid}/cloudinit/dump",
		"/nodes/{node}/storage", "/nodes/{node}/storage/{storage}",
		"/nodes/{node}/storage/{storage}/status", "/nodes/{node}/storage/{storage}/content",
		"/nodes/{node}/storage/{storage}/content/{volume...}",
		"/nodes/{node}/tasks", "/nodes/{node}/tasks/{upid}",
		"/nodes/{node}/tasks/{upid}/status", "/nodes/{node}/tasks/{upid}/log",
		// A backup's configuration, read before its restore, and the
		// VMs' backup schedules, Proxmox's backup jobs
		// (docs/use/backups.md).
		"/nodes/{node}/vzdump/extractconfig", "/cluster/backup", "/cluster/backup/{id}",
		// The VDCs' security groups (docs/use/security-groups.md): the
		// cluster's groups and IP sets, whether its firewall is on, and a
		// guest's firewall options and rules.
		"/cluster/firewall/options", "/cluster/firewall/groups", "/cluster/firewall/groups/{group}",
		"/cluster/firewall/ipset", "/cluster/firewall/ipset/{name}",
		"/nodes/{node}/qemu/{vmid}/firewall/options", "/nodes/{node}/qemu/{vmid}/firewall/rules",
		// High availability (docs/operate/placement.md): the HA resources of
		// VMs, the resource-affinity rules of their placement groups and
		// the HA manager's status.
		"/cluster/ha/resources", "/cluster/ha/resources/{sid}", "/cluster/ha/rules", "/cluster/ha/rules/{rule}",
		"/cluster/ha/status/current",
	)
	add("POST",
		"/nodes/{node}/qemu", "/nodes/{node}/qemu/{vmid}/config",
		"/nodes/{node}/qemu/{vmid}/clone", "/nodes/{node}/qemu/{vmid}/template",
		"/nodes/{node}/qemu/{vmid}/migrate",
		"/nodes/{node}/qemu/{vmid}/status/start", "/nodes/{node}/qemu/{vmid}/status/stop",
		"/nodes/{node}/qemu/{vmid}/status/shutdown", "/nodes/{node}/qemu/{vmid}/status/reboot",
		"/nodes/{node}/qemu/{vmid}/status/reset", "/nodes/{node}/qemu/{vmid}/status/suspend",
		"/nodes/{node}/qemu/{vmid}/status/resume",
		"/nodes/{node}/qemu/{vmid}/snapshot", "/nodes/{node}/qemu/{vmid}/snapshot/{snapname}/rollback",
		"/nodes/{node}/storage/{storage}/content",
		"/nodes/{node}/storage/{storage}/download-url",
		"/nodes/{node}/vzdump", "/cluster/backup",
		// A VDC's storage entry on a Proxmox Backup Server, checked beyond
		// its path (pbs.go, docs/operate/backups.md).
		"/storage",
		"/pools",
		"/cluster/sdn/zones", "/cluster/sdn/vnets", "/cluster/sdn/vnets/{vnet}/subnets",
		"/cluster/sdn/vnets/{vnet}/ips",
		"/cluster/firewall/groups", "/cluster/firewall/groups/{group}",
		"/cluster/firewall/ipset", "/cluster/firewall/ipset/{name}",
		"/nodes/{node}/qemu/{vmid}/firewall/rules",
		"/cluster/ha/resources", "/cluster/ha/rules",
	)
	add("PUT",
		"/nodes/{node}/qemu/{vmid}/config", "/nodes/{node}/qemu/{vmid}/resize",
		"/pools", "/pools/{poolid}",
		"/cluster/sdn", "/cluster/sdn/zones/{zone}", "/cluster/sdn/vnets/{vnet}",
		"/cluster/sdn/vnets/{vnet}/subnets/{subnet}", "/cluster/sdn/vnets/{vnet}/ips",
		"/nodes/{node}/qemu/{vmid}/firewall/options", "/nodes/{node}/qemu/{vmid}/firewall/rules/{pos}",
		"/cluster/ha/resources/{sid}", "/cluster/ha/rules/{rule}",
		"/cluster/backup/{id}",
	)
	add("DELETE",
		"/nodes/{node}/qemu/{vmid}", "/nodes/{node}/qemu/{vmid}/snapshot/{snapname}", "/nodes/{node}/tasks/{upid}",
		"/nodes/{node}/storage/{storage}/content/{volume...}",
		"/pools", "/pools/{poolid}",
		"/cluster/sdn/zones/{zone}", "/cluster/sdn/vnets/{vnet}",
		"/cluster/sdn/vnets/{vnet}/subnets/{subnet}", "/cluster/sdn/vnets/{vnet}/ips",
		"/cluster/firewall/groups/{group}", "/cluster/firewall/groups/{group}/{pos}",
		"/cluster/firewall/ipset/{name}", "/cluster/firewall/ipset/{name}/{cidr}",
		"/nodes/{node}/qemu/{vmid}/firewall/rules/{pos}",
		"/cluster/ha/resources/{sid}", "/cluster/ha/rules/{rule}",
		"/cluster/backup/{id}",
	)
	return rules
}

// policy decides which requests the agent forwards.
type policy struct {
	rules []rule
}

func newPolicy() policy { return policy{rules: allowlist()} }

// allowed reports whether method on path (below /api2/json) is allowed.
func (p policy) allowed(method, path string) bool {
	_, ok := p.match(method, path)
	return ok
}

// match returns the template of the rule allowing method on path (below
// /api2/json), e.g. "/nodes/{node}/qemu/{vmid}/status/current".
func (p policy) match(method, path string) (string, bool) {
	if !cleanPath(path) {
		return "", false
	}
	segs := strings.Split(path[1:], "/")
	for _, r := range p.rules {
		if r.method == method && matchTemplate(r.tmpl, segs) {
			return r.tmpl, true
		}
	}
	return "", false
}

// cleanPath accepts only absolute paths without empty, "." or ".." segments
// and without escapes, so that what is checked is what Proxmox sees.
func cleanPath(path string) bool {
	if len(path) < 2 || path[0] != '/' || strings.HasSuffix(path, "/") {
		return false
	}
	for _, seg := range strings.Split(path[1:], "/") {
		if seg == "" || seg == "." || seg == ".." {
			return false
		}
		for _, c := range seg {
			if !segmentChar(c) {
				return false
			}
		}
	}
	return true
}

func segmentChar(c rune) bool {
	switch {
	case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		return true
	}
	return strings.ContainsRune(".-_:@!", c)
}

func matchTemplate(tmpl string, segs []string) bool {
	parts := strings.Split(tmpl[1:], "/")
	if last := parts[len(parts)-1]; strings.HasSuffix(last, "...}") {
		if len(segs) < len(parts) {
			return false
		}
		segs = segs[:len(parts)] // the rest belongs to the final placeholder
	}
	if len(parts) != len(segs) {
		return false
	}
	for i, p := range parts {
		if strings.HasPrefix(p, "{") && strings.HasSuffix(p, "}") {
			continue // cleanPath already restricted the segment's characters
		}
		if p != segs[i] {
			return false
		}
	}
	return true
}
