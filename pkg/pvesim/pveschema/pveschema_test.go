package pveschema

import (
	"errors"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/flexplane/flexplane/pkg/pvesim/pveschema/internal/apitrim"
)

// loadShared loads the schema once for all tests; a Schema is immutable and safe for
// concurrent use, and loading it under the race detector takes a while.
var loadShared = sync.OnceValues(Load)

func load(t *testing.T) *Schema {
	t.Helper()
	s, err := loadShared()
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	return s
}

func TestLoadIsRepeatable(t *testing.T) {
	t.Parallel()
	a, err := Load()
	if err != nil {
		t.Fatal(err)
	}
	if a == load(t) || len(a.Endpoints()) != len(load(t).Endpoints()) {
		t.Fatal("Load does not build an independent, equal schema")
	}
}

func endpoint(t *testing.T, s *Schema, method, path string) (*Endpoint, map[string]string) {
	t.Helper()
	e, vars, err := s.Lookup(method, path)
	if err != nil {
		t.Fatalf("Lookup(%s %s): %v", method, path, err)
	}
	return e, vars
}

func TestLookup(t *testing.T) {
	t.Parallel()
	s := load(t)
	upid := "UPID:pve1:0000A1B2:0001C3D4:6565F00D:qmstart:100:root@pam:"
	tests := []struct {
		method, path string
		template     string
		vars         map[string]string
	}{
		{"GET", "/version", "/version", map[string]string{}},
		{"GET", "/nodes/pve1/qemu/100/config", "/nodes/{node}/qemu/{vmid}/config", map[string]string{"node": "pve1", "vmid": "100"}},
		{"POST", "/nodes/pve1/qemu/100/status/start", "/nodes/{node}/qemu/{vmid}/status/start", map[string]string{"node": "pve1", "vmid": "100"}},
		{"GET", "/nodes/pve2/tasks/" + upid + "/status", "/nodes/{node}/tasks/{upid}/status", map[string]string{"node": "pve2", "upid": upid}},
		{"GET", "/nodes/pve1/storage/local/content/local:iso/debian-12.iso", "/nodes/{node}/storage/{storage}/content/{volume}", map[string]string{"node": "pve1", "storage": "local", "volume": "local:iso/debian-12.iso"}},
		{"DELETE", "/nodes/pve1/storage/local-lvm/content/local-lvm:vm-100-disk-0", "/nodes/{node}/storage/{storage}/content/{volume}", map[string]string{"node": "pve1", "storage": "local-lvm", "volume": "local-lvm:vm-100-disk-0"}},
		{"GET", "/cluster/sdn/vnets/vnet1/subnets/zone1-10.0.0.0-24", "/cluster/sdn/vnets/{vnet}/subnets/{subnet}", map[string]string{"vnet": "vnet1", "subnet": "zone1-10.0.0.0-24"}},
		{"GET", "/nodes/pve1/qemu/100/agent/network-get-interfaces", "/nodes/{node}/qemu/{vmid}/agent/network-get-interfaces", map[string]string{"node": "pve1", "vmid": "100"}},
		{"GET", "/nodes/", "/nodes", map[string]string{}},
		// An ipset entry's CIDR holds a slash ("%2F" arrives decoded).
		{"DELETE", "/cluster/firewall/ipset/apps/10.2.0.0/16", "/cluster/firewall/ipset/{name}/{cidr}", map[string]string{"name": "apps", "cidr": "10.2.0.0/16"}},
		{"GET", "/nodes/pve1/qemu/100/firewall/ipset/ipfilter-net0/fd00::/64", "/nodes/{node}/qemu/{vmid}/firewall/ipset/{name}/{cidr}", map[string]string{"node": "pve1", "vmid": "100", "name": "ipfilter-net0", "cidr": "fd00::/64"}},
	}
	for _, tc := range tests {
		t.Run(tc.method+tc.path, func(t *testing.T) {
			t.Parallel()
			e, vars := endpoint(t, s, tc.method, tc.path)
			if e.Path != tc.template || e.Method != tc.method {
				t.Fatalf("got %s %s, want %s %s", e.Method, e.Path, tc.method, tc.template)
			}
			if !reflect.DeepEqual(vars, tc.vars) {
				t.Fatalf("vars = %v, want %v", vars, tc.vars)
			}
		})
	}
}

func TestLookupNotImplemented(t *testing.T) {
	t.Parallel()
	s := load(t)
	tests := []struct{ method, path, msg string }{
		{"GET", "/foo", "Method 'GET /foo' not implemented"},
		{"POST", "/version", "Method 'POST /version' not implemented"},
		{"PUT", "/nodes/pve1/qemu/100/status/start", "Method 'PUT /nodes/pve1/qemu/100/status/start' not implemented"},
		{"GET", "/nodes/pve1/qemu/100/bogus", "Method 'GET /nodes/pve1/qemu/100/bogus' not implemented"},
		{"POST", "/nodes/pve1/lxc", "Method 'POST /nodes/pve1/lxc' not implemented"},
		{"GET", "/nodes/pve1/lxc/100/config", "Method 'GET /nodes/pve1/lxc/100/config' not implemented"},
		{"GET", "/nodes/pve 1/qemu", "Method 'GET /nodes/pve 1/qemu' not implemented"},
		{"GET", "/nodes/pve1/storage/local/content/local:iso/a b.iso", "Method 'GET /nodes/pve1/storage/local/content/local:iso/a b.iso' not implemented"},
	}
	for _, tc := range tests {
		t.Run(tc.method+tc.path, func(t *testing.T) {
			t.Parallel()
			_, _, err := s.Lookup(tc.method, tc.path)
			if !errors.Is(err, ErrNotImplemented) {
				t.Fatalf("err = %v, want ErrNotImplemented", err)
			}
			if err.Error() != tc.msg {
				t.Fatalf("message %q, want %q", err.Error(), tc.msg)
			}
		})
	}
}

func TestEndpointMetadata(t *testing.T) {
	t.Parallel()
	s := load(t)
	e, _ := endpoint(t, s, "POST", "/nodes/pve1/qemu/100/config")
	if e.Name != "update_vm_async" || !e.Protected || !e.AllowToken || e.ProxyTo != "node" {
		t.Fatalf("metadata = %+v", e)
	}
	// Every path the trim list keeps is in the schema with the methods it
	// names, and nothing else is.
	want := map[string]bool{}
	for _, entry := range apitrim.Paths {
		methods, path, ok := strings.Cut(entry, " ")
		if !ok {
			path, methods = entry, ""
		}
		if methods == "" {
			want[path] = true
			continue
		}
		for _, m := range strings.Split(methods, ",") {
			want[m+" "+path] = true
		}
	}
	for _, e := range s.Endpoints() {
		if !want[e.Method+" "+e.Path] && !want[e.Path] {
			t.Errorf("endpoint %s %s is not in apitrim.Paths", e.Method, e.Path)
		}
	}
	have := map[string]bool{}
	for _, e := range s.Endpoints() {
		have[e.Method+" "+e.Path], have[e.Path] = true, true
	}
	for k := range want {
		if !have[k] {
			t.Errorf("apitrim.Paths keeps %s, the schema has no such endpoint", k)
		}
	}
}

// validateErrs runs Validate and returns the error map (nil on success).
func validateErrs(t *testing.T, e *Endpoint, vars map[string]string, raw map[string][]string) (Params, map[string]string) {
	t.Helper()
	p, err := e.ValidateRequest(vars, raw)
	if err == nil {
		return p, nil
	}
	var pe *ParamError
	if !errors.As(err, &pe) {
		t.Fatalf("error %v is not a *ParamError", err)
	}
	if p != nil {
		t.Fatalf("params returned with an error: %v", p)
	}
	return nil, pe.Errors
}

func TestValidateConfig(t *testing.T) {
	t.Parallel()
	s := load(t)
	e, vars := endpoint(t, s, "POST", "/nodes/pve1/qemu/100/config")
	tests := []struct {
		name string
		raw  map[string][]string
		errs map[string]string
	}{
		{"net0 with model alias", map[string][]string{"net0": {"virtio=BC:24:11:00:00:01,bridge=vmbr0,firewall=1"}}, nil},
		{"net31 is the last", map[string][]string{"net31": {"virtio,bridge=vmbr0"}}, nil},
		{"net32 is unknown", map[string][]string{"net32": {"virtio,bridge=vmbr0"}}, map[string]string{"net32": msgNotInSchema}},
		{"leading zero index", map[string][]string{"net01": {"virtio,bridge=vmbr0"}}, map[string]string{"net01": msgNotInSchema}},
		{"scsi0 limits", map[string][]string{"scsi0": {"local-lvm:32,mbps_rd=100,mbps_wr=50.5,iops=2000,discard=on,ssd=1"}}, nil},
		{"scsi30 ok", map[string][]string{"scsi30": {"local-lvm:vm-100-disk-3"}}, nil},
		{"scsi31 unknown", map[string][]string{"scsi31": {"local-lvm:vm-100-disk-3"}}, map[string]string{"scsi31": msgNotInSchema}},
		{"virtio15 ok, virtio16 unknown", map[string][]string{"virtio15": {"local:1"}, "virtio16": {"local:1"}}, map[string]string{"virtio16": msgNotInSchema}},
		{"sata5 ok, sata6 unknown", map[string][]string{"sata5": {"local:1"}, "sata6": {"local:1"}}, map[string]string{"sata6": msgNotInSchema}},
		{"ide3 ok, ide4 unknown", map[string][]string{"ide3": {"none,media=cdrom"}, "ide4": {"none"}}, map[string]string{"ide4": msgNotInSchema}},
		{"ipconfig static", map[string][]string{"ipconfig0": {"ip=10.0.0.5/24,gw=10.0.0.1"}}, nil},
		{"ipconfig dhcp", map[string][]string{"ipconfig31": {"ip=dhcp"}}, nil},
		{"ipconfig v6", map[string][]string{"ipconfig1": {"ip6=fd00::5/64,gw6=fd00::1"}}, nil},
		{"ipconfig32 unknown", map[string][]string{"ipconfig32": {"ip=dhcp"}}, map[string]string{"ipconfig32": msgNotInSchema}},
		{"ipconfig bad ip", map[string][]string{"ipconfig0": {"ip=10.0.0.300/24"}},
			map[string]string{"ipconfig0": "invalid format - format error\nipconfig0.ip: invalid format - value does not look like a valid ipv4 network configuration\n"}},
		{"ipconfig unknown key", map[string][]string{"ipconfig0": {"ip=dhcp,dns=1.1.1.1"}},
			map[string]string{"ipconfig0": "invalid format - invalid key in comma-separated list property: dns\n"}},
		{"unused255 ok, unused256 unknown", map[string][]string{"unused255": {"local:vm-100-disk-9"}, "unused256": {"local:x"}}, map[string]string{"unused256": msgNotInSchema}},
		{"usb13 ok, usb14 unknown", map[string][]string{"usb13": {"spice"}, "usb14": {"spice"}}, map[string]string{"usb14": msgNotInSchema}},
		{"serial3 ok, serial4 unknown", map[string][]string{"serial3": {"socket"}, "serial4": {"socket"}}, map[string]string{"serial4": msgNotInSchema}},
		{"serial pattern", map[string][]string{"serial0": {"tcp"}}, map[string]string{"serial0": msgNoPattern}},
		{"hostpci15 ok, hostpci16 unknown", map[string][]string{"hostpci15": {"0000:01:00.0,pcie=1"}, "hostpci16": {"01:00.0"}}, map[string]string{"hostpci16": msgNotInSchema}},
		{"numa7 ok, numa8 unknown", map[string][]string{"numa7": {"cpus=0-3,memory=1024"}, "numa8": {"cpus=0"}}, map[string]string{"numa8": msgNotInSchema}},
		{"numa missing cpus", map[string][]string{"numa0": {"memory=1024"}}, map[string]string{"numa0": "invalid format - format error\nnuma0.cpus: property is missing and it is not optional\n"}},
		{"unknown parameter", map[string][]string{"foo": {"1"}}, map[string]string{"foo": msgNotInSchema}},
		{"integer type", map[string][]string{"cores": {"two"}}, map[string]string{"cores": "type check ('integer') failed - got 'two'"}},
		{"minimum", map[string][]string{"cores": {"0"}}, map[string]string{"cores": "value must have a minimum value of 1"}},
		{"memory as string", map[string][]string{"memory": {"2048"}}, nil},
		{"booleans are 0 or 1", map[string][]string{"onboot": {"1"}, "protection": {"0"}}, nil},
		{"boolean spellings refused at top level", map[string][]string{"onboot": {"true"}, "protection": {"off"}, "tablet": {"yes"}},
			map[string]string{"onboot": "type check ('boolean') failed - got 'true'", "protection": "type check ('boolean') failed - got 'off'", "tablet": "type check ('boolean') failed - got 'yes'"}},
		{"enum", map[string][]string{"ostype": {"plan9"}}, map[string]string{"ostype": "value 'plan9' does not have a value in the enumeration 'other, wxp, w2k, w2k3, w2k8, wvista, win7, win8, win10, win11, l24, l26, solaris'"}},
		{"maxLength", map[string][]string{"digest": {strings.Repeat("a", 41)}}, map[string]string{"digest": "value may only be 40 characters long"}},
		{"tags", map[string][]string{"tags": {"prod;web,db"}}, nil},
		{"bad tag", map[string][]string{"tags": {"a b;c$"}}, map[string]string{"tags": "invalid format - invalid characters in tag\n"}},
		{"name dns", map[string][]string{"name": {"web-01.example"}}, nil},
		{"name invalid", map[string][]string{"name": {"web_01"}}, map[string]string{"name": "invalid format - value does not look like a valid DNS name\n"}},
		{"delete list", map[string][]string{"delete": {"net1,scsi2;ide2"}}, nil},
		{"delete invalid", map[string][]string{"delete": {"net1,9x"}}, map[string]string{"delete": "invalid format - invalid configuration ID '9x'\n"}},
		{"cpu", map[string][]string{"cpu": {"host,flags=+aes;-pcid,hidden=1"}}, nil},
		{"cpu unknown model", map[string][]string{"cpu": {"pentium9"}}, map[string]string{"cpu": "invalid format - Built-in cputype 'pentium9' is not defined (missing 'custom-' prefix?)\n"}},
		{"repeated list values are joined", map[string][]string{"delete": {"net1", "scsi2"}}, nil},
		{"repeated list values checked", map[string][]string{"delete": {"net1", "-x"}}, map[string]string{"delete": "invalid format - invalid configuration ID '-x'\n"}},
		{"agent booleans inside property strings", map[string][]string{"agent": {"enabled=true,fstrim_cloned_disks=on"}}, nil},
		{"agent", map[string][]string{"agent": {"1,fstrim_cloned_disks=1"}}, nil},
		{"boot order", map[string][]string{"boot": {"order=scsi0;net0;ide2"}}, nil},
		{"boot order bad device", map[string][]string{"boot": {"order=scsi0;floppy"}}, map[string]string{"boot": "invalid format - format error\nboot.order: invalid format - invalid boot device 'floppy'\n"}},
		{"sshkeys urlencoded", map[string][]string{"sshkeys": {"ssh-ed25519%20AAAA%20me%40host"}}, nil},
		{"sshkeys raw", map[string][]string{"sshkeys": {"ssh-ed25519 AAAA me@host"}}, map[string]string{"sshkeys": "invalid format - invalid urlencoded string: ssh-ed25519 AAAA me@host\n"}},
		{"requires", map[string][]string{"force": {"1"}}, map[string]string{"delete": "missing property - 'force' requires this property"}},
		{"two values for a scalar", map[string][]string{"cores": {"1", "2"}}, map[string]string{"cores": "type check ('integer') failed - got ARRAY"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, errs := validateErrs(t, e, vars, tc.raw)
			if !reflect.DeepEqual(errs, tc.errs) {
				t.Fatalf("errors:\n got %#v\nwant %#v", errs, tc.errs)
			}
		})
	}
}

func TestValidateTypedParams(t *testing.T) {
	t.Parallel()
	s := load(t)
	e, vars := endpoint(t, s, "POST", "/nodes/pve1/qemu/100/config")
	p, errs := validateErrs(t, e, vars, map[string][]string{
		"cores": {"4"}, "onboot": {"1"}, "cpulimit": {"1.5"}, "net0": {"virtio,bridge=vmbr0"},
	})
	if errs != nil {
		t.Fatal(errs)
	}
	if v, ok := p.Int("cores"); !ok || v != 4 {
		t.Fatalf("cores = %v %v", v, ok)
	}
	if v, ok := p.Int("vmid"); !ok || v != 100 {
		t.Fatalf("vmid = %v %v", v, ok)
	}
	if v, ok := p.Bool("onboot"); !ok || !v {
		t.Fatalf("onboot = %v %v", v, ok)
	}
	if v, ok := p.Float("cpulimit"); !ok || v != 1.5 {
		t.Fatalf("cpulimit = %v %v", v, ok)
	}
	if v, ok := p.String("net0"); !ok || v != "virtio,bridge=vmbr0" {
		t.Fatalf("net0 = %v %v", v, ok)
	}
	if v, ok := p.String("node"); !ok || v != "pve1" {
		t.Fatalf("node = %v %v", v, ok)
	}
}

func TestValidateMissingAndPathVars(t *testing.T) {
	t.Parallel()
	s := load(t)
	e, _ := endpoint(t, s, "POST", "/nodes/pve1/qemu/100/clone")
	_, errs := validateErrs(t, e, map[string]string{"node": "pve1", "vmid": "100"}, nil)
	if want := map[string]string{"newid": msgMissing}; !reflect.DeepEqual(errs, want) {
		t.Fatalf("errors %v, want %v", errs, want)
	}
	_, errs = validateErrs(t, e, map[string]string{"node": "pve_1", "vmid": "99"}, map[string][]string{"newid": {"101"}})
	want := map[string]string{
		"node": "invalid format - value does not look like a valid node name\n",
		"vmid": "invalid format - value does not look like a valid VM ID\n",
	}
	if !reflect.DeepEqual(errs, want) {
		t.Fatalf("errors %#v, want %#v", errs, want)
	}
}

func TestParseProperty(t *testing.T) {
	t.Parallel()
	s := load(t)
	e, _ := endpoint(t, s, "POST", "/nodes/pve1/qemu/100/config")
	tests := []struct {
		param, value string
		want         Params
		err          string
	}{
		{"net0", "virtio=BC:24:11:00:00:01,bridge=vmbr0", Params{"model": "virtio", "macaddr": "BC:24:11:00:00:01", "bridge": "vmbr0"}, ""},
		{"net5", "e1000,bridge=vmbr1,tag=10,firewall=0,mtu=1500", Params{"model": "e1000", "bridge": "vmbr1", "tag": int64(10), "firewall": false, "mtu": int64(1500)}, ""},
		{"net0", "model=virtio,virtio=BC:24:11:00:00:01", nil, "invalid format - key alias 'model' is already defined\n"},
		{"net0", "virtio,e1000", nil, "invalid format - duplicate key in comma-separated list property: model\n"},
		{"net0", "bridge=vmbr0", nil, "invalid format - format error\nnet0.model: property is missing and it is not optional\n"},
		{"net0", "virtio,bridge=vmbr0,tag=5000", nil, "invalid format - format error\nnet0.tag: value must have a maximum value of 4094\n"},
		{"net0", "virtio=01:00:00:00:00:01", nil, "invalid format - format error\nnet0.macaddr: invalid format - value does not look like a valid unicast MAC address\n"},
		{"net0", "virtio,bridge=", nil, "invalid format - missing key in comma-separated list property\n"},
		{"scsi0", "local-lvm:32,mbps_rd=100,mbps_wr=50,iops=1000", Params{"file": "local-lvm:32", "mbps_rd": float64(100), "mbps_wr": float64(50), "iops": int64(1000)}, ""},
		{"scsi1", "file=local:vm-100-disk-1,cache=bogus", nil, "invalid format - format error\nscsi1.cache: value 'bogus' does not have a value in the enumeration 'none, writethrough, writeback, unsafe, directsync'\n"},
		{"scsi2", "local:1,size=abc", nil, "invalid format - format error\nscsi2.size: invalid format - value does not look like a valid disk size: abc\n"},
		{"ipconfig0", "ip=10.0.0.5/24,gw=10.0.0.1", Params{"ip": "10.0.0.5/24", "gw": "10.0.0.1"}, ""},
		{"ipconfig0", "ip=dhcp", Params{"ip": "dhcp"}, ""},
		{"ipconfig0", "ip=10.0.0.5/4", nil, "invalid format - format error\nipconfig0.ip: invalid format - value does not look like a valid ipv4 network configuration\n"},
		{"ipconfig0", "10.0.0.5/24", nil, "invalid format - value without key, but schema does not define a default key\n"},
		{"agent", "1", Params{"enabled": true}, ""},
		{"agent", "enabled=1,type=isa,guest-fsfreeze=0", Params{"enabled": true, "type": "isa", "freeze-fs": false}, ""},
		{"unused3", "local:vm-100-disk-3", Params{"file": "local:vm-100-disk-3"}, ""},
		{"cpu", "x86-64-v2-AES,phys-bits=host", Params{"cputype": "x86-64-v2-AES", "phys-bits": "host"}, ""},
		{"watchdog", "i6300esb,action=reset", Params{"model": "i6300esb", "action": "reset"}, ""},
		{"cdrom", "local:iso/debian.iso", Params{"file": "local:iso/debian.iso"}, ""},
	}
	for _, tc := range tests {
		t.Run(tc.param+"="+tc.value, func(t *testing.T) {
			t.Parallel()
			got, err := e.ParseProperty(tc.param, tc.value)
			if tc.err != "" {
				var pe *ParamError
				if !errors.As(err, &pe) {
					t.Fatalf("err = %v, want ParamError", err)
				}
				if pe.Errors[tc.param] != tc.err {
					t.Fatalf("message\n got %q\nwant %q", pe.Errors[tc.param], tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("got %#v, want %#v", got, tc.want)
			}
		})
	}
	if _, err := e.ParseProperty("cores", "1"); err == nil {
		t.Fatal("cores parsed as a property string")
	}
}

func TestIndexedRanges(t *testing.T) {
	t.Parallel()
	s := load(t)
	e, _ := endpoint(t, s, "POST", "/nodes/pve1/qemu/100/config")
	want := map[string]int{"net": 32, "ipconfig": 32, "scsi": 31, "virtio": 16, "sata": 6, "ide": 4,
		"unused": 256, "usb": 14, "serial": 4, "parallel": 3, "hostpci": 16, "numa": 8, "virtiofs": 10}
	for base, n := range want {
		if e.params.lookup(base+"0") == nil || e.params.lookup(base+itoa(n-1)) == nil {
			t.Errorf("%s0..%s%d not all defined", base, base, n-1)
		}
		if e.params.lookup(base+itoa(n)) != nil {
			t.Errorf("%s%d defined, want at most %d", base, n, n-1)
		}
	}
	j, _ := endpoint(t, s, "POST", "/cluster/config/join")
	if j.params.lookup("link7") == nil || j.params.lookup("link8") != nil {
		t.Error("cluster join: want link0..link7")
	}
}

func itoa(n int) string { return strconv.Itoa(n) }

func TestArrayParameter(t *testing.T) {
	t.Parallel()
	s := load(t)
	e, vars := endpoint(t, s, "POST", "/cluster/sdn/vnets/vnet1/subnets")
	raw := map[string][]string{
		"subnet": {"10.0.0.0/24"}, "type": {"subnet"}, "gateway": {"10.0.0.1"},
		"dhcp-range": {"start-address=10.0.0.100,end-address=10.0.0.150", "start-address=10.0.0.200,end-address=10.0.0.250"},
	}
	p, errs := validateErrs(t, e, vars, raw)
	if errs != nil {
		t.Fatal(errs)
	}
	r, ok := p.Strings("dhcp-range")
	if !ok || len(r) != 2 || r[1] != "start-address=10.0.0.200,end-address=10.0.0.250" {
		t.Fatalf("dhcp-range = %v %v", r, ok)
	}
	item, err := e.ParseProperty("dhcp-range", r[1])
	if err != nil || !reflect.DeepEqual(item, Params{"start-address": "10.0.0.200", "end-address": "10.0.0.250"}) {
		t.Fatalf("ParseProperty(dhcp-range) = %v, %v", item, err)
	}
	// Proxmox declares the range keys with type 'ip', which its type check does not know,
	// so only their presence is checked.
	raw["dhcp-range"] = []string{"start-address=10.0.0.100,end-address=10.0.0.150", "start-address=10.0.0.300"}
	_, errs = validateErrs(t, e, vars, raw)
	want := map[string]string{"dhcp-range[1]": "invalid format - format error\n" +
		"dhcp-range[1].end-address: property is missing and it is not optional\n"}
	if !reflect.DeepEqual(errs, want) {
		t.Fatalf("errors %#v, want %#v", errs, want)
	}
}

func TestParamErrorText(t *testing.T) {
	t.Parallel()
	err := &ParamError{Errors: map[string]string{"vmid": "invalid format - value does not look like a valid VM ID\n", "cores": "value must have a minimum value of 1"}}
	want := "Parameter verification failed.\ncores: value must have a minimum value of 1\nvmid: invalid format - value does not look like a valid VM ID"
	if err.Error() != want {
		t.Fatalf("got %q, want %q", err.Error(), want)
	}
}

// exampleParam builds a valid value for a required parameter from the format test cases.
func exampleParam(p *prop) string {
	switch {
	case len(p.Enum) > 0:
		return p.Enum[0]
	case p.Type == "integer" && p.Minimum != nil:
		return strconv.FormatInt(int64(*p.Minimum), 10)
	case p.Type == "integer" || p.Type == "number" || p.Type == "boolean":
		return "1"
	}
	// a "-list" format takes one element of its base format
	if tc, ok := formatCases[strings.TrimSuffix(p.Format, "-list")]; ok {
		for _, g := range tc.good {
			if g != "" {
				return g
			}
		}
	}
	for _, c := range []string{"x", "xy", "10G", "https://example.com/a.iso", strings.Repeat("AB:", 31) + "AB"} {
		if p.re == nil || p.re.MatchString(c) {
			return c
		}
	}
	return "x"
}

// TestEveryEndpointValidates checks every endpoint: its required parameters are reported
// missing from an empty request, a request with just them (built from the format cases)
// validates, and an extra parameter is refused.
func TestEveryEndpointValidates(t *testing.T) {
	t.Parallel()
	s := load(t)
	for _, e := range s.Endpoints() {
		raw := map[string][]string{}
		missing := map[string]string{}
		for name, p := range e.params.Properties {
			if p.Optional || strings.HasSuffix(name, "[n]") {
				continue
			}
			raw[name] = []string{exampleParam(p)}
			missing[name] = msgMissing
		}
		_, err := e.Validate(map[string][]string{})
		var pe *ParamError
		switch {
		case len(missing) == 0 && err != nil:
			t.Errorf("%s %s: empty request refused: %v", e.Method, e.Path, err)
		case len(missing) > 0 && (!errors.As(err, &pe) || !reflect.DeepEqual(pe.Errors, missing)):
			t.Errorf("%s %s: empty request: %v, want %v", e.Method, e.Path, err, missing)
		}
		if _, err := e.Validate(raw); err != nil {
			t.Errorf("%s %s: %v refused: %v", e.Method, e.Path, raw, err)
		}
		raw["no-such-param"] = []string{"1"}
		_, err = e.Validate(raw)
		if !errors.As(err, &pe) || !reflect.DeepEqual(pe.Errors, map[string]string{"no-such-param": msgNotInSchema}) {
			t.Errorf("%s %s: extra parameter: %v", e.Method, e.Path, err)
		}
	}
}

// TestLookupEveryEndpoint resolves a concrete path for every endpoint template.
func TestLookupEveryEndpoint(t *testing.T) {
	t.Parallel()
	s := load(t)
	sample := map[string]string{
		"node": "pve1", "vmid": "100", "storage": "local", "volume": "local:iso/debian-12.iso",
		"upid": "UPID:pve1:00001234:00005678:65000000:qmstart:100:root@pam:", "zone": "z1",
		"vnet": "v1", "subnet": "z1-10.0.0.0-24", "ipam": "pve", "poolid": "tenant-a",
		"snapname": "before-upgrade", "id": "100-0", "group": "db", "pos": "0", "name": "app-members", "cidr": "10.0.0.5",
		"sid": "vm:100", "rule": "apart",
	}
	for _, e := range s.Endpoints() {
		path := tmplVarRE.ReplaceAllStringFunc(e.Path, func(m string) string {
			v, ok := sample[m[1:len(m)-1]]
			if !ok {
				t.Fatalf("no sample for %s in %s", m, e.Path)
			}
			return v
		})
		got, vars, err := s.Lookup(e.Method, path)
		if err != nil || got != e {
			t.Errorf("Lookup(%s %s) = %v, %v; want %s", e.Method, path, got, err, e.Path)
			continue
		}
		for name, v := range vars {
			if sample[name] != v {
				t.Errorf("%s: var %s = %q, want %q", path, name, v, sample[name])
			}
		}
	}
}
