package pveschema

import (
	"errors"
	"reflect"
	"testing"
)

func TestFlattenJSON(t *testing.T) {
	t.Parallel()
	s := load(t)
	cfg, _ := endpoint(t, s, "POST", "/nodes/pve1/qemu/100/config")
	subnets, _ := endpoint(t, s, "POST", "/cluster/sdn/vnets/vnet1/subnets")
	tests := []struct {
		name string
		e    *Endpoint
		body string
		want map[string][]string
		errs map[string]string
	}{
		{"empty", cfg, ``, map[string][]string{}, nil},
		{"scalars", cfg, `{"cores": 4, "onboot": true, "protection": false, "cpulimit": 1.0, "balloon": 1e3, "name": "web", "description": null}`,
			map[string][]string{"cores": {"4"}, "onboot": {"1"}, "protection": {"0"}, "cpulimit": {"1"}, "balloon": {"1000"}, "name": {"web"}}, nil},
		{"list format array joined", cfg, `{"delete": ["net1", "scsi2"]}`, map[string][]string{"delete": {"net1,scsi2"}}, nil},
		{"array parameter", subnets, `{"dhcp-range": ["start-address=10.0.0.2,end-address=10.0.0.9"]}`,
			map[string][]string{"dhcp-range": {"start-address=10.0.0.2,end-address=10.0.0.9"}}, nil},
		{"array for a scalar", cfg, `{"cores": [1, 2]}`, nil, map[string]string{"cores": "type check ('integer') failed - got ARRAY"}},
		{"object", cfg, `{"net0": {"model": "virtio"}}`, nil, map[string]string{"net0": "type check ('string') failed - got HASH"}},
		{"boolean for a string", cfg, `{"name": true}`, nil, map[string]string{"name": "type check ('string') failed - got JSON::PP::Boolean"}},
		{"not an object", cfg, `[1]`, nil, map[string]string{"_root": "an object is required"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, err := tc.e.FlattenJSON([]byte(tc.body))
			if tc.errs != nil {
				var pe *ParamError
				if !errors.As(err, &pe) || !reflect.DeepEqual(pe.Errors, tc.errs) {
					t.Fatalf("err = %v, want %v", err, tc.errs)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("got %v, want %v", got, tc.want)
			}
		})
	}
	// A flattened go-proxmox style body validates.
	raw, err := cfg.FlattenJSON([]byte(`{"cores": 2, "onboot": true, "net0": "virtio,bridge=vmbr0"}`))
	if err != nil {
		t.Fatal(err)
	}
	p, err := cfg.ValidateRequest(map[string]string{"node": "pve1", "vmid": "100"}, raw)
	if err != nil {
		t.Fatal(err)
	}
	if b, _ := p.Bool("onboot"); !b {
		t.Fatalf("onboot = %v", p["onboot"])
	}
}
