package pveschema

import (
	"errors"
	"testing"
)

// fuzzSeeds are (parameter, value) pairs for the VM config endpoint; `go test` runs them as
// a normal test, `go test -fuzz FuzzValidate` explores from them.
var fuzzSeeds = [][2]string{
	{"net0", "virtio=BC:24:11:00:00:01,bridge=vmbr0,firewall=1"},
	{"net0", "virtio,e1000"},
	{"net0", "=,=,"},
	{"net31", ",,,"},
	{"scsi0", "local-lvm:32,mbps_rd=100,mbps_wr=50,iops=2000"},
	{"scsi0", "file=,size=1G"},
	{"ipconfig0", "ip=10.0.0.5/24,gw=10.0.0.1"},
	{"ipconfig0", "ip=dhcp"},
	{"ipconfig0", "ip6=fd00::/4"},
	{"cpu", "host,flags=+aes;-pcid"},
	{"boot", "order=scsi0;net0"},
	{"agent", "1,type=isa"},
	{"numa0", "cpus=0-3;4-7,hostnodes=0,memory=1024,policy=bind"},
	{"hostpci0", "0000:01:00.0,pcie=1"},
	{"usb0", "spice"},
	{"smbios1", "uuid=6c1b2d4e-8f3a-4b5c-9d6e-7f8a9b0c1d2e"},
	{"tags", "a;b;c"},
	{"delete", "net0,scsi1"},
	{"cores", "-9223372036854775809"},
	{"memory", "1e400"},
	{"onboot", "On"},
	{"vmgenid", "1"},
	{"startup", "order=1,up=\x00"},
	{"name", "\xff\xfe"},
	{"net99999999999999999999", "x"},
	{"", ""},
}

func FuzzValidate(f *testing.F) {
	s, err := loadShared()
	if err != nil {
		f.Fatal(err)
	}
	e, vars, err := s.Lookup("POST", "/nodes/pve1/qemu/100/config")
	if err != nil {
		f.Fatal(err)
	}
	for _, seed := range fuzzSeeds {
		f.Add(seed[0], seed[1])
	}
	f.Fuzz(func(t *testing.T, param, value string) {
		p, err := e.ValidateRequest(vars, map[string][]string{param: {value}})
		if err != nil {
			var pe *ParamError
			if !errors.As(err, &pe) || len(pe.Errors) == 0 || p != nil {
				t.Fatalf("Validate(%q=%q) = %v, %v", param, value, p, err)
			}
		} else if _, ok := p[param]; !ok && param != "node" && param != "vmid" {
			t.Fatalf("Validate(%q=%q) accepted but dropped the parameter", param, value)
		}
		pp, err := e.ParseProperty(param, value)
		if err == nil && pp == nil {
			t.Fatalf("ParseProperty(%q, %q) returned nothing", param, value)
		}
	})
}

func FuzzLookup(f *testing.F) {
	s, err := loadShared()
	if err != nil {
		f.Fatal(err)
	}
	for _, p := range []string{"/", "//", "/nodes/pve1/storage/local/content/a/b/c", "/nodes/{node}", "/cluster/sdn/vnets/v/subnets/s/x"} {
		f.Add("GET", p)
	}
	f.Fuzz(func(t *testing.T, method, path string) {
		e, vars, err := s.Lookup(method, path)
		if err != nil {
			if !errors.Is(err, ErrNotImplemented) {
				t.Fatalf("Lookup(%q, %q): %v", method, path, err)
			}
			return
		}
		if e == nil || vars == nil || e.Method != method {
			t.Fatalf("Lookup(%q, %q) = %v, %v", method, path, e, vars)
		}
	})
}
