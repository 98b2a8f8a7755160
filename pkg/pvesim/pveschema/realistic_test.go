package pveschema

import "testing"

// TestRealisticRequests validates requests shaped like the ones flexplane's agent sends;
// none may be refused.
func TestRealisticRequests(t *testing.T) {
	t.Parallel()
	s := load(t)
	upid := "UPID:pve1:0002A1B2:0101C3D4:6565F00D:qmclone:100:flexplane@pve!agent:"
	tests := []struct {
		method, path string
		raw          map[string][]string
	}{
		{"POST", "/nodes/pve1/qemu", map[string][]string{
			"vmid": {"100"}, "name": {"web-1"}, "memory": {"2048"}, "cores": {"2"}, "sockets": {"1"},
			"cpu": {"host"}, "net0": {"virtio,bridge=vmbr0,firewall=1"}, "scsihw": {"virtio-scsi-single"},
			"scsi0": {"local-lvm:0,import-from=local:import/jammy.qcow2,iothread=1,discard=on"},
			"ide2":  {"local-lvm:cloudinit"}, "boot": {"order=scsi0"}, "ostype": {"l26"}, "agent": {"enabled=1"},
			"serial0": {"socket"}, "vga": {"serial0"}, "ciuser": {"ubuntu"}, "sshkeys": {"ssh-ed25519%20AAAAC3Nz%20me"},
			"ipconfig0": {"ip=10.0.0.5/24,gw=10.0.0.1"}, "nameserver": {"10.0.0.1"}, "tags": {"tenant-a;web"},
			"pool": {"tenant-a"}, "start": {"0"}, "onboot": {"1"}, "description": {"managed by flexplane"},
		}},
		{"POST", "/nodes/pve1/qemu/9000/clone", map[string][]string{
			"newid": {"101"}, "name": {"web-2"}, "full": {"1"}, "target": {"pve2"}, "storage": {"local-lvm"}, "pool": {"tenant-a"},
		}},
		{"PUT", "/nodes/pve1/qemu/101/resize", map[string][]string{"disk": {"scsi0"}, "size": {"+10G"}}},
		{"POST", "/nodes/pve1/qemu/101/migrate", map[string][]string{"target": {"pve2"}, "online": {"1"}, "with-local-disks": {"1"}}},
		{"POST", "/nodes/pve1/qemu/101/config", map[string][]string{"delete": {"net1,ipconfig1"}, "digest": {"0123456789abcdef0123456789abcdef01234567"}}},
		{"PUT", "/nodes/pve1/qemu/101/config", map[string][]string{"memory": {"4096"}, "balloon": {"0"}}},
		{"POST", "/nodes/pve1/qemu/101/status/stop", map[string][]string{"timeout": {"30"}}},
		{"POST", "/nodes/pve1/qemu/101/status/shutdown", map[string][]string{"timeout": {"60"}, "forceStop": {"1"}}},
		{"POST", "/nodes/pve1/qemu/101/template", nil},
		{"GET", "/nodes/pve1/qemu/101/rrddata", map[string][]string{"timeframe": {"hour"}, "cf": {"AVERAGE"}}},
		{"GET", "/nodes/pve1/qemu/101/agent/network-get-interfaces", nil},
		{"POST", "/nodes/pve1/storage/local/download-url", map[string][]string{
			"content": {"iso"}, "filename": {"debian-12.iso"}, "url": {"https://cdimage.debian.org/debian-12.iso"},
			"checksum": {"abc123"}, "checksum-algorithm": {"sha256"}, "verify-certificates": {"1"},
		}},
		{"GET", "/nodes/pve1/storage/local/content", map[string][]string{"content": {"iso"}}},
		{"DELETE", "/nodes/pve1/storage/local/content/local:iso/debian-12.iso", nil},
		{"POST", "/cluster/sdn/zones", map[string][]string{"zone": {"t1"}, "type": {"simple"}, "ipam": {"pve"}, "dhcp": {"dnsmasq"}}},
		{"POST", "/cluster/sdn/vnets", map[string][]string{"vnet": {"v1"}, "zone": {"t1"}, "alias": {"tenant-a net"}}},
		{"POST", "/cluster/sdn/vnets/v1/subnets", map[string][]string{
			"subnet": {"10.0.0.0/24"}, "type": {"subnet"}, "gateway": {"10.0.0.1"}, "snat": {"1"},
			"dhcp-range": {"start-address=10.0.0.100,end-address=10.0.0.200"},
		}},
		{"PUT", "/cluster/sdn", nil},
		{"GET", "/cluster/sdn/ipams/pve/status", nil},
		{"POST", "/pools", map[string][]string{"poolid": {"tenant-a"}, "comment": {"Tenant A"}}},
		{"PUT", "/pools/tenant-a", map[string][]string{"vms": {"100,101"}, "storage": {"local-lvm"}}},
		{"GET", "/cluster/resources", map[string][]string{"type": {"vm"}}},
		{"GET", "/cluster/nextid", map[string][]string{"vmid": {"105"}}},
		{"GET", "/cluster/tasks", nil},
		{"GET", "/nodes/pve1/tasks", map[string][]string{"vmid": {"100"}, "limit": {"50"}, "source": {"all"}}},
		{"GET", "/nodes/pve1/tasks/" + upid + "/status", nil},
		{"GET", "/nodes/pve1/tasks/" + upid + "/log", map[string][]string{"start": {"0"}, "limit": {"500"}}},
		{"DELETE", "/nodes/pve1/tasks/" + upid, nil},
		{"GET", "/nodes/pve1/network", map[string][]string{"type": {"any_bridge"}}},
		{"GET", "/nodes/pve1/certificates/info", nil},
		{"GET", "/cluster/config/join", map[string][]string{"node": {"pve1"}}},
	}
	for _, tc := range tests {
		t.Run(tc.method+tc.path, func(t *testing.T) {
			t.Parallel()
			e, vars := endpoint(t, s, tc.method, tc.path)
			if _, err := e.ValidateRequest(vars, tc.raw); err != nil {
				t.Fatal(err)
			}
		})
	}
}
