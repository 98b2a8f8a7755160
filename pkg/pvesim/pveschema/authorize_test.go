package pveschema

import (
	"errors"
	"testing"
)

// acl is a test privilege table: path -> privileges held exactly there.
type acl map[string][]string

func (a acl) has(path, priv string) bool {
	for _, p := range a[path] {
		if p == priv {
			return true
		}
	}
	return false
}

func TestAuthorize(t *testing.T) {
	t.Parallel()
	s := load(t)
	tests := []struct {
		name         string
		method, path string
		raw          map[string][]string
		acl          acl
		err          string // "" = allowed
	}{
		{"user all", "GET", "/version", nil, acl{}, ""},
		{"perm allowed", "GET", "/nodes/pve1/qemu/100/status/current", nil, acl{"/vms/100": {"VM.Audit"}}, ""},
		{"perm denied", "GET", "/nodes/pve1/qemu/100/status/current", nil, acl{"/vms/101": {"VM.Audit"}},
			"Permission check failed (/vms/100, VM.Audit)"},
		{"perm power", "POST", "/nodes/pve1/qemu/100/status/start", nil, acl{"/vms/100": {"VM.Audit"}},
			"Permission check failed (/vms/100, VM.PowerMgmt)"},
		{"any of several", "POST", "/nodes/pve1/qemu/100/config", map[string][]string{"cores": {"2"}}, acl{"/vms/100": {"VM.Config.CPU"}}, ""},
		{"none of several", "POST", "/nodes/pve1/qemu/100/config", map[string][]string{"cores": {"2"}}, acl{"/vms/100": {"VM.Audit"}},
			"Permission check failed (/vms/100, VM.Config.Disk|VM.Config.CDROM|VM.Config.CPU|VM.Config.Memory|VM.Config.Network|VM.Config.HWType|VM.Config.Options|VM.Config.Cloudinit)"},
		{"and/or: clone to new id", "POST", "/nodes/pve1/qemu/100/clone", map[string][]string{"newid": {"200"}},
			acl{"/vms/100": {"VM.Clone"}, "/vms/200": {"VM.Allocate"}}, ""},
		{"and/or: clone into pool", "POST", "/nodes/pve1/qemu/100/clone", map[string][]string{"newid": {"200"}, "pool": {"tenant-a"}},
			acl{"/vms/100": {"VM.Clone"}, "/pool/tenant-a": {"VM.Allocate"}}, ""},
		{"and/or: require_param missing", "POST", "/nodes/pve1/qemu/100/clone", map[string][]string{"newid": {"200"}},
			acl{"/vms/100": {"VM.Clone"}, "/pool/tenant-a": {"VM.Allocate"}}, "Permission check failed"},
		{"and: first operand fails", "POST", "/nodes/pve1/qemu/100/clone", map[string][]string{"newid": {"200"}},
			acl{"/vms/200": {"VM.Allocate"}}, "Permission check failed (/vms/100, VM.Clone)"},
		{"download-url via Sys.AccessNetwork", "POST", "/nodes/pve1/storage/local/download-url",
			map[string][]string{"content": {"iso"}, "filename": {"d.iso"}, "url": {"https://example.com/d.iso"}},
			acl{"/storage/local": {"Datastore.AllocateTemplate"}, "/nodes/pve1": {"Sys.AccessNetwork"}}, ""},
		{"download-url via Sys.Modify on /", "POST", "/nodes/pve1/storage/local/download-url",
			map[string][]string{"content": {"iso"}, "filename": {"d.iso"}, "url": {"https://example.com/d.iso"}},
			acl{"/storage/local": {"Datastore.AllocateTemplate"}, "/": {"Sys.Audit", "Sys.Modify"}}, ""},
		{"download-url: perm without any needs every privilege", "POST", "/nodes/pve1/storage/local/download-url",
			map[string][]string{"content": {"iso"}, "filename": {"d.iso"}, "url": {"https://example.com/d.iso"}},
			acl{"/storage/local": {"Datastore.AllocateTemplate"}, "/": {"Sys.Modify"}}, "Permission check failed"},
		{"download-url without network access", "POST", "/nodes/pve1/storage/local/download-url",
			map[string][]string{"content": {"iso"}, "filename": {"d.iso"}, "url": {"https://example.com/d.iso"}},
			acl{"/storage/local": {"Datastore.AllocateTemplate"}}, "Permission check failed"},
		{"root only", "POST", "/cluster/config/join",
			map[string][]string{"hostname": {"10.0.0.1"}, "fingerprint": {"AA:BB:CC:DD:EE:FF:00:11:22:33:44:55:66:77:88:99:AA:BB:CC:DD:EE:FF:00:11:22:33:44:55:66:77:88:99"}, "password": {"x"}},
			acl{"/": {"Sys.Modify"}}, "Permission check failed"},
		{"sdn path", "POST", "/cluster/sdn/zones", map[string][]string{"type": {"simple"}, "zone": {"z1"}}, acl{"/sdn/zones": {"SDN.Allocate"}}, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e, vars := endpoint(t, s, tc.method, tc.path)
			p, err := e.ValidateRequest(vars, tc.raw)
			if err != nil {
				t.Fatalf("Validate: %v", err)
			}
			err = e.Authorize(p, tc.acl.has)
			if tc.err == "" {
				if err != nil {
					t.Fatalf("denied: %v", err)
				}
				return
			}
			var pe *PermissionError
			if !errors.As(err, &pe) {
				t.Fatalf("err = %v, want *PermissionError", err)
			}
			if pe.Error() != tc.err {
				t.Fatalf("message %q, want %q", pe.Error(), tc.err)
			}
		})
	}
}

func TestTemplateReplace(t *testing.T) {
	t.Parallel()
	tests := []struct {
		tmpl string
		p    Params
		want string
	}{
		{"/vms/{vmid}", Params{"vmid": int64(100)}, "/vms/100"},
		{"/pool/{pool}", Params{}, "/pool/-"},
		{"/sdn/zones/{zone}/{vnet}", Params{"zone": "z1", "vnet": "v1"}, "/sdn/zones/z1/v1"},
		{"//storage/{storage}/", Params{"storage": "local"}, "/storage/local"},
		{"/vms/{vmid}", Params{"vmid": "0"}, "/vms/-"},
	}
	for _, tc := range tests {
		if got := normalizePath(templateReplace(tc.tmpl, tc.p)); got != tc.want {
			t.Errorf("%s: got %s, want %s", tc.tmpl, got, tc.want)
		}
	}
}

// TestAuthorizeUnnormalizablePath: a path with characters ACL paths cannot hold grants
// nothing, like Proxmox's normalize_path returning undef.
func TestAuthorizeUnnormalizablePath(t *testing.T) {
	t.Parallel()
	s := load(t)
	e, _ := endpoint(t, s, "GET", "/nodes/pve1/qemu/100/status/current")
	called := false
	err := e.Authorize(Params{"vmid": "1 0"}, func(string, string) bool { called = true; return true })
	var pe *PermissionError
	if !errors.As(err, &pe) || pe.Error() != "Permission check failed (, VM.Audit)" || called {
		t.Fatalf("err = %v, has called = %v", err, called)
	}
}
