package pveschema

import (
	"strings"
	"testing"
)

// formatCases has, for every named format the engine knows, values Proxmox accepts and
// values it rejects with the expected message ("" = any message).
var formatCases = map[string]struct {
	good []string
	bad  map[string]string
}{
	"string":   {good: []string{"", "anything, really"}},
	"pve-node": {good: []string{"pve1", "a", "node-01"}, bad: map[string]string{"-pve": "value does not look like a valid node name", "pve_1": "", "pve.lan": ""}},
	"pve-vmid": {good: []string{"100", "999999999"}, bad: map[string]string{"99": "value does not look like a valid VM ID", "0100": "", "1000000000": ""}},
	"pve-storage-id": {good: []string{"local", "local-lvm", "ceph.pool_1"},
		bad: map[string]string{"1local": "storage ID '1local' contains illegal characters", "local-": "", "lo cal": ""}},
	"pve-ha-resource-or-vm-id": {good: []string{"vm:100", "100", "ct:101"}, bad: map[string]string{"vm:99": "value does not look like a valid ha resource id", "vm-100": "", "x:100": ""}},
	"pve-ha-resource-id":       {good: []string{"vm:100", "ct:101"}, bad: map[string]string{"100": "value does not look like a valid ha resource id", "vm:": ""}},
	"pve-ha-node":              {good: []string{"pve1", "pve2:2"}, bad: map[string]string{"pve1:a": "value does not look like a valid ha node", "pve 1": ""}},
	"pve-configid":             {good: []string{"net0", "scsi10", "my_mapping-1"}, bad: map[string]string{"0net": "invalid configuration ID '0net'", "n": "", "a.b": ""}},
	"pve-poolid": {good: []string{"tenants", "tenant-a/prod", "a/b/c", "x.y_z"},
		bad: map[string]string{"a b": "pool name 'a b' contains invalid characters", "a/b/c/d": "pool name 'a/b/c/d' nested too deeply (max levels = 3)", "/a": ""}},
	"pve-bridge-id": {good: []string{"vmbr0", "vnet1", "br-lan.10"}, bad: map[string]string{"vmbr 0": "invalid bridge ID 'vmbr 0'", "a/b": ""}},
	"pve-iface":     {good: []string{"eth0", "vmbr0", "bond0.100", "enp3s0f1"}, bad: map[string]string{"0eth": "invalid network interface name '0eth'", "e": "", "br-lan": ""}},
	"dns-name":      {good: []string{"vm1", "web-01.example.com", "a.b.c"}, bad: map[string]string{"-a": "value does not look like a valid DNS name", "a..b": "", "a_b": "", "a.": ""}},
	"mac-addr": {good: []string{"BC:24:11:00:00:01", "02:00:00:aa:bb:cc"},
		bad: map[string]string{"01:00:5e:00:00:01": "value does not look like a valid unicast MAC address", "BC:24:11:00:00": "", "BC-24-11-00-00-01": ""}},
	"urlencoded":         {good: []string{"", "ssh-rsa%20AAAA", "a_b.c!~*'()"}, bad: map[string]string{"a b": "invalid urlencoded string: a b", "a+b": ""}},
	"disk-size":          {good: []string{"32", "32G", "1.5T", "512M", "100K"}, bad: map[string]string{"32GB": "value does not look like a valid disk size: 32GB", "-1G": "", "G": ""}},
	"pve-tag":            {good: []string{"prod", "k8s_node", "v1.2+x"}, bad: map[string]string{"-x": "invalid characters in tag", "a b": ""}},
	"pve-storage-vgname": {good: []string{"pve", "vg_data-1", "01"}, bad: map[string]string{"-vg": "lvm name '-vg' contains illegal characters", "v": ""}},
	"pve-qm-bootdisk":    {good: []string{"scsi0", "scsi30", "virtio15", "efidisk0", "tpmstate0"}, bad: map[string]string{"net0": "invalid boot disk 'net0'", "scsi31": "", "scsi": ""}},
	"pve-qm-bootdev":     {good: []string{"scsi0", "ide2", "net0", "net31", "hostpci1", "usb2"}, bad: map[string]string{"floppy": "invalid boot device 'floppy'", "efidisk0": "", "net32": ""}},
	"ipv4":               {good: []string{"10.0.0.1", "255.255.255.255"}, bad: map[string]string{"10.0.0.256": "value does not look like a valid IPv4 address", "010.0.0.1": "", "fd00::1": "", "10.0.0.1/24": ""}},
	"ipv6":               {good: []string{"fd00::1", "::", "::ffff:10.0.0.1"}, bad: map[string]string{"10.0.0.1": "value does not look like a valid IPv6 address", "fe80::1%eth0": "", "fd00:::1": ""}},
	"ip":                 {good: []string{"10.0.0.1", "fd00::1"}, bad: map[string]string{"example.com": "value does not look like a valid IP address", "": ""}},
	"ipv4mask":           {good: []string{"255.255.255.0", "255.0.0.0", "128.0.0.0", "255.255.255.255", "0.0.0.0"}, bad: map[string]string{"255.0.255.0": "value does not look like a valid IP netmask", "24": ""}},
	"CIDRv4":             {good: []string{"10.0.0.0/24", "10.0.0.5/8", "10.0.0.5/32"}, bad: map[string]string{"10.0.0.0/7": "value does not look like a valid IPv4 CIDR network", "10.0.0.0": "", "10.0.0.0/33": "", "fd00::/64": ""}},
	"CIDRv6":             {good: []string{"fd00::/64", "fd00::5/128"}, bad: map[string]string{"fd00::/129": "value does not look like a valid IPv6 CIDR network", "10.0.0.0/24": ""}},
	"CIDR":               {good: []string{"10.0.0.0/24", "fd00::/48"}, bad: map[string]string{"10.0.0.0/+8": "value does not look like a valid CIDR network", "fd00::/4": ""}},
	"pve-ipv4-config":    {good: []string{"dhcp", "manual", "10.0.0.5/24"}, bad: map[string]string{"auto": "value does not look like a valid ipv4 network configuration", "10.0.0.5": ""}},
	"pve-ipv6-config":    {good: []string{"dhcp", "auto", "manual", "fd00::5/64"}, bad: map[string]string{"fd00::5": "value does not look like a valid ipv6 network configuration"}},
	"address":            {good: []string{"10.0.0.1", "fd00::1", "pve1.example.com"}, bad: map[string]string{"pve_1": "value does not look like a valid address: pve_1"}},
	"pve-storage-server": {good: []string{"10.0.0.1", "nfs.example.com"}, bad: map[string]string{"nfs server": "value does not look like a valid server name or IP address"}},
	"pve-storage-portal-dns": {good: []string{"10.0.0.1", "10.0.0.1:3260", "[fd00::1]:3260", "fd00::1", "fd00::1.3260", "iscsi.example.com"},
		bad: map[string]string{"a b": "value does not look like a valid portal address", "host:port": ""}},
	"pve-sdn-zone-id":   {good: []string{"zone1", "ab"}, bad: map[string]string{"zone_1": "zone ID 'zone_1' contains illegal characters", "zonezone1": "zone ID 'zonezone1' can't be more length than 8 characters"}},
	"pve-sdn-vnet-id":   {good: []string{"vnet1", "tenantA"}, bad: map[string]string{"1vnet": "vnet ID '1vnet' contains illegal characters", "vnetvnet1": "vnet ID 'vnetvnet1' can't be more length than 8 characters"}},
	"pve-sdn-ipam-id":   {good: []string{"pve", "netbox1", "averylongipamname"}, bad: map[string]string{"net-box": "ipam ID 'net-box' contains illegal characters", "p": ""}},
	"pve-sdn-fabric-id": {good: []string{"fabric1", "f", "fab-1"}, bad: map[string]string{"fabric_1": "Fabric ID 'fabric_1' contains illegal characters", "fabricfab": ""}},
	"pve-sdn-subnet-id": {good: []string{"10.0.0.0/24", "zone1-10.0.0.0-24", "zone1-fd00::-64"}, bad: map[string]string{"zone1-10.0.0.0": "value does not look like a valid CIDR network", "10.0.0.0/4": ""}},
	"pve-sdn-bgp-rt":    {good: []string{"65000:100", "4294967295:1"}, bad: map[string]string{"65000": "value does not look like a valid bgp route-target", "10.0.0.1:100": "", "4294967296:1": ""}},
	"pve-vlan-id-or-range": {good: []string{"2", "4094", "100-200"},
		bad: map[string]string{"1": "invalid VLAN tag '1'", "4095": "", "100-100": "VLAN range must go from lower to higher tag '100-100'", "x": "invalid VLAN configuration 'x'"}},
	"pve-replication-job-id":         {good: []string{"100-0", "100-12"}, bad: map[string]string{"100": "replication job ID '100' invalid", "100-a": ""}},
	"email-or-username":              {good: []string{"root@pam", "ops@example.com", "admin"}, bad: map[string]string{"a b": "value does not look like a valid email address or user name"}},
	"pve-day-of-week":                {good: []string{"mon", "sun"}, bad: map[string]string{"monday": "invalid day 'monday'", "": ""}},
	"pve-calendar-event":             {good: []string{"*/15", "mon..fri 02:30", "sat 1:00"}, bad: map[string]string{"a;b": "unable to parse calendar event 'a;b'", "": ""}},
	"pve-task-status-type":           {good: []string{"ok", "error", "WARNING", "unknown"}, bad: map[string]string{"failed": "invalid status 'failed'"}},
	"pve-cpuset":                     {good: []string{"", "0", "0-3", "0,5,8-11", "1,"}, bad: map[string]string{"3-1": "unable to parse cpuset option", "a": "", "0,,1": "", ",1": ""}},
	"pve-hotplug-features":           {good: []string{"0", "1", "network,disk,usb", "cpu;memory cloudinit"}, bad: map[string]string{"network,gpu": "invalid hotplug feature 'gpu'", "": "unable to parse hotplug option"}},
	"pve-startup-order":              {good: []string{"1", "order=2,up=30,down=60", "up=5", ","}, bad: map[string]string{"order=x": "unable to parse startup options", "": "", "0": ""}},
	"pve-phys-bits":                  {good: []string{"host", "8", "64"}, bad: map[string]string{"65": "value must be an integer between 8 and 64 or 'host'", "7": "", "008": ""}},
	"pve-volume-id":                  {good: []string{"local:iso/debian.iso", "local-lvm:vm-100-disk-0", "local-lvm:32"}, bad: map[string]string{"vm-100-disk-0": "unable to parse volume ID 'vm-100-disk-0'", "local:": ""}},
	"pve-volume-id-or-qm-path":       {good: []string{"none", "cdrom", "/dev/sdb", "local-lvm:32"}, bad: map[string]string{"disk.img": "unable to parse volume ID 'disk.img'"}},
	"pve-volume-id-or-absolute-path": {good: []string{"/var/lib/vz/import/disk.qcow2", "local:import/disk.qcow2"}, bad: map[string]string{"none": "unable to parse volume ID 'none'"}},
	"pve-storage-path":               {good: []string{"/mnt/data", "/a;b"}, bad: map[string]string{"mnt/data": "value does not look like a valid absolute path", "/": "", "/;": ""}},
	"pve-storage-content":            {good: []string{"images", "iso", "import", "none"}, bad: map[string]string{"disks": "invalid content type 'disks'"}},
	"pve-storage-options":            {good: []string{"vers=4.2,soft"}, bad: map[string]string{"vers=4 soft": "invalid options 'vers=4 soft'", "": ""}},
	"pve-dir-override":               {good: []string{"iso=isos", "images=a/b.c"}, bad: map[string]string{"iso": "invalid override 'iso'", "disks=d": "invalid content type 'disks'"}},
	"storage-pair":                   {good: []string{"1", "local-lvm", "local-lvm:ceph"}, bad: map[string]string{"local-lvm:-x": "entry 'local-lvm:-x' contains invalid ID - storage ID '-x' contains illegal characters", "a:b:c": ""}},
	"pve-fw-addr-spec": {good: []string{"10.0.0.1", "10.0.0.0/24,10.1.0.1", "10.0.0.1-10.0.0.9", "fd00::/64", "+dc/app-members", "+guest/ipfilter-net0", "+web", "dc/myalias"},
		bad: map[string]string{"+dc/1bad": "malformed ipset name", "10.0.0.1,fd00::1": "detected mixed ipv4/ipv6 addresses in address list '10.0.0.1,fd00::1'", "10.0.0.1,,10.0.0.2": "extraneous commas in list", "10.0.0.1-10.0.0.3,10.0.1.1": "you can use a range in a list", "10.0.0.300": ""}},
	"IPorCIDRorAlias": {good: []string{"10.0.0.5", "10.0.0.0/24", "fd00::1", "dc/alias1"}, bad: map[string]string{"10.0.0.300": "value does not look like a valid IP address or CIDR network", "10.0.0.1/24": "", "10.0.0.1-10.0.0.3": ""}},
	"pve-fw-dport-spec": {good: []string{"22", "8000:8100", "80,443", "ssh,https", "echo-request"},
		bad: map[string]string{"70000": "invalid port '70000'", "100:20": "backwards range '100:20' not allowed, did you mean '20:100'?", "nosuchservice": "invalid port 'nosuchservice'", "1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16": "too many entries in port list (> 15 numbers)", "22,echo-request": "ICMP ports not allowed in port range", "22,": "extraneous commas in list"}},
	"pve-fw-sport-spec":     {good: []string{"1024:65535", "53"}, bad: map[string]string{"echo-request": "invalid port 'echo-request'"}},
	"pve-fw-protocol-spec":  {good: []string{"tcp", "udp", "icmp", "icmpv6", "6", "17"}, bad: map[string]string{"tcpx": "unknown protocol 'tcpx'", "255": ""}},
	"pve-fw-icmp-type-spec": {good: []string{"echo-request", "any", "neighbour-solicitation"}, bad: map[string]string{"ping": "invalid icmp-type value 'ping'"}},
	// Named property-string formats: the error starts "format error" or names the problem.
	"pve-qm-ipconfig": {good: []string{"ip=10.0.0.5/24,gw=10.0.0.1", "ip=dhcp", "ip6=auto", "ip=dhcp,ip6=fd00::2/64,gw6=fd00::1", ""},
		bad: map[string]string{
			"ip=10.0.0.5/24,gw=10.0.0.300": "format error\nx.gw: invalid format - value does not look like a valid IPv4 address\n",
			"gw=10.0.0.1":                  "format error\nx.ip: missing property - 'x.gw' requires this property\n",
			"ip":                           "value without key, but schema does not define a default key\n"}},
	"pve-vm-cpu-conf": {good: []string{"host", "cputype=kvm64,flags=+pcid;-ssbd", "x86-64-v3,hv-vendor-id=proxmox,guest-phys-bits=40", "custom-mine,flags=+aes", "max,phys-bits=host,hidden=yes"},
		bad: map[string]string{
			"host,guest-phys-bits=20":          "format error\nx.guest-phys-bits: value must have a minimum value of 32\n",
			"host,flags=aes":                   "format error\nx.flags: value does not match the regex pattern\n",
			"host,flags=+avx512f":              "VM-specific CPU flags must be a subset of: aes, amd-no-ssb, amd-ssbd, hv-evmcs, hv-tlbflush, ibpb, md-clear, nested-virt, pcid, pdpe1gb, spec-ctrl, ssbd, virt-ssbd\n",
			"pentium9":                         "Built-in cputype 'pentium9' is not defined (missing 'custom-' prefix?)\n",
			"flags=+aes":                       "CPU is missing cputype\n",
			"host,reported-model=EPYC":         "Property 'reported-model' not allowed in VM-specific CPU config.\n",
			"host,reported-model=Pentium9":     "",
			"host,hv-vendor-id=toolongvendor1": ""}},
	"pve-qm-boot":      {good: []string{"order=scsi0;net0", "cdn", "legacy=c"}, bad: map[string]string{"order=scsi0;cd": "format error\nx.order: invalid format - invalid boot device 'cd'\n", "cdnx": ""}},
	"pve-qm-hostpci":   {good: []string{"0000:01:00.0", "01:00,pcie=1,x-vga=1", "mapping=gpu1", "host=01:00.0;01:00.1,driver=vfio,vendor-id=0x10de"}, bad: map[string]string{"01:00.0,vendor-id=10de": "format error\nx.vendor-id: value does not match the regex pattern\n", "0000:0A:00.0": "", "gpu": ""}},
	"pve-qm-cicustom":  {good: []string{"user=local:snippets/user.yaml", "meta=local:snippets/m.yaml,network=local:snippets/n.yaml"}, bad: map[string]string{"user=user.yaml": "format error\nx.user: invalid format - unable to parse volume ID 'user.yaml'\n"}},
	"pve-qm-rng":       {good: []string{"/dev/urandom", "source=/dev/hwrng,max_bytes=0,period=1000"}, bad: map[string]string{"/dev/zero": "format error\nx.source: value '/dev/zero' does not have a value in the enumeration '/dev/urandom, /dev/random, /dev/hwrng'\n", "max_bytes=10": ""}},
	"pve-qm-smbios1":   {good: []string{"uuid=6c1b2d4e-8f3a-4b5c-9d6e-7f8a9b0c1d2e", "base64=1,manufacturer=UHJveG1veA=="}, bad: map[string]string{"uuid=nope": "format error\nx.uuid: value does not match the regex pattern\n", "serial=a b": ""}},
	"pve-qm-watchdog":  {good: []string{"i6300esb", "model=ib700,action=reset"}, bad: map[string]string{"action=explode": ""}},
	"pve-qemu-sev-fmt": {good: []string{"std", "type=snp,allow-smt=0"}, bad: map[string]string{"no-debug=1": "format error\nx.type: property is missing and it is not optional\n"}},
	"pve-qemu-tdx-fmt": {good: []string{"tdx,attestation=1", "type=tdx,attestation=0,vsock-cid=2,vsock-port=4050"}, bad: map[string]string{"tdx": "format error\nx.attestation: property is missing and it is not optional\n"}},
	"prune-backups": {good: []string{"keep-all=1", "keep-last=3,keep-daily=7", "keep-last=0", "keep-all=1,keep-last=0"},
		bad: map[string]string{"keep-last=-1": "format error\nx.keep-last: value must have a minimum value of 0\n", "keep-some=1": "invalid key in comma-separated list property: keep-some\n",
			"keep-all=1,keep-last=2": "keep-all cannot be set together with other options.\n"}},
	"backup-performance": {good: []string{"max-workers=4", "max-workers=2,pbs-entries-max=1024"}, bad: map[string]string{"max-workers=0": ""}},
	"backup-fleecing":    {good: []string{"1", "enabled=1,storage=local-lvm"}, bad: map[string]string{"storage=a b": ""}},
	"pve-sdn-dhcp-range": {good: []string{"start-address=10.0.0.100,end-address=10.0.0.200", "start-address=x,end-address=y"}, bad: map[string]string{"start-address=10.0.0.100": "format error\nx.end-address: property is missing and it is not optional\n"}},
}

func TestFormats(t *testing.T) {
	t.Parallel()
	s := load(t)
	for _, name := range s.FormatNames() {
		if _, ok := formatCases[name]; !ok {
			t.Errorf("format %s has no test cases", name)
		}
	}
	for name, tc := range formatCases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			if !s.formats.known(name) {
				t.Fatalf("format %s unknown", name)
			}
			for _, v := range tc.good {
				if msg := s.formats.checkNamed("x", name, v); msg != "" {
					t.Errorf("%q rejected: %s", v, msg)
				}
			}
			for v, want := range tc.bad {
				msg := s.formats.checkNamed("x", name, v)
				if msg == "" {
					t.Errorf("%q accepted", v)
					continue
				}
				if !strings.HasSuffix(msg, "\n") {
					t.Errorf("%q: message %q lacks Proxmox's trailing newline", v, msg)
				}
				if want != "" && strings.TrimSuffix(msg, "\n") != strings.TrimSuffix(want, "\n") {
					t.Errorf("%q: message\n got %q\nwant %q", v, msg, want)
				}
			}
		})
	}
}

func TestListFormats(t *testing.T) {
	t.Parallel()
	s := load(t)
	tests := []struct {
		format, value, msg string
	}{
		{"pve-configid-list", "", ""},
		{"pve-configid-list", "net0, scsi1;ide2", ""},
		{"pve-configid-list", "net0,-x", "invalid configuration ID '-x'\n"},
		{"pve-node-list", "pve1;pve2", ""},
		{"pve-vmid-list", "100,101 102", ""},
		{"pve-vmid-list", "100,12", "value does not look like a valid VM ID\n"},
		{"address-list", "10.0.0.1 fd00::1 dns.example.com", ""},
		{"pve-storage-id-alist", "local,local-lvm", "undefined format 'pve-storage-id-alist'\n"},
		{"pve-tag-list", "", ""},
		{"pve-tag-list", "ok;-bad", "invalid characters in tag\n"},
		{"pve-qm-ipconfig-list", "ip=dhcp", "undefined format 'pve-qm-ipconfig-list'\n"},
		{"pve-storage-id-opt", "", ""},
		{"pve-storage-id-opt", "-x", "storage ID '-x' contains illegal characters\n"},
		{"no-such-format", "x", "undefined format 'no-such-format'\n"},
		{"no-such-format-list", "x", "undefined format 'no-such-format-list'\n"},
	}
	for _, tc := range tests {
		if got := s.formats.checkNamed("x", tc.format, tc.value); got != tc.msg {
			t.Errorf("%s %q: got %q, want %q", tc.format, tc.value, got, tc.msg)
		}
	}
}

// TestSchemaFormatsCovered walks every parameter of every endpoint and checks that each
// named format it uses is one the engine checks (Load also enforces this).
func TestSchemaFormatsCovered(t *testing.T) {
	t.Parallel()
	s := load(t)
	seen := map[string]bool{}
	var walk func(p *prop)
	walk = func(p *prop) {
		if p.Format != "" {
			seen[p.Format] = true
		}
		for _, sub := range p.FormatProps {
			walk(sub)
		}
		for _, sub := range p.Properties {
			walk(sub)
		}
		if p.Items != nil {
			walk(p.Items)
		}
	}
	for _, e := range s.Endpoints() {
		walk(e.params)
	}
	for f := range seen {
		if !s.formats.known(f) && f != "pve-qm-ide" {
			t.Errorf("format %s used by the schema is not checked", f)
		}
	}
	if len(seen) < 60 {
		t.Fatalf("only %d formats seen; schema walk broken?", len(seen))
	}
}

// TestPerlPatterns checks the translation of Perl regexp syntax the schema uses, including
// repeat counts beyond Go's limit of 1000.
func TestPerlPatterns(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		pattern, match, noMatch string
	}{
		{`(?^i:[a-z]+)`, "AbC", "a1"},
		{`[0-9]{,3}`, "123", "1234"},
		{`[0-9a-zA-Z!=]{0,4096}`, strings.Repeat("a", 4096), "a b"},
		{`x{2,10}`, "xxxxxxxxxx", "xxxxxxxxxxx"},
	} {
		re, err := compilePattern(tc.pattern)
		if err != nil {
			t.Errorf("%s: %v", tc.pattern, err)
			continue
		}
		if !re.MatchString(tc.match) || re.MatchString(tc.noMatch) {
			t.Errorf("%s: matches %q %v, %q %v", tc.pattern, tc.match, re.MatchString(tc.match), tc.noMatch, re.MatchString(tc.noMatch))
		}
	}
}
