package compute

import (
	"hash/fnv"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/flexplane/flexplane/pkg/proxmox/pveapi"
)

// seenConfigs is what Run's recovery passes last read of each managed
// guest's config, by zone, so that a pass reads again only the configs
// that may have changed: those of guests that are new, whose listing
// (/cluster/resources: node, state, lock, tags, name, sizes, HA state)
// changed or whose uptime went back (a restart), and those a recovery hook
// watches (an unfinished operation, see recoveryHook.watch). Every
// Config.RecoverResyncInterval a zone's pass reads every config again, for
// what changed without showing in the listing; an explicit Recover always
// does. The zone's IPAM (for orphaned addresses) is read only by a pass
// that read a config or saw a guest go, and by every full one.
type seenConfigs struct {
	mu    sync.Mutex
	zones map[string]*zoneConfigs // by zone ID; protected by mu
}

// zoneConfigs is what the passes read of one zone.
type zoneConfigs struct {
	fullAt time.Time           // when every config of the zone was last read
	guests map[int]guestConfig // by VMID
}

// guestConfig is what a pass read of one guest's config, and the listing
// it read it with.
type guestConfig struct {
	listing uint64 // listingHash of the guest as listed then
	uptime  int64
	// macs are the upper-case MACs of its NICs and of its intent's NICs,
	// comma-separated; op is its intent's operation ("" without one).
	macs, op string
	// watched: a recovery hook watches it (recoveryHook.watch).
	watched bool
}

func newSeenConfigs() *seenConfigs { return &seenConfigs{zones: map[string]*zoneConfigs{}} }

// resyncDue reports whether every config of zone zoneID is to be read
// again: never read, or last read every longer than every ago.
func (s *seenConfigs) resyncDue(zoneID string, every time.Duration) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	z := s.zones[zoneID]
	return z == nil || time.Since(z.fullAt) >= every
}

// unchanged returns what was last read of guest g of zone zoneID when its
// config needs no new read: it was read, is listed as it was then, has not
// restarted since, and no hook watches it.
func (s *seenConfigs) unchanged(zoneID string, g pveapi.Resource) (guestConfig, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	z := s.zones[zoneID]
	if z == nil {
		return guestConfig{}, false
	}
	c, ok := z.guests[g.VMID]
	if !ok || c.watched || c.listing != listingHash(g) || g.Uptime < c.uptime {
		return guestConfig{}, false
	}
	return c, true
}

// set replaces what is known of zone zoneID's guests with read (guests
// no longer listed go) and reports whether a guest known before went; full
// says every config was read.
func (s *seenConfigs) set(zoneID string, read map[int]guestConfig, full bool) (gone bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	z := s.zones[zoneID]
	if z == nil {
		z = &zoneConfigs{}
		s.zones[zoneID] = z
	}
	for id := range z.guests {
		if _, ok := read[id]; !ok {
			gone = true
			break
		}
	}
	z.guests = read
	if full {
		z.fullAt = time.Now()
	}
	return gone
}

// seenConfig is what is kept of guest g whose config cfg (with intent in,
// nil without one) was read.
func seenConfig(g pveapi.Resource, cfg pveapi.Config, in *Intent, watched bool) guestConfig {
	c := guestConfig{listing: listingHash(g), uptime: g.Uptime, macs: strings.Join(macsOf(cfg, in), ","), watched: watched}
	if in != nil {
		c.op = in.Op
	}
	return c
}

// macsOf are the upper-case MACs of the NICs of config cfg and of its
// intent in (nil without one).
func macsOf(cfg pveapi.Config, in *Intent) []string {
	var out []string
	for i := range MaxNICs {
		if m := macRE.FindString(cfg.Str("net" + strconv.Itoa(i))); m != "" {
			out = append(out, strings.ToUpper(m))
		}
	}
	if in != nil {
		for _, n := range in.NICs {
			out = append(out, strings.ToUpper(n.MAC))
		}
	}
	return out
}

// listingHash hashes what of guest g's listing a change of its config or
// state shows in.
func listingHash(g pveapi.Resource) uint64 {
	h := fnv.New64a()
	for _, s := range []string{g.Node, g.Status, g.Lock, g.RawTags, g.Name, g.HAState, g.Pool,
		strconv.Itoa(g.Template), strconv.Itoa(g.MaxCPU), strconv.FormatInt(g.MaxMem, 10), strconv.FormatInt(g.MaxDisk, 10)} {
		h.Write([]byte(s))
		h.Write([]byte{0})
	}
	return h.Sum64()
}
