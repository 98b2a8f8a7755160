package compute

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/flexplane/flexplane/pkg/catalog"
	"github.com/flexplane/flexplane/pkg/network/ipam"
	"github.com/flexplane/flexplane/pkg/proxmox/pveapi"
	"github.com/flexplane/flexplane/pkg/tenancy"
	"github.com/flexplane/flexplane/pkg/tenancy/quota"
)

// Recover looks at every zone once, reading the config of every managed
// guest: each unfinished create that no runner of this process works on
// and whose intent is older than StaleAfter is finished from its intent
// (or, if that fails, its guest is deleted and its addresses released);
// flexplane IPAM mappings whose MAC no guest has are released once they
// have been seen so for OrphanGrace. Run's passes do the same but read
// only the configs that may have changed (seenConfigs).
func (s *Service) Recover(ctx context.Context) error {
	return recovery{deps: s.d}.pass(ctx, true)
}

// recovery is Recover's pass over the zones: what it finds unfinished it
// gives to the recovery hook of the operation that left it.
type recovery struct {
	*deps
	// listed, when set, is given each zone's listing of guests the pass
	// read, so that other leader work of the same tick reads it rather
	// than asking the zone again.
	listed func(z Zone, guests []pveapi.Resource)
}

// pass is one Recover; full reads every managed guest's config, else only
// those seenConfigs says may have changed (and every one of a zone whose
// resync is due).
func (r recovery) pass(ctx context.Context, full bool) error {
	var errs []error
	onGuests := map[string]bool{} // intent ops a guest carries
	listed := map[string]bool{}   // zone IDs whose guests were all read
	for _, z := range r.cfg.Zones.Zones(ctx) {
		if err := r.zone(ctx, z, onGuests, full || r.seen.resyncDue(z.ID, r.cfg.RecoverResyncInterval)); err != nil {
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

// zone is the pass over zone z; full reads every managed guest's config,
// else only those that may have changed since the last pass read them.
func (r recovery) zone(ctx context.Context, z Zone, onGuests map[string]bool, full bool) error {
	guests, err := pveapi.Guests(ctx, z.Client)
	if err != nil {
		return err
	}
	if r.listed != nil {
		r.listed(z, guests)
	}
	r.moved.index(z, guests)
	r.ha.observe(ctx, r.deps, z, guests)
	hooks := recoveryHooks(r.deps)
	used := map[string]bool{}
	read := map[int]guestConfig{}
	kept := false   // some of used is from an earlier pass
	changed := full // a config was read
	for _, g := range guests {
		if !managedGuest(g) {
			continue
		}
		if c, ok := r.seen.unchanged(z.ID, g); ok && !full {
			read[g.VMID], kept = c, true
			for m := range strings.SplitSeq(c.macs, ",") {
				if m != "" {
					used[m] = true
				}
			}
			if c.op != "" {
				onGuests[c.op] = true
			}
			continue
		}
		changed = true
		cfg, in, err := guestIntent(ctx, z, g)
		if err != nil {
			continue // gone meanwhile
		}
		for _, m := range macsOf(cfg, in) {
			used[m] = true
		}
		watched := slices.ContainsFunc(hooks, func(h recoveryHook) bool { return h.watch(g, in) })
		read[g.VMID] = seenConfig(g, cfg, in, watched)
		if in == nil {
			continue
		}
		onGuests[in.Op] = true
		for _, h := range hooks {
			if h.takes(z, g, in) {
				h.run(ctx, z, g, cfg, in)
				break
			}
		}
	}
	if gone := r.seen.set(z.ID, read, full); !changed && !gone {
		// No guest came, changed or went: no address can have become an
		// orphan since the last pass; the IPAM is read again at the next
		// change or full pass.
		return nil
	}
	var confirm func() (map[string]bool, error)
	if kept {
		confirm = func() (map[string]bool, error) { return usedMACs(ctx, z, guests) }
	}
	return r.releaseOrphans(ctx, z, used, confirm)
}

// usedMACs reads the config of every managed guest of zone z (as listed in
// guests) and returns the MACs they use.
func usedMACs(ctx context.Context, z Zone, guests []pveapi.Resource) (map[string]bool, error) {
	used := map[string]bool{}
	for _, g := range guests {
		if !managedGuest(g) {
			continue
		}
		cfg, in, err := guestIntent(ctx, z, g)
		if err != nil {
			if ctx.Err() != nil {
				return nil, err
			}
			continue // gone meanwhile
		}
		for _, m := range macsOf(cfg, in) {
			used[m] = true
		}
	}
	return used, nil
}

// managedGuest reports whether the recovery pass looks at guest g: a
// flexplane guest, not a template.
func managedGuest(g pveapi.Resource) bool { return g.HasTag(tenancy.ManagedTag) && g.Template != 1 }

// guestIntent reads the config of guest g of zone z and the intent in its
// description (nil without one).
func guestIntent(ctx context.Context, z Zone, g pveapi.Resource) (pveapi.Config, *Intent, error) {
	cfg, err := pveapi.GuestConfig(ctx, z.Client, g.Node, g.VMID)
	if err != nil {
		return nil, nil, err
	}
	in, ok := ParseIntent(cfg.Str("description"))
	if !ok {
		in = nil
	}
	return cfg, in, nil
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
	// watch reports whether the hook may take guest g, whose intent is in
	// (nil without one), at a later pass although nothing of its listing
	// changes (an unfinished operation whose time has not come): Run's
	// passes then read its config every time (seenConfigs).
	watch func(g pveapi.Resource, in *Intent) bool
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
			watch: func(g pveapi.Resource, _ *Intent) bool { return g.HasTag(incomingTag) },
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
			watch: func(g pveapi.Resource, _ *Intent) bool { return isCreating(g) },
			run: func(ctx context.Context, z Zone, g pveapi.Resource, _ pveapi.Config, in *Intent) {
				adoptCreate(ctx, d, z, g.VMID, in)
			},
		},
		resizeHook(d),
	}
}

// releaseOrphans releases the flexplane IPAM mappings of zone z whose MAC
// no guest uses (not in used), once seen so for OrphanGrace. When used is
// partly what earlier passes read (confirm is then set), a mapping is
// released only if confirm, which reads every guest's config, does not
// find its MAC either.
func (r recovery) releaseOrphans(ctx context.Context, z Zone, used map[string]bool, confirm func() (map[string]bool, error)) error {
	maps, err := ipam.Mappings(ctx, z.Client)
	if err != nil {
		return err
	}
	now := time.Now()
	var errs []error
	seen := map[string]bool{}
	type orphan struct{ key, ip, mac string }
	var due []orphan
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
		due = append(due, orphan{key: key, ip: m.IP, mac: mac})
	}
	if len(due) > 0 && confirm != nil {
		fresh, err := confirm()
		if err != nil {
			return fmt.Errorf("confirm orphaned addresses: %w", err)
		}
		due = slices.DeleteFunc(due, func(o orphan) bool {
			if fresh[o.mac] {
				delete(seen, o.key) // used after all
				return true
			}
			return false
		})
	}
	for _, o := range due {
		r.log.Info("releasing an orphaned address", "zone", z.Name, "ip", o.ip, "mac", o.mac)
		errs = append(errs, ipam.ReleaseMACs(ctx, z.Client, []string{o.mac}))
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
