package compute

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/flexplane/flexplane/pkg/catalog"
	"github.com/flexplane/flexplane/pkg/network/ipam"
	"github.com/flexplane/flexplane/pkg/proxmox/pveapi"
	"github.com/flexplane/flexplane/pkg/tenancy"
	"github.com/flexplane/flexplane/pkg/tenancy/quota"
)

// Recover looks at every zone once: each unfinished create that no
// runner of this process works on and whose intent is older than
// StaleAfter is finished from its intent (or, if that fails, its guest is
// deleted and its addresses released); flexplane IPAM mappings whose MAC
// no guest has are released once they have been seen so for OrphanGrace.
func (s *Service) Recover(ctx context.Context) error {
	return recovery{s.d}.pass(ctx)
}

// recovery is Recover's pass over the zones: what it finds unfinished it
// gives to the recovery hook of the operation that left it.
type recovery struct{ *deps }

// pass is one Recover.
func (r recovery) pass(ctx context.Context) error {
	var errs []error
	onGuests := map[string]bool{} // intent ops a guest carries
	listed := map[string]bool{}   // zone IDs whose guests were all read
	for _, z := range r.cfg.Zones.Zones(ctx) {
		if err := r.zone(ctx, z, onGuests); err != nil {
			errs = append(errs, fmt.Errorf("zone %s: %w", z.Name, err))
			continue
		}
		listed[z.ID] = true
	}
	if err := r.releaseStale(ctx, onGuests, listed); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// releaseStale drops the quota reservations of creates that ended before
// their guest existed without releasing them (their process killed between
// the reservation and the clone): older than StaleAfter, of a zone whose
// guests were all read and none of which carries the create's intent, and
// of no create this process runs. Until then they count, as the create
// would, and expire after QuotaTTL at the latest.
func (r recovery) releaseStale(ctx context.Context, onGuests, listed map[string]bool) error {
	vdcs, err := catalog.List[*catalog.VDC](ctx, r.cfg.Catalog)
	if err != nil {
		return fmt.Errorf("stale reservations: %w", err)
	}
	ttl := cmp.Or(r.cfg.QuotaTTL, quota.DefaultTTL)
	var errs []error
	for _, v := range vdcs {
		for _, res := range v.Status.Reservations {
			created := res.Expires.Add(-ttl)
			if res.Snapshot != "" || !listed[res.Zone] || onGuests[res.ID] || time.Since(created) < r.cfg.StaleAfter || r.eng.createLive(res.ID) {
				continue
			}
			r.log.Info("releasing the quota of a create that died before its guest existed", "vdc", v.Name, "op", res.ID, "reserved", created)
			if err := r.quota.Release(ctx, v.Name, res.ID); err != nil {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}

// indexMovedGuests refreshes the index of guests that moved across zones
// from every zone in reach, and nothing else.
func (r recovery) indexMovedGuests(ctx context.Context) error {
	var errs []error
	for _, z := range r.cfg.Zones.Zones(ctx) {
		guests, err := pveapi.Guests(ctx, z.Client)
		if err != nil {
			errs = append(errs, fmt.Errorf("zone %s: %w", z.Name, err))
			continue
		}
		r.moved.index(z, guests)
	}
	return errors.Join(errs...)
}

// zone is the pass over zone z.
func (r recovery) zone(ctx context.Context, z Zone, onGuests map[string]bool) error {
	guests, err := pveapi.Guests(ctx, z.Client)
	if err != nil {
		return err
	}
	r.moved.index(z, guests)
	r.ha.observe(ctx, r.deps, z, guests)
	used := map[string]bool{}
	for _, g := range guests {
		if !g.HasTag(tenancy.ManagedTag) || g.Template == 1 {
			continue
		}
		cfg, err := pveapi.GuestConfig(ctx, z.Client, g.Node, g.VMID)
		if err != nil {
			continue // gone meanwhile
		}
		for i := range MaxNICs {
			if m := macRE.FindString(cfg.Str("net" + strconv.Itoa(i))); m != "" {
				used[strings.ToUpper(m)] = true
			}
		}
		in, ok := ParseIntent(cfg.Str("description"))
		if !ok {
			continue
		}
		onGuests[in.Op] = true
		for _, n := range in.NICs {
			used[strings.ToUpper(n.MAC)] = true
		}
		for _, h := range recoveryHooks(r.deps) {
			if h.takes(z, g, in) {
				h.run(ctx, z, g, cfg, in)
				break
			}
		}
	}
	return r.releaseOrphans(ctx, z, used)
}

// recoveryHook is what Recover does with a guest an operation left
// unfinished (one that carries its intent): an operation that can be left
// so adds one.
type recoveryHook struct {
	// name says which operation the hook finishes.
	name string
	// takes reports whether the hook takes guest g of zone z (as Proxmox
	// lists it) with its intent.
	takes func(z Zone, g pveapi.Resource, in *Intent) bool
	// run finishes (or undoes) the operation; cfg is the guest's config.
	run func(ctx context.Context, z Zone, g pveapi.Resource, cfg pveapi.Config, in *Intent)
}

// recoveryHooks are Recover's hooks over d; the first that takes a guest
// runs.
//
//   - move: the target of a move across zones (marked incoming) is
//     finished or undone by recoverMove (crosszone.go);
//   - create: a create whose intent is older than StaleAfter and that no
//     runner of this process works on is finished, from its configure
//     phase, or cleaned up (adoptCreate, create.go);
//   - resize: a resize that reboots the VM whose process died before the
//     reboot ended is rebooted if needed and finished (vm_resize.go).
func recoveryHooks(d *deps) []recoveryHook {
	return []recoveryHook{
		{
			name:  "move",
			takes: func(_ Zone, g pveapi.Resource, in *Intent) bool { return in.Move != nil && g.HasTag(incomingTag) },
			run: func(ctx context.Context, z Zone, g pveapi.Resource, cfg pveapi.Config, in *Intent) {
				g.RawTags = cfg.Str("tags")
				recoverMove(ctx, d, z, g, in)
			},
		},
		{
			name: "create",
			takes: func(z Zone, g pveapi.Resource, in *Intent) bool {
				return isCreating(g) && !d.eng.isLive(z, g.VMID) && time.Since(in.Created) >= d.cfg.StaleAfter
			},
			run: func(ctx context.Context, z Zone, g pveapi.Resource, _ pveapi.Config, in *Intent) {
				adoptCreate(ctx, d, z, g.VMID, in)
			},
		},
		resizeHook(d),
	}
}

// releaseOrphans releases the flexplane IPAM mappings of zone z whose MAC
// no guest uses (not in used), once seen so for OrphanGrace.
func (r recovery) releaseOrphans(ctx context.Context, z Zone, used map[string]bool) error {
	maps, err := ipam.Mappings(ctx, z.Client)
	if err != nil {
		return err
	}
	now := time.Now()
	var errs []error
	seen := map[string]bool{}
	for _, m := range maps {
		mac := strings.ToUpper(m.MAC)
		if m.Gateway != 0 || !ipam.IsFlexplaneMAC(mac) || used[mac] {
			continue
		}
		key := z.ID + "/" + m.Zone + "/" + m.IP + "/" + mac
		first, pending := r.addrs.seen(key, mac, now)
		if pending {
			continue
		}
		seen[key] = true
		if now.Sub(first) < r.cfg.OrphanGrace {
			continue
		}
		r.log.Info("releasing an orphaned address", "zone", z.Name, "ip", m.IP, "mac", mac)
		errs = append(errs, ipam.ReleaseMACs(ctx, z.Client, []string{mac}))
	}
	r.addrs.forget(z.ID, seen)
	return errors.Join(errs...)
}

// addressBook is what Recover must know of IPAM mappings besides Proxmox:
// the MACs this process claimed addresses under whose guests do not exist
// yet (pending: not orphans), and when each flexplane mapping without a
// guest was first seen (orphans, released after a grace period).
type addressBook struct {
	mu      sync.Mutex
	pending map[string]bool      // upper-case MAC -> claimed; protected by mu
	orphans map[string]time.Time // "zone/ip/mac" -> first seen without a guest; protected by mu
}

func newAddressBook() *addressBook {
	return &addressBook{pending: map[string]bool{}, orphans: map[string]time.Time{}}
}

// hold marks MACs as claimed by a runner whose guest does not exist yet.
func (a *addressBook) hold(macs ...string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, m := range macs {
		a.pending[strings.ToUpper(m)] = true
	}
}

// drop ends the hold of MACs.
func (a *addressBook) drop(macs ...string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, m := range macs {
		delete(a.pending, strings.ToUpper(m))
	}
}

// seen records the orphan key (of upper-case MAC mac) seen at now unless
// the MAC is pending; it returns when the orphan was first seen.
func (a *addressBook) seen(key, mac string, now time.Time) (first time.Time, pending bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.pending[mac] {
		return time.Time{}, true
	}
	first, known := a.orphans[key]
	if !known {
		a.orphans[key], first = now, now
	}
	return first, false
}

// forget drops the orphans of zone zoneID not in seen (released, or used
// after all).
func (a *addressBook) forget(zoneID string, seen map[string]bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for k := range a.orphans {
		if strings.HasPrefix(k, zoneID+"/") && !seen[k] {
			delete(a.orphans, k)
		}
	}
}
