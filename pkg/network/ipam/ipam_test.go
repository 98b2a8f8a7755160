package ipam_test

import (
	"errors"
	"net/netip"
	"sync"
	"testing"

	"github.com/flexplane/flexplane/pkg/dev/vmtest"
	"github.com/flexplane/flexplane/pkg/network/ipam"
	"github.com/flexplane/flexplane/pkg/tenancy"
)

func TestClaimRelease(t *testing.T) {
	t.Parallel()
	z := vmtest.StartZone(t, "alpha", 1)
	vmtest.AddNetwork(t, z, "blue", "lan", "10.5.0.0/29", "10.5.0.1")
	ctx := vmtest.Ctx(t)
	s := ipam.Subnet{Zone: tenancy.SDNZoneID("blue"), VNet: tenancy.VNetID("blue", "lan"),
		Prefix: netip.MustParsePrefix("10.5.0.0/29"), Gateway: netip.MustParseAddr("10.5.0.1")}

	for _, a := range []string{"10.5.0.0", "10.5.0.1", "10.5.0.7", "10.6.0.2"} {
		if _, err := ipam.Claim(ctx, z.Client, s, netip.MustParseAddr(a), ipam.NewMAC()); !errors.Is(err, ipam.ErrReserved) {
			t.Errorf("claim %s: %v, want ErrReserved", a, err)
		}
	}
	mac := ipam.NewMAC()
	if !ipam.IsFlexplaneMAC(mac) || ipam.IsFlexplaneMAC("BC:24:11:00:00:01") {
		t.Errorf("IsFlexplaneMAC wrong for %s", mac)
	}
	got, err := ipam.Claim(ctx, z.Client, s, netip.MustParseAddr("10.5.0.4"), mac)
	if err != nil || got.String() != "10.5.0.4" {
		t.Fatalf("static claim: %v, %v", got, err)
	}
	if _, err := ipam.Claim(ctx, z.Client, s, netip.MustParseAddr("10.5.0.4"), ipam.NewMAC()); !errors.Is(err, ipam.ErrTaken) {
		t.Fatalf("second claim: %v, want ErrTaken", err)
	}
	// Automatic claims race for the 4 free addresses (.2 .3 .5 .6).
	var wg sync.WaitGroup
	var mu sync.Mutex
	seen := map[netip.Addr]bool{}
	exhausted := 0
	for range 8 {
		wg.Go(func() {
			a, err := ipam.Claim(ctx, z.Client, s, netip.Addr{}, ipam.NewMAC())
			mu.Lock()
			defer mu.Unlock()
			switch {
			case errors.Is(err, ipam.ErrExhausted):
				exhausted++
			case err != nil:
				t.Errorf("auto claim: %v", err)
			case seen[a]:
				t.Errorf("%s handed out twice", a)
			default:
				seen[a] = true
			}
		})
	}
	wg.Wait()
	if len(seen) != 4 || exhausted != 4 {
		t.Fatalf("%d claimed (%v), %d exhausted; want 4 and 4", len(seen), seen, exhausted)
	}
	if err := ipam.Assign(ctx, z.Client, s.Zone, s.VNet, got, mac, 123); err != nil {
		t.Fatal(err)
	}
	// A release under another MAC leaves the mapping; the right one frees it.
	if err := ipam.Release(ctx, z.Client, s.Zone, s.VNet, got, ipam.NewMAC()); err != nil {
		t.Fatal(err)
	}
	ms, err := ipam.Mappings(ctx, z.Client)
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, m := range ms {
		if m.IP == "10.5.0.4" {
			found = m.VMID == 123
		}
	}
	if !found {
		t.Fatalf("mapping of 10.5.0.4 with vmid 123 missing: %+v", ms)
	}
	if err := ipam.Release(ctx, z.Client, s.Zone, s.VNet, got, mac); err != nil {
		t.Fatal(err)
	}
	if err := ipam.ReleaseMACs(ctx, z.Client, []string{mac}); err != nil {
		t.Fatalf("releasing again: %v", err)
	}
	if a, err := ipam.Claim(ctx, z.Client, s, netip.Addr{}, ipam.NewMAC()); err != nil || a.String() != "10.5.0.4" {
		t.Fatalf("claim after release: %v, %v; want 10.5.0.4", a, err)
	}
}
