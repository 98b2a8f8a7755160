package ipam

import (
	"fmt"
	"net/netip"
	"testing"

	"github.com/flexplane/flexplane/pkg/pvesim/pveschema"
)

// FuzzAssignable checks which addresses of a subnet a guest may be given
// (the static addresses clients ask for; testdata/fuzz/FuzzAssignable): an
// assignable address lies inside the subnet and is not its network,
// gateway or (IPv4) broadcast address; the subnet's last address is inside
// it and the one after is not. Proxmox's own schema (pkg/pvesim/pveschema)
// accepts the NIC and ipconfig a VM gets with an assignable IPv4 address
// (of a prefix of 8 to 32 bits, as Proxmox requires; pkg/network creates
// 8 to 29) and a MAC of NewMAC.
func FuzzAssignable(f *testing.F) {
	schema, err := pveschema.Load()
	if err != nil {
		f.Fatal(err)
	}
	config, vars, err := schema.Lookup("POST", "/nodes/pve1/qemu/100/config")
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, prefix, gateway, addr string) {
		p, err := netip.ParsePrefix(prefix)
		if err != nil {
			return
		}
		gw, _ := netip.ParseAddr(gateway)
		a, err := netip.ParseAddr(addr)
		if err != nil {
			return
		}
		s := Subnet{Zone: "z", VNet: "v", Prefix: p, Gateway: gw}
		m := p.Masked()
		last := lastAddr(p)
		if !m.Contains(last) || m.Contains(last.Next()) {
			t.Fatalf("lastAddr(%s) = %s is not the last address of %s", p, last, m)
		}
		ok := s.Assignable(a)
		if ok != s.Assignable(a) {
			t.Fatalf("Assignable(%s) in %+v is not deterministic", a, s)
		}
		if !ok {
			return
		}
		if !m.Contains(a) || a == m.Addr() || a == gw || a.Is4() && m.Bits() < 31 && a == last {
			t.Fatalf("Assignable(%s) in %s (gateway %s) is true", a, p, gw)
		}
		if !a.Is4() || !gw.Is4() || p.Bits() < 8 {
			return // Proxmox's ipconfig takes IPv4 prefixes of 8 to 32 bits
		}
		mac := NewMAC()
		nic := map[string][]string{
			"net0":      {"virtio=" + mac + ",bridge=nabcdefg"},
			"ipconfig0": {fmt.Sprintf("ip=%s/%d,gw=%s", a, p.Bits(), gw)},
		}
		if _, err := config.ValidateRequest(vars, nic); err != nil || !IsFlexplaneMAC(mac) {
			t.Fatalf("%s in %s gives a NIC Proxmox refuses (%v): %v", a, p, nic, err)
		}
	})
}
