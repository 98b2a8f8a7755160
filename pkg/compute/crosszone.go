package compute

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	proxmox "github.com/luthermonson/go-proxmox"

	"github.com/flexplane/flexplane/pkg/network/ipam"
	"github.com/flexplane/flexplane/pkg/proxmox/pveapi"
	"github.com/flexplane/flexplane/pkg/tenancy"
)

// VolumeRef names a disk volume on a node of a zone.
type VolumeRef struct {
	ZoneID, Node string
	// Volume is the Proxmox volume id.
	Volume string
}

// VolumeMover copies a disk volume from a node of one zone into an
// allocated volume of a node of another, agent to agent, calling progress
// as bytes arrive; it returns the checksum (hex; BLAKE3, or SHA-256 with
// an agent that knows no other) of what arrived, which the target checked
// against the source's.
type VolumeMover interface {
	MoveVolume(ctx context.Context, from, to VolumeRef, progress func(done, total int64)) (string, error)
}

// Tags of a move across zones, on the guests themselves (the system of
// record), so that whoever sees an unfinished move finishes or undoes it.
const (
	// incomingTag marks the target copy until cut-over: it is not the VM.
	incomingTag = "fp-incoming"
	// movedTag marks the source after cut-over: the target is the VM.
	movedTag = "fp-moved"
	// leavingTag marks the source from its stop until the move ends: its
	// agent offers the disks of a guest so marked (and stopped) only, as
	// the target's agent writes only into a guest marked incomingTag
	// (pkg/agent's volumes.go reads both marks itself).
	leavingTag = "fp-leaving"
	// wasTagPrefix + zoneID + "-" + vmid names, on a moved guest, the
	// place the VM was created at, which its id encodes.
	wasTagPrefix = "fp-was-"
)

// wasTag is the tag that keeps id ref on a guest that moved away from it.
func wasTag(ref tenancy.VMRef) string {
	return wasTagPrefix + ref.ZoneID + "-" + strconv.Itoa(ref.VMID)
}

// wasOf returns the VM ref a moved guest's tags keep.
func wasOf(tags []string) (tenancy.VMRef, bool) {
	for _, t := range tags {
		rest, ok := strings.CutPrefix(t, wasTagPrefix)
		if !ok {
			continue
		}
		i := strings.LastIndexByte(rest, '-')
		if i <= 0 {
			continue
		}
		n, err := strconv.Atoi(rest[i+1:])
		if err != nil {
			continue
		}
		return tenancy.VMRef{ZoneID: rest[:i], VMID: n}, true
	}
	return tenancy.VMRef{}, false
}

// keptID is the id of the VM whose guest sits at place with tags: the
// place it was created at if it moved there across zones (its fp-was
// tag), else place. notVM is true for a guest that is not the VM: the
// target of a move before its cut-over (fp-incoming) or its source after
// (fp-moved).
func keptID(place tenancy.VMRef, tags []string) (id string, notVM bool) {
	if slices.Contains(tags, incomingTag) || slices.Contains(tags, movedTag) {
		return "", true
	}
	if was, ok := wasOf(tags); ok {
		return was.ID(), false
	}
	return place.ID(), false
}

// movedIndex holds the guests Recover last saw that are not the VM their
// place names: a VM that moved there (its kept id) or a move's other copy
// (""), by zone.
type movedIndex struct {
	mu sync.Mutex
	m  map[tenancy.VMRef]string // protected by mu
}

func newMovedIndex() *movedIndex { return &movedIndex{m: map[tenancy.VMRef]string{}} }

// index records, of the guests of zone z, those that are not the VM
// their place names.
func (mi *movedIndex) index(z Zone, guests []pveapi.Resource) {
	mi.mu.Lock()
	defer mi.mu.Unlock()
	for ref := range mi.m {
		if ref.ZoneID == z.ID {
			delete(mi.m, ref)
		}
	}
	for _, g := range guests {
		place := tenancy.VMRef{ZoneID: z.ID, VMID: g.VMID}
		if id, notVM := keptID(place, g.Tags()); notVM || id != place.ID() {
			mi.m[place] = id
		}
	}
}

// moveDone records that VM id (kept; "" for none) now sits at to, and
// that from holds it no more.
func (mi *movedIndex) moveDone(id string, from, to tenancy.VMRef) {
	mi.mu.Lock()
	defer mi.mu.Unlock()
	if id != "" {
		mi.m[to] = id
	}
	delete(mi.m, from)
}

// KeptID tells the id of the VM whose guest sits at place, as the last
// Recover of every zone (and the moves this process finished) saw it:
// the id it kept if it moved there across zones, else place's; notVM is
// true for a move's other copy, which is not the VM. A process that just
// started knows the moves once its first Recover has run.
func (s *Service) KeptID(place tenancy.VMRef) (id string, notVM bool) {
	mi := s.d.moved
	mi.mu.Lock()
	defer mi.mu.Unlock()
	id, ok := mi.m[place]
	if !ok {
		return place.ID(), false
	}
	return id, id == ""
}

// PlaceOf is where the VM of id sits now if it moved across zones (as
// KeptID knows it).
func (s *Service) PlaceOf(id string) (tenancy.VMRef, bool) { return s.d.moved.placeOf(id) }

// placeOf is PlaceOf.
func (mi *movedIndex) placeOf(id string) (tenancy.VMRef, bool) {
	mi.mu.Lock()
	defer mi.mu.Unlock()
	for place, kept := range mi.m {
		if kept == id {
			return place, true
		}
	}
	return tenancy.VMRef{}, false
}

// moveDisk is one disk of a move.
type moveDisk struct {
	key    string // scsi0, ...
	volume string // source volume id
	size   int64
	opts   string // the drive's options after the volume
}

// move is a planned move across zones.
type move struct {
	op       string
	id       string // the VM's id (kept)
	vdc      string
	src, dst Zone
	g        pveapi.Resource
	cfg      pveapi.Config
	in       *Intent
	node     string // target node
	slot     *slot  // the target node's room, held while the move runs
	storage  string // target storage
	disks    []moveDisk
	nics     []NICIntent // target NICs (same MACs)
	subnets  []ipam.Subnet
	running  bool

	mu   sync.Mutex
	done map[string]int64 // bytes per disk; protected by mu
}

// copyKeys are the config keys a move copies as they are.
var copyKeys = []string{"name", "cores", "sockets", "memory", "cpu", "ostype", "boot", "scsihw", "agent", "ciuser",
	"sshkeys", "serial0", "vga", "bios", "machine", "smbios1", "numa", "balloon"}

// migrateAcross moves a VM (guest g of zone z) to another zone: the
// prepare phases check everything before any disk I/O (each refusal a
// clear error that changes nothing), reserve the quota of the disks' copy
// and claim the target's addresses; then a runner copies the disks agent
// to agent and cuts over (the phases of movePhases, run).
func migrateAcross(ctx context.Context, d *deps, z Zone, g pveapi.Resource, in MigrateInput) (*Operation, error) {
	sc := &moveScope{deps: d, req: in, src: z, g: g}
	if err := runPhases(ctx, d.eng, "", "", movePreparePhases(), sc); err != nil {
		if sc.m != nil {
			sc.m.slot.release()
		}
		return nil, cause(err)
	}
	m := sc.m
	sc.opID = taskOpID(z.ID, g.VMID, OpMigrate, "move:"+m.op)
	op := Operation{ID: sc.opID, Kind: OpMigrate, State: OpRunning, Step: "prepare", VMID: in.ID, Started: time.Now(),
		Progress: &Progress{Total: m.total()}}
	d.eng.record(m.vdc, m.dst.Name, op)
	d.eng.setLive(z, g.VMID, m.op)
	d.log.Info("moving a VM across zones", "vm", in.ID, "from", z.Name, "to", m.dst.Name, "node", m.node, "disks", len(m.disks))
	d.eng.spawn(func(ctx context.Context) {
		defer d.eng.clearLive(z, g.VMID)
		defer m.slot.release()
		d.eng.finishOp(sc.opID, sc.run(ctx))
	})
	return &op, nil
}

// movePreparePhases are the phases that prepare a move across zones, in
// order, before its operation exists: preflight (the target zone, and
// everything the move needs: no HA, no host CPU type, no snapshots or
// replication, raw disks on a storage the target has, the target
// networks and host), reserve (the disks' copy against the VDC's quota),
// claim (the target's addresses; a failed claim gives the reservation
// back).
func movePreparePhases() []phase[moveScope] {
	return []phase[moveScope]{
		step("preflight", (*moveScope).preflight),
		step("reserve", (*moveScope).reserve),
		step("claim", (*moveScope).claim),
	}
}

// reserve reserves the quota of the target's copy of the disks: while the
// move runs, the VDC must have room for them.
func (sc *moveScope) reserve(ctx context.Context) error {
	m := sc.m
	if err := sc.quota.ReserveStorage(ctx, m.vdc, moveReservation(m.op), m.dst.ID, "move", m.diskGiB()); err != nil {
		return quotaError(m.vdc, err)
	}
	return nil
}

// claim claims the target's addresses; a failed claim gives the quota
// reservation back.
func (sc *moveScope) claim(ctx context.Context) error {
	if err := sc.claimTarget(ctx); err != nil {
		sc.releaseQuota(ctx)
		return err
	}
	return nil
}

// diskGiB is the size of the move's disks in GiB, as the target allocates
// them.
func (m *move) diskGiB() int {
	n := 0
	for _, d := range m.disks {
		n += int((d.size + 1<<30 - 1) >> 30)
	}
	return n
}

// moveReservation is the id of the quota reservation of move op.
func moveReservation(op string) string { return "move:" + op }

// releaseQuota releases the quota reservation of the disks' copy.
func (sc *moveScope) releaseQuota(ctx context.Context) {
	m := sc.m
	if err := sc.quota.Release(ctx, m.vdc, moveReservation(m.op)); err != nil {
		sc.log.Warn("releasing a move's quota", "op", m.op, "err", err)
	}
}

func (m *move) total() int64 {
	var n int64
	for _, d := range m.disks {
		n += d.size
	}
	return n
}

// preflight checks everything a move needs before any disk I/O, and
// plans it (sc.m).
func (sc *moveScope) preflight(ctx context.Context) error {
	m, err := sc.planMove(ctx)
	if err != nil {
		return err
	}
	sc.m = m
	return nil
}

// planMove is preflight's check; it returns the planned move.
func (sc *moveScope) planMove(ctx context.Context) (*move, error) {
	z, g, in := sc.src, sc.g, sc.req
	if sc.cfg.Volumes == nil {
		return nil, newError(KindInternal, "moving VMs across zones is not available")
	}
	absent := badInput("zone", "no zone %q can be reached", in.Zone)
	tz, ok := sc.find.zoneByName(ctx, in.Zone)
	if !ok {
		return nil, absent
	}
	if err := placeable(ctx, sc.deps, tz.Name, in.VDC, absent); err != nil {
		return nil, err
	}
	cfg, err := pveapi.GuestConfig(ctx, z.Client, g.Node, g.VMID)
	if err != nil {
		return nil, zoneDown(z.Name, err)
	}
	intent, ok := ParseIntent(cfg.Str("description"))
	if !ok {
		return nil, newError(KindConflict, "the VM carries no flexplane intent and cannot move across zones")
	}
	m := &move{op: newOpID(), id: in.ID, vdc: in.VDC, src: z, dst: tz, g: g, cfg: cfg, in: intent,
		running: g.Status == "running", done: map[string]int64{}}
	if cpu := propFirst(cfg.Str("cpu")); cpu == "host" || strings.HasPrefix(cpu, "host-") {
		return nil, newError(KindConflict, "the VM's CPU type is %q, tied to its cluster's CPUs; give it a named CPU model first", cpu)
	}
	if cd := cfg.Str(isoSlot); pveapi.Prop(cd, "media") == "cdrom" && strings.Contains(propFirst(cd), ":") && !strings.Contains(cd, "cloudinit") {
		// An ISO image is a file of its zone (isos.go).
		what := propFirst(cd)
		if name := AttachedISO(cfg); name != "" {
			what = strings.TrimPrefix(name, in.VDC+".")
		}
		return nil, newError(KindConflict, "the VM has ISO %s in its CD-ROM drive; ISOs do not move across zones: detach it first (detachISO)", what)
	}
	var snaps []struct {
		Name string `json:"name"`
	}
	if err := z.Client.Get(ctx, fmt.Sprintf("/nodes/%s/qemu/%d/snapshot", g.Node, g.VMID), &snaps); err != nil {
		return nil, zoneDown(z.Name, err)
	}
	for _, sn := range snaps {
		if sn.Name != "current" {
			return nil, newError(KindConflict, "the VM has snapshot %q; snapshots do not move across zones: delete them first", sn.Name)
		}
	}
	var jobs []struct {
		ID     string `json:"id"`
		Guest  int    `json:"guest"`
		Target string `json:"target"`
	}
	if err := z.Client.Get(ctx, "/cluster/replication", &jobs); err != nil {
		return nil, zoneDown(z.Name, err)
	}
	for _, j := range jobs {
		if j.Guest == g.VMID {
			return nil, newError(KindConflict, "the VM is replicated to node %s (replication job %s); replication does not cross zones: remove the job first", j.Target, j.ID)
		}
	}
	if err := planDisks(ctx, m); err != nil {
		return nil, err
	}
	if err := planNetworks(ctx, sc.find, m, in.Networks); err != nil {
		return nil, err
	}
	pin := ""
	if in.Host != "" {
		if pin, err = sc.find.targetNode(ctx, tz, in.Host); err != nil {
			return nil, err
		}
	}
	if m.slot, err = sc.place(ctx, placeRequest{Zone: tz, Pin: pin, Field: "host", VM: in.ID, Demand: moveDemand(m)}); err != nil {
		return nil, err
	}
	m.node = m.slot.node
	return m, nil
}

// moveDemand is what the VM of m needs of its host in the target zone.
func moveDemand(m *move) demand {
	vcpus := max(m.cfg.Int("cores"), 1) * max(m.cfg.Int("sockets"), 1)
	mem := m.cfg.Int("memory")
	if mem == 0 {
		mem = 512 // Proxmox's default
	}
	return demand{MemBytes: int64(mem) << 20, VCPUs: vcpus, DiskBytes: m.total(), Storage: m.storage}
}

// planDisks finds the VM's disks (raw, on storage the target zone has).
func planDisks(ctx context.Context, m *move) error {
	for _, k := range slices.Sorted(maps.Keys(m.cfg)) {
		if !isDiskKey(k) {
			continue
		}
		v := m.cfg.Str(k)
		vol := propFirst(v)
		if strings.Contains(v, "media=cdrom") || strings.Contains(vol, "cloudinit") || !strings.Contains(vol, ":") {
			continue // the cloud-init drive is made again in the target
		}
		storage, _, _ := strings.Cut(vol, ":")
		var info struct {
			Size   int64  `json:"size"`
			Format string `json:"format"`
		}
		if err := m.src.Client.Get(ctx, "/nodes/"+m.g.Node+"/storage/"+storage+"/content/"+vol, &info); err != nil {
			return zoneDown(m.src.Name, err)
		}
		if info.Format != "raw" {
			return newError(KindConflict, "disk %s is %s; only raw disks move across zones", k, info.Format)
		}
		_, opts, _ := strings.Cut(v, ",")
		m.disks = append(m.disks, moveDisk{key: k, volume: vol, size: info.Size, opts: dropProp(opts, "size")})
	}
	m.storage = m.in.Storage
	var st struct {
		Type    string `json:"type"`
		Content string `json:"content"`
	}
	if err := m.dst.Client.Get(ctx, "/storage/"+url.PathEscape(m.storage), &st); err != nil {
		if pveapi.IsNotFound(err) {
			return &Error{Kind: KindConflict, Field: "zone", Message: fmt.Sprintf("zone %s has no storage %s for the VM's disks", m.dst.Name, m.storage), Cause: err}
		}
		return zoneDown(m.dst.Name, err)
	}
	if !slices.Contains(strings.Split(st.Content, ","), "images") {
		return &Error{Kind: KindConflict, Field: "zone", Message: fmt.Sprintf("storage %s of zone %s holds no disk images", m.storage, m.dst.Name)}
	}
	if !rawStorage[st.Type] {
		return &Error{Kind: KindConflict, Field: "zone", Message: fmt.Sprintf("storage %s of zone %s (%s) cannot hold raw disks", m.storage, m.dst.Name, st.Type)}
	}
	return nil
}

// rawStorage are the Proxmox storage types that hold raw disk images.
var rawStorage = map[string]bool{"lvmthin": true, "lvm": true, "zfspool": true, "rbd": true, "dir": true, "nfs": true,
	"cifs": true, "glusterfs": true, "iscsidirect": true, "btrfs": true}

// planNetworks maps each NIC to a network of the VDC in the target zone
// (given, or the one of the same name) and checks it exists.
func planNetworks(ctx context.Context, f *finder, m *move, given []NetworkMapping) error {
	to := map[string]string{}
	for i, nm := range given {
		ref, err := tenancy.ParseNetworkID(nm.From)
		if err != nil || ref.ZoneID != m.src.ID || !slices.ContainsFunc(m.in.NICs, func(n NICIntent) bool { return n.VNet == ref.VNet }) {
			return badInput(fmt.Sprintf("networks[%d].from", i), "the VM has no NIC on network %q", nm.From)
		}
		if _, err := f.network(ctx, m.dst, m.vdc, nm.To); err != nil {
			if errors.Is(err, errNoNetwork) {
				return badInput(fmt.Sprintf("networks[%d].to", i), "no network %q of the VDC in zone %s", nm.To, m.dst.Name)
			}
			return zoneDown(m.dst.Name, err)
		}
		to[ref.VNet] = nm.To
	}
	for i, n := range m.in.NICs {
		id, ok := to[n.VNet]
		if !ok {
			name, err := f.networkName(ctx, m.src, n.VNet)
			if err != nil {
				return err
			}
			id = tenancy.NetworkRef{ZoneID: m.dst.ID, VNet: tenancy.VNetID(m.vdc, name)}.ID()
			if _, err := f.network(ctx, m.dst, m.vdc, id); err != nil {
				if errors.Is(err, errNoNetwork) {
					return badInput("networks", "NIC %d is on network %q, which zone %s does not have: map it to one of its networks", i, name, m.dst.Name)
				}
				return zoneDown(m.dst.Name, err)
			}
		}
		sub, _ := f.network(ctx, m.dst, m.vdc, id)
		nic := NICIntent{SDNZone: sub.Zone, VNet: sub.VNet, MAC: n.MAC, Bits: sub.Prefix.Bits(), Gateway: gatewayString(sub.Gateway),
			Address: n.Address}
		m.nics = append(m.nics, nic)
		m.subnets = append(m.subnets, sub)
	}
	return nil
}

// claimTarget claims the NICs' addresses in the target zone's IPAM under
// their MACs: the same address if the target network has it free, else
// the first free one. A failed claim releases what it claimed.
func (sc *moveScope) claimTarget(ctx context.Context) error {
	m := sc.m
	for i := range m.nics {
		n := &m.nics[i]
		sc.addrs.hold(n.MAC)
		want, _ := netip.ParseAddr(n.Address)
		if !m.subnets[i].Assignable(want) {
			want = netip.Addr{}
		}
		addr, err := ipam.Claim(ctx, m.dst.Client, m.subnets[i], want, n.MAC)
		if errors.Is(err, ipam.ErrTaken) {
			addr, err = ipam.Claim(ctx, m.dst.Client, m.subnets[i], netip.Addr{}, n.MAC)
		}
		if err != nil {
			sc.releaseTarget(ctx)
			if errors.Is(err, ipam.ErrExhausted) {
				return &Error{Kind: KindConflict, Field: "networks", Message: fmt.Sprintf("no free address left in %s of zone %s", m.subnets[i].Prefix, m.dst.Name), Cause: err}
			}
			return zoneDown(m.dst.Name, err)
		}
		n.Address = addr.String()
	}
	return nil
}

// releaseTarget releases the target's addresses of m.
func (sc *moveScope) releaseTarget(ctx context.Context) {
	m := sc.m
	var macs []string
	for _, n := range m.nics {
		macs = append(macs, n.MAC)
	}
	if err := ipam.ReleaseMACs(ctx, m.dst.Client, macs); err != nil {
		sc.log.Warn("releasing the target's addresses", "op", m.op, "err", err)
	}
	sc.addrs.drop(macs...)
}

// run copies a VM to its target zone and cuts over: the target guest
// (stopped, marked incoming, in no pool), the source stopped, each disk
// copied agent to agent and checked, then the cut-over (the source marked
// moved with the digest it read: from then on the target is the VM), the
// target finished (pool, tags, started if the source ran) and the source
// destroyed with its addresses released: the phases of movePhases. A
// failure before the cut-over undoes the target and restarts the source.
func (sc *moveScope) run(ctx context.Context) error {
	m, opID := sc.m, sc.opID
	err := runPhases(ctx, sc.eng, opID, m.op, movePhases(), sc)
	if sc.stopBeat != nil {
		sc.stopBeat()
	}
	if err == nil {
		return nil
	}
	if sc.vmid == 0 {
		// No target guest: its addresses and quota go back.
		sc.releaseTarget(ctx)
		sc.releaseQuota(ctx)
		return err
	}
	if phase, _ := failedPhase(err); phase == "finish" || ctx.Err() != nil {
		// Cut over (the target is the VM: Recover finishes it), or shut
		// down (the move stays recorded for Recover).
		return err
	}
	sc.eng.setStep(opID, "rollback")
	sc.rollback(context.WithoutCancel(ctx))
	return err
}

// moveScope is what the phases of a move across zones work on.
type moveScope struct {
	*deps
	// req, src and g: the request, the VM's zone and guest (for the
	// prepare phases).
	req  MigrateInput
	src  Zone
	g    pveapi.Resource
	m    *move  // the planned move (preflight)
	opID string // the move's operation
	vmid int    // the target guest (target)
	// stopBeat ends the heartbeat on the target's move intent (from stop
	// until the disks are copied).
	stopBeat func()
}

// movePhases are the phases of a move across zones, in order: target (the
// target guest, stopped, marked incoming, in no pool), stop (the
// heartbeat begun and the source stopped if it runs), copy (each disk
// copied agent to agent and checked), cutover (the source marked moved
// with the digest it read: from then on the target is the VM), finish
// (the target finished and the source destroyed). A failure after target
// and before the cut-over undoes the move (rollback).
func movePhases() []phase[moveScope] {
	return []phase[moveScope]{
		step("target", (*moveScope).createTarget),
		step("stop", (*moveScope).stopSource),
		step("copy", (*moveScope).copyDisks),
		step("cutover", (*moveScope).cutOver),
		step("finish", (*moveScope).finish),
	}
}

// stopSource begins the heartbeat, marks the source leaving (what lets
// its agent offer its disks) and stops it if it runs.
func (sc *moveScope) stopSource(ctx context.Context) error {
	m := sc.m
	sc.stopBeat = sc.heartbeat(ctx)
	if err := markLeaving(ctx, m.src.Client, m.g.Node, m.g.VMID, true); err != nil {
		return fmt.Errorf("compute: mark the source leaving: %w", err)
	}
	if !m.running {
		return nil
	}
	// An HA source is stopped by the HA manager after the task: its disks
	// are copied once it has stopped.
	return sc.runHA(ctx, m.src, fmt.Sprintf("/nodes/%s/qemu/%d/status/stop", m.g.Node, m.g.VMID), map[string]any{}, m.g.VMID)
}

// copyDisks copies each disk of the stopped source to the target guest
// agent to agent, following the bytes moved, then ends the heartbeat (the
// cut-over's conditional writes must not race a beat).
func (sc *moveScope) copyDisks(ctx context.Context) error {
	m, opID, vmid := sc.m, sc.opID, sc.vmid
	start := time.Now()
	for i, d := range m.disks {
		to := VolumeRef{ZoneID: m.dst.ID, Node: m.node, Volume: targetVolume(m, vmid, i)}
		_, err := sc.cfg.Volumes.MoveVolume(ctx, VolumeRef{ZoneID: m.src.ID, Node: m.g.Node, Volume: d.volume}, to, func(done, _ int64) {
			m.mu.Lock()
			m.done[d.key] = done
			var sum int64
			for _, n := range m.done {
				sum += n
			}
			m.mu.Unlock()
			sc.eng.setProgress(opID, sum, m.total(), float64(sum)/max(time.Since(start).Seconds(), 0.001))
		})
		if err != nil {
			return fmt.Errorf("compute: copy disk %s: %w", d.key, err)
		}
	}
	sc.stopBeat()
	sc.stopBeat = nil
	return nil
}

// heartbeat records, every StaleAfter/4 until the returned stop is
// called, that the runner of the move is alive on the target guest's move
// intent (MoveIntent.Beat): a copy longer than StaleAfter is not taken
// for a dead one by another replica's Recover. stop waits for a write in
// flight, so that the cut-over's conditional writes do not race it.
func (sc *moveScope) heartbeat(ctx context.Context) (stop func()) {
	m, vmid := sc.m, sc.vmid
	return keepBeating(ctx, sc.cfg.StaleAfter/4, func(ctx context.Context) error { return beat(ctx, m, vmid) },
		func(err error) { sc.log.Warn("recording a move's heartbeat", "op", m.op, "vmid", vmid, "err", err) })
}

// keepBeating calls beat every period (at least 50ms) until the returned
// stop is called, and failed with each error of a beat that was not
// stopped. stop waits for a beat in flight.
func keepBeating(ctx context.Context, period time.Duration, beat func(context.Context) error, failed func(error)) (stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(max(period, 50*time.Millisecond))
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			if err := beat(ctx); err != nil && ctx.Err() == nil {
				failed(err)
			}
		}
	}()
	return func() { cancel(); <-done }
}

// beat writes the time into the move intent of the target guest vmid,
// conditional on the digest read.
func beat(ctx context.Context, m *move, vmid int) error {
	cfg, err := pveapi.GuestConfig(ctx, m.dst.Client, m.node, vmid)
	if err != nil {
		return err
	}
	in, ok := ParseIntent(cfg.Str("description"))
	if !ok || in.Move == nil || in.Move.Op != m.op {
		return fmt.Errorf("compute: the target guest %d is no longer this move's", vmid)
	}
	in.Move.Beat = time.Now()
	_, err = pveapi.Run(ctx, m.dst.Client, "POST", fmt.Sprintf("/nodes/%s/qemu/%d/config", m.node, vmid),
		map[string]any{"description": in.Description(), "digest": cfg.Digest()})
	return err
}

// targetVolume is the volume id of disk i of the target guest vmid.
func targetVolume(m *move, vmid, i int) string {
	return fmt.Sprintf("%s:vm-%d-disk-%d", m.storage, vmid, i)
}

// createTarget creates the stopped target guest, marked incoming, with
// empty disks of the source's sizes and NICs on the target networks.
func (sc *moveScope) createTarget(ctx context.Context) error {
	vmid, err := sc.newTarget(ctx)
	if err != nil {
		return err
	}
	sc.vmid = vmid
	return nil
}

// newTarget is createTarget's work: it returns the target guest.
func (sc *moveScope) newTarget(ctx context.Context) (int, error) {
	m := sc.m
	params := map[string]any{}
	for _, k := range copyKeys {
		if v := m.cfg.Str(k); v != "" {
			params[k] = v
		}
	}
	tags := append(tenancy.SplitTags(m.cfg.Str("tags")), incomingTag, tenancy.OpTag(m.op))
	ref, err := tenancy.ParseVMID(m.id)
	if err != nil {
		return 0, err
	}
	if _, moved := wasOf(tags); !moved {
		tags = append(tags, wasTag(ref))
	}
	params["tags"] = tenancy.JoinTags(tags)
	in := *m.in
	in.NICs = m.nics
	// A placement group is zonal: the VM leaves its group on a move
	// across zones (pgroups.go).
	in.PlacementGroup = ""
	in.ISO = "" // a VM with an ISO does not move across zones
	in.Move = &MoveIntent{Op: m.op, From: m.src.ID, VMID: m.g.VMID, Running: m.running, Started: time.Now()}
	params["description"] = in.Description()
	for i, n := range m.nics {
		params["net"+strconv.Itoa(i)] = "virtio=" + n.MAC + ",bridge=" + n.VNet
		ip := "ip=" + n.Address + "/" + strconv.Itoa(n.Bits)
		if n.Gateway != "" {
			ip += ",gw=" + n.Gateway
		}
		params["ipconfig"+strconv.Itoa(i)] = ip
	}
	for _, k := range []string{cloudInitSlot, isoSlot} {
		// The cloud-init drive is in the CD-ROM's slot, or in its own
		// once the VM had an ISO (isos.go).
		if strings.Contains(m.cfg.Str(k), "cloudinit") {
			params[k] = m.storage + ":cloudinit"
		}
	}
	for _, d := range m.disks {
		gib := (d.size + 1<<30 - 1) >> 30
		v := fmt.Sprintf("%s:%d", m.storage, gib)
		if d.opts != "" {
			v += "," + d.opts
		}
		params[d.key] = v
	}
	vmid := m.g.VMID                      // the same VMID if it is free there
	kept := sc.find.keptVMIDs(ctx, m.dst) // and not one a VM that left the zone keeps
	for attempt := 0; ; attempt++ {
		for kept[vmid] {
			vmid++
		}
		params["vmid"] = vmid
		_, err := pveapi.Run(ctx, m.dst.Client, "POST", "/nodes/"+m.node+"/qemu", params)
		if err == nil {
			break
		}
		if !pveapi.IsAlreadyExists(err) || attempt > 20 {
			return 0, fmt.Errorf("compute: create the target guest: %w", err)
		}
		if vmid, err = pveapi.NextID(ctx, m.dst.Client); err != nil {
			return 0, err
		}
	}
	// Disks are allocated in GiB: the i-th disk is vm-<vmid>-disk-<i> in
	// key order, which targetVolume names.
	for i, d := range m.disks {
		want := targetVolume(m, vmid, i)
		cfg, err := pveapi.GuestConfig(ctx, m.dst.Client, m.node, vmid)
		if err != nil {
			return vmid, err
		}
		if propFirst(cfg.Str(d.key)) != want {
			return vmid, fmt.Errorf("compute: the target's disk %s is %s, want %s", d.key, cfg.Str(d.key), want)
		}
	}
	if err := sc.copyUserData(ctx, vmid); err != nil {
		return vmid, err
	}
	for i, n := range m.nics {
		a, _ := netip.ParseAddr(n.Address)
		if err := ipam.Assign(ctx, m.dst.Client, n.SDNZone, n.VNet, a, n.MAC, vmid); err != nil {
			sc.log.Warn("recording the target address's guest", "nic", i, "err", err)
		}
	}
	return vmid, nil
}

// copyUserData gives the target guest vmid a copy of the source's
// user-data snippet (if it has flexplane's), named in its cicustom.
func (sc *moveScope) copyUserData(ctx context.Context, vmid int) error {
	m := sc.m
	cc, err := sc.snips.copyUserData(ctx, m.src, m.g.Node, m.g.VMID, m.cfg.Str("cicustom"), m.dst, m.node, vmid)
	if err != nil || cc == "" {
		return err
	}
	cfg, err := pveapi.GuestConfig(ctx, m.dst.Client, m.node, vmid)
	if err != nil {
		return err
	}
	if _, err := pveapi.Run(ctx, m.dst.Client, "POST", fmt.Sprintf("/nodes/%s/qemu/%d/config", m.node, vmid),
		map[string]any{"cicustom": cc, "digest": cfg.Digest()}); err != nil {
		return fmt.Errorf("compute: the target's user-data: %w", err)
	}
	return nil
}

// markLeaving adds (or removes) the leaving mark of guest vmid on node,
// conditional on the digest read; it changes nothing when the mark is
// already as wanted.
func markLeaving(ctx context.Context, c *proxmox.Client, node string, vmid int, on bool) error {
	cfg, err := pveapi.GuestConfig(ctx, c, node, vmid)
	if err != nil {
		return err
	}
	tags := tenancy.SplitTags(cfg.Str("tags"))
	if slices.Contains(tags, leavingTag) == on {
		return nil
	}
	if on {
		tags = append(tags, leavingTag)
	} else {
		tags = slices.DeleteFunc(tags, func(t string) bool { return t == leavingTag })
	}
	_, err = pveapi.Run(ctx, c, "POST", fmt.Sprintf("/nodes/%s/qemu/%d/config", node, vmid),
		map[string]any{"tags": tenancy.JoinTags(tags), "digest": cfg.Digest()})
	return err
}

// cutOver marks the source moved, conditional on the digest read: from
// then on the target is the VM.
func (sc *moveScope) cutOver(ctx context.Context) error {
	m := sc.m
	cfg, err := pveapi.GuestConfig(ctx, m.src.Client, m.g.Node, m.g.VMID)
	if err != nil {
		return err
	}
	tags := append(tenancy.SplitTags(cfg.Str("tags")), movedTag, tenancy.OpTag(m.op))
	_, err = pveapi.Run(ctx, m.src.Client, "POST", fmt.Sprintf("/nodes/%s/qemu/%d/config", m.g.Node, m.g.VMID),
		map[string]any{"tags": tenancy.JoinTags(tags), "digest": cfg.Digest()})
	return err
}

// finish makes the target the VM (in the VDC's pool, unmarked, started
// if the source ran) and destroys the source, releasing its addresses.
func (sc *moveScope) finish(ctx context.Context) error {
	m, vmid := sc.m, sc.vmid
	if err := sc.ensurePool(ctx, m.dst, m.vdc); err != nil {
		return err
	}
	if err := m.dst.Client.Put(ctx, "/pools/"+tenancy.PoolID(m.vdc), map[string]any{"vms": vmid}, nil); err != nil && !pveapi.IsAlreadyExists(err) {
		return fmt.Errorf("compute: add the target to the pool: %w", err)
	}
	// A VM in security groups starts in its new zone only once that
	// zone's firewall holds them (the target is one of the VDC's VMs
	// there from its pool on); until then the target stays marked, for
	// this step to be finished again.
	if m.running {
		if err := sc.waitFirewall(ctx, m.dst.Name, m.in, vmid); err != nil {
			return err
		}
	}
	cfg, err := pveapi.GuestConfig(ctx, m.dst.Client, m.node, vmid)
	if err != nil {
		return err
	}
	tags := slices.DeleteFunc(tenancy.SplitTags(cfg.Str("tags")), func(t string) bool {
		return t == incomingTag || strings.HasPrefix(t, "fp-op-")
	})
	if _, err := pveapi.Run(ctx, m.dst.Client, "POST", fmt.Sprintf("/nodes/%s/qemu/%d/config", m.node, vmid),
		map[string]any{"tags": tenancy.JoinTags(tags), "digest": cfg.Digest()}); err != nil {
		return fmt.Errorf("compute: unmark the target: %w", err)
	}
	if m.running {
		if _, err := pveapi.Run(ctx, m.dst.Client, "POST", fmt.Sprintf("/nodes/%s/qemu/%d/status/start", m.node, vmid), map[string]any{}); err != nil {
			return fmt.Errorf("compute: start the target: %w", err)
		}
	}
	if !m.in.NoHA {
		// The copy is an HA resource in its zone as the source was in its
		// own (the source's is purged with it).
		state := "stopped"
		if m.running {
			state = "started"
		}
		if _, err := sc.enrollHA(ctx, m.dst, pveapi.Resource{VMID: vmid, Node: m.node}, m.in, state); err != nil {
			sc.log.Warn("ha: adding the moved VM to HA failed", "vm", m.id, "zone", m.dst.Name, "err", err)
		}
	}
	// The backup schedule follows the VM into its new zone; the source's
	// job goes with the source.
	if err := moveSchedule(ctx, sc.deps, m.vdc, m.id, m.g.Name, m.src, m.g.VMID, m.dst, vmid); err != nil {
		return fmt.Errorf("compute: move the backup schedule: %w", err)
	}
	src, ok, err := pveapi.FindGuest(ctx, m.src.Client, m.g.VMID)
	if err != nil {
		return err
	}
	if ok {
		// destroy releases the source's addresses (the MACs are the same,
		// but the mappings are the source zone's).
		// (The source is destroyed without touching quota: the VM lives
		// on.)
		if _, err := sc.destroy(ctx, m.src, src, nil); err != nil {
			return fmt.Errorf("compute: remove the source: %w", err)
		}
	}
	for _, n := range m.nics {
		sc.addrs.drop(n.MAC)
	}
	sc.releaseQuota(ctx)
	sc.moved.moveDone(m.id, tenancy.VMRef{ZoneID: m.src.ID, VMID: m.g.VMID}, tenancy.VMRef{ZoneID: m.dst.ID, VMID: vmid})
	sc.log.Info("VM moved across zones", "vm", m.id, "from", m.src.Name, "to", m.dst.Name, "vmid", vmid)
	return nil
}

// rollback undoes a move that has not cut over: the source runs again
// if it ran, then the target guest and its addresses go. It stops at the
// first step that fails (a zone out of reach), leaving the target marked
// incoming with its move recorded, for Recover to finish the undo once
// both zones answer: until then the source stays the VM.
func (sc *moveScope) rollback(ctx context.Context) {
	m, vmid := sc.m, sc.vmid
	src, ok, err := pveapi.FindGuest(ctx, m.src.Client, m.g.VMID)
	if err != nil {
		sc.log.Warn("unmarking the source of a failed move", "op", m.op, "err", err)
		return
	}
	if ok && src.HasTag(leavingTag) {
		if err := markLeaving(ctx, m.src.Client, src.Node, src.VMID, false); err != nil {
			sc.log.Warn("unmarking the source of a failed move", "op", m.op, "err", err)
			return
		}
	}
	if m.running {
		if ok && src.Status != "running" {
			if err := sc.runHA(ctx, m.src, fmt.Sprintf("/nodes/%s/qemu/%d/status/start", src.Node, src.VMID), map[string]any{}, src.VMID); err != nil {
				sc.log.Warn("restarting the source of a failed move", "op", m.op, "err", err)
				return
			}
		}
	}
	g, ok, err := pveapi.FindGuest(ctx, m.dst.Client, vmid)
	if err != nil {
		sc.log.Warn("removing the target of a failed move", "op", m.op, "vmid", vmid, "err", err)
		return
	}
	if ok && g.HasTag(incomingTag) {
		if _, err := sc.destroy(ctx, m.dst, g, nil); err != nil {
			sc.log.Warn("removing the target of a failed move", "op", m.op, "vmid", vmid, "err", err)
			return
		}
	}
	sc.releaseTarget(ctx)
	sc.releaseQuota(ctx)
	sc.log.Info("move across zones undone", "op", m.op, "vm", m.id, "from", m.src.Name, "to", m.dst.Name)
}

// propFirst is the first element of a Proxmox property string.
func propFirst(s string) string {
	first, _, _ := strings.Cut(s, ",")
	return first
}

// dropProp removes key from a property list "k=v,...".
func dropProp(opts, key string) string {
	var out []string
	for p := range strings.SplitSeq(opts, ",") {
		if k, _, _ := strings.Cut(p, "="); k != key && p != "" {
			out = append(out, p)
		}
	}
	return strings.Join(out, ",")
}

// isDiskKey reports whether k is a disk slot of a guest config.
func isDiskKey(k string) bool {
	for _, bus := range []string{"scsi", "virtio", "sata", "ide", "efidisk", "tpmstate"} {
		if n, ok := strings.CutPrefix(k, bus); ok {
			if _, err := strconv.Atoi(n); err == nil {
				return true
			}
		}
	}
	return false
}

// recoverMove finishes or undoes a move across zones whose runner is gone,
// found as its target guest g (marked incoming) in zone z: if the source
// was marked moved the cut-over happened and the move is finished, else
// the target is removed with its addresses and the source runs again if
// it ran.
func recoverMove(ctx context.Context, d *deps, z Zone, g pveapi.Resource, in *Intent) {
	mi := in.Move
	if time.Since(mi.last()) < d.cfg.StaleAfter {
		return // perhaps live in another replica
	}
	sz, ok := d.find.zoneByID(ctx, mi.From)
	if !ok {
		return // the source's zone cannot be reached: wait
	}
	src, found, err := pveapi.FindGuest(ctx, sz.Client, mi.VMID)
	if err != nil {
		return
	}
	if d.eng.isLive(sz, mi.VMID) {
		return
	}
	m := &move{op: mi.Op, vdc: in.VDC, src: sz, dst: z, g: src, node: g.Node, running: mi.Running, nics: in.NICs, in: in}
	if !found {
		m.g = pveapi.Resource{VMID: mi.VMID}
	}
	if was, ok := wasOf(g.Tags()); ok {
		m.id = was.ID()
	}
	sc := &moveScope{deps: d, m: m, vmid: g.VMID}
	if found && src.HasTag(movedTag) || !found {
		d.log.Info("recovering a move across zones: finishing it", "op", mi.Op, "zone", z.Name, "vmid", g.VMID)
		if err := sc.finish(ctx); err != nil {
			d.log.Warn("finishing a move", "op", mi.Op, "err", err)
		}
		return
	}
	d.log.Info("recovering a move across zones: undoing it", "op", mi.Op, "zone", z.Name, "vmid", g.VMID)
	sc.rollback(ctx)
}
