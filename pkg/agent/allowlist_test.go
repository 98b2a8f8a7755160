package agent

import "testing"

func TestAllowlist(t *testing.T) {
	t.Parallel()
	p := newPolicy()
	allowed := []struct{ method, path string }{
		{"GET", "/version"},
		{"GET", "/nodes"},
		{"GET", "/cluster/resources"},
		{"GET", "/nodes/pve1/status"},
		{"GET", "/nodes/pve1/qemu/100/status/current"},
		{"POST", "/nodes/pve1/qemu/100/status/start"},
		{"PUT", "/nodes/pve1/qemu/100/config"},
		{"DELETE", "/nodes/pve1/qemu/100"},
		{"GET", "/nodes/pve1/tasks"},           // a VM's operations: its task history
		{"GET", "/nodes/pve1/qemu/100/config"}, // its NICs and disks
		{"GET", "/nodes/pve1/tasks/UPID:pve1:0000A1B2:00C0FFEE:6750F00D:qmstart:100:flexplane@pve!agent:/status"},
		{"POST", "/cluster/sdn/vnets/vnet1/ips"},
		{"GET", "/nodes/pve1/storage/local/content/local:iso/debian-13.iso"},
		{"DELETE", "/nodes/pve1/storage/local-lvm/content/local-lvm:vm-100-disk-0"},
		{"GET", "/nodes/pve1/qemu/100/snapshot"}, // snapshots: list, take, roll back, delete
		{"POST", "/nodes/pve1/qemu/100/snapshot"},
		{"POST", "/nodes/pve1/qemu/100/snapshot/before-upgrade/rollback"},
		{"DELETE", "/nodes/pve1/qemu/100/snapshot/before-upgrade"},
		// Security groups: the cluster's groups and IP sets, a guest's
		// firewall options and rules; the cluster's options only read.
		{"GET", "/cluster/firewall/options"},
		{"POST", "/cluster/firewall/groups"},
		{"POST", "/cluster/firewall/groups/fp0123456789abcd"},
		{"DELETE", "/cluster/firewall/groups/fp0123456789abcd/3"},
		{"POST", "/cluster/firewall/ipset/fp0123456789abcd"},
		{"DELETE", "/cluster/firewall/ipset/fp0123456789abcd/10.1.0.5"},
		{"PUT", "/nodes/pve1/qemu/100/firewall/options"},
		{"POST", "/nodes/pve1/qemu/100/firewall/rules"},
		{"PUT", "/nodes/pve1/qemu/100/firewall/rules/0"},
		{"DELETE", "/nodes/pve1/qemu/100/firewall/rules/0"},
		{"GET", "/nodes/pve1/qemu/100/cloudinit/dump"}, // a move copies the VM's user-data snippet
		// Backup schedules: Proxmox's backup jobs.
		{"GET", "/cluster/backup"},
		{"POST", "/cluster/backup"},
		{"GET", "/cluster/backup/flexplane-vm-100"},
		{"PUT", "/cluster/backup/flexplane-vm-100"},
		{"DELETE", "/cluster/backup/flexplane-vm-100"},
	}
	for _, c := range allowed {
		if !p.allowed(c.method, c.path) {
			t.Errorf("%s %s refused, want allowed", c.method, c.path)
		}
	}
	refused := []struct{ method, path string }{
		{"DELETE", "/cluster/backup"}, // jobs one by one only
		{"POST", "/cluster/backup/flexplane-vm-100"},
		{"GET", "/cluster/backup-info/not-backed-up"},
		{"GET", "/access/users"},
		{"POST", "/access/users"},
		{"GET", "/access"},
		{"POST", "/access/ticket"},
		{"POST", "/nodes/pve1/execute"},
		{"POST", "/nodes/pve1/termproxy"},
		{"POST", "/nodes/pve1/vncshell"},
		{"POST", "/nodes/pve1/qemu/100/vncproxy"},
		{"POST", "/nodes/pve1/qemu/100/spiceproxy"},
		{"GET", "/nodes/pve1/qemu/100/vncwebsocket"},
		{"POST", "/nodes/pve1/qemu/100/monitor"},
		{"POST", "/nodes/pve1/qemu/100/agent/exec"},
		{"GET", "/nodes/pve1/apt/update"},
		{"PUT", "/cluster/options"},
		// Of the storage configuration, only a VDC's PBS entry is added
		// (checked by TestPBSEntryChecked).
		{"PUT", "/storage/local"},
		{"DELETE", "/storage/local"},
		// The firewall beyond security groups: the hosts' policy (the
		// cluster's options), cluster and host rules, aliases, a node's
		// firewall, a guest's IP sets and aliases.
		{"PUT", "/cluster/firewall/options"},
		{"POST", "/cluster/firewall/rules"},
		{"PUT", "/cluster/firewall/rules/0"},
		{"DELETE", "/cluster/firewall/rules/0"},
		{"POST", "/cluster/firewall/aliases"},
		{"PUT", "/nodes/pve1/firewall/options"},
		{"POST", "/nodes/pve1/firewall/rules"},
		{"POST", "/nodes/pve1/qemu/100/firewall/ipset"},
		{"POST", "/nodes/pve1/qemu/100/firewall/aliases"},
		{"DELETE", "/cluster/firewall/ipset/fp0123456789abcd/10.1.0.0/24"},
		{"PUT", "/nodes/pve1/qemu/100/snapshot/s1/config"},
		{"DELETE", "/nodes/pve1/status"},
		{"PATCH", "/nodes"},
		{"get", "/nodes"},
		{"GET", "/nodes/../access/users"},
		{"GET", "/nodes/pve1/../../access/users"},
		{"GET", "/nodes//status"},
		{"GET", "/nodes/pve1/status/"},
		{"GET", "nodes"},
		{"GET", ""},
		{"GET", "/nodes/pve%2F1/status"},
		{"GET", "/nodes/pve1/qemu/100/config/../../../../access/users"},
		{"GET", "/nodes/a b/status"},
		{"GET", "/nodes/pve1/storage/local/content/local:iso/../../../../access/users"},
		{"GET", "/nodes/pve1/storage/local/content" + "/"},
		{"PUT", "/nodes/pve1/storage/local/content/local:iso/x.iso"},
	}
	for _, c := range refused {
		if p.allowed(c.method, c.path) {
			t.Errorf("%s %q allowed, want refused", c.method, c.path)
		}
	}
}
