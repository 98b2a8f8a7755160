package network

import (
	"errors"
	"strings"
	"testing"

	"github.com/flexplane/flexplane/pkg/pvesim/pveschema"
	"github.com/flexplane/flexplane/pkg/tenancy"
)

// FuzzSpecValidate checks the validation of createNetwork's input (name,
// CIDR, gateway; testdata/fuzz/FuzzSpecValidate). It is deterministic and
// every refusal is an *InputError naming a field. What it accepts is an
// IPv4 network address of an allowed length whose canonical form is the
// CIDR given, with a gateway inside it that is neither its network nor its
// broadcast address, and the canonical forms validate to the same result.
// Proxmox's own schema (pkg/pvesim/pveschema) accepts the subnet flexplane
// creates from it, so Proxmox never refuses what flexplane let through.
func FuzzSpecValidate(f *testing.F) {
	schema, err := pveschema.Load()
	if err != nil {
		f.Fatal(err)
	}
	vnet := tenancy.VNetID("red", "web")
	subnets, vars, err := schema.Lookup("POST", "/cluster/sdn/vnets/"+vnet+"/subnets")
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, name, cidr, gateway string) {
		s := Spec{VDC: "red", Name: name, CIDR: cidr, Gateway: gateway}
		pfx, gw, err := s.Validate()
		pfx2, gw2, err2 := s.Validate()
		if pfx != pfx2 || gw != gw2 || (err == nil) != (err2 == nil) {
			t.Fatalf("Validate(%+v) is not deterministic", s)
		}
		if err != nil {
			var ie *InputError
			if !errors.As(err, &ie) || (ie.Field != "name" && ie.Field != "cidr" && ie.Field != "gateway") || ie.Message == "" {
				t.Fatalf("Validate(%+v) = %v, not an *InputError of a field", s, err)
			}
			return
		}
		if !nameRE.MatchString(name) || len(name) > 40 {
			t.Fatalf("Validate accepted the name %q", name)
		}
		if pfx.String() != strings.TrimSpace(cidr) {
			t.Fatalf("Validate accepted %q as %s, not its canonical form", cidr, pfx)
		}
		if !pfx.Addr().Is4() || pfx.Masked() != pfx || pfx.Bits() < minBits || pfx.Bits() > maxBits {
			t.Fatalf("Validate accepted %q as %s", cidr, pfx)
		}
		if !gw.Is4() || !pfx.Contains(gw) || gw == pfx.Addr() || gw == broadcast(pfx) {
			t.Fatalf("Validate accepted gateway %q (%s) in %s", gateway, gw, pfx)
		}
		if b := broadcast(pfx); !pfx.Contains(b) || pfx.Contains(b.Next()) {
			t.Fatalf("broadcast(%s) = %s is not the last address", pfx, broadcast(pfx))
		}
		canon := Spec{VDC: s.VDC, Name: name, CIDR: pfx.String(), Gateway: gw.String()}
		if p3, g3, err := canon.Validate(); err != nil || p3 != pfx || g3 != gw {
			t.Fatalf("the canonical %+v validates to %s, %s, %v", canon, p3, g3, err)
		}
		if _, err := subnets.ValidateRequest(vars, map[string][]string{
			"subnet": {pfx.String()}, "type": {"subnet"}, "gateway": {gw.String()},
		}); err != nil {
			t.Fatalf("%+v is accepted, but Proxmox refuses its subnet: %v", s, err)
		}
	})
}
