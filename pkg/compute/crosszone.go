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

// keptVMIDs are the VMIDs of zone z that VMs which moved away from z keep
// in their ids (their fp-was tags), found in every zone that answers.
func (s *Service) keptVMIDs(ctx context.Context, z Zone) map[int]bool {
	kept := map[int]bool{}
	for _, zz := range s.cfg.Zones.Zones(ctx) {
		gs, err := pveapi.Guests(ctx, zz.Client)
		if err != nil {
			s.log.Warn("listing the VMIDs moved VMs keep", "zone", zz.Name, "err", err)
			continue
		}
		for _, g := range gs {
			if was, ok := wasOf(g.Tags()); ok && was.ZoneID == z.ID {
				kept[was.VMID] = true
			}
		}
	}
	return kept
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

// indexMoved records, of the guests of zone z, those that are not the VM
// their place names (see Service.moved).
func (s *Service) indexMoved(z Zone, guests []pveapi.Resource) {
	s.moved.mu.Lock()
	defer s.moved.mu.Unlock()
	for ref := range s.moved.m {
		if ref.ZoneID == z.ID {
			delete(s.moved.m, ref)
		}
	}
	for _, g := range guests {
		place := tenancy.VMRef{ZoneID: z.ID, VMID: g.VMID}
		if id, notVM := keptID(place, g.Tags()); notVM || id != place.ID() {
			s.moved.m[place] = id
		}
	}
}

// KeptID tells the id of the VM whose guest sits at place, as the last
// Recover of every zone (and the moves this process finished) saw it:
// the id it kept if it moved there across zones, else place's; notVM is
// true for a move's other copy, which is not the VM. A process that just
// started knows the moves once its first Recover has run.
func (s *Service) KeptID(place tenancy.VMRef) (id string, notVM bool) {
	s.moved.mu.Lock()
	defer s.moved.mu.Unlock()
	id, ok := s.moved.m[place]
	if !ok {
		return place.ID(), false
	}
	return id, id == ""
}

// PlaceOf is where the VM of id sits now if it moved across zones (as
// KeptID knows it).
func (s *Service) PlaceOf(id string) (tenancy.VMRef, bool) {
	s.moved.mu.Lock()
	defer s.moved.mu.Unlock()
	for place, kept := range s.moved.m {
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

// migrateAcross moves a VM to another zone: preflight before any disk I/O
// (each refusal a clear error that changes nothing), the target's
// addresses claimed, then a runner copies the disks agent to agent and
// cuts over (runMove).
func (s *Service) migrateAcross(ctx context.Context, z Zone, g pveapi.Resource, in MigrateInput) (*Operation, error) {
	if s.cfg.Volumes == nil {
		return nil, newError(KindInternal, "moving VMs across zones is not available")
	}
	tz, ok := s.zoneByName(ctx, in.Zone)
	if !ok {
		return nil, badInput("zone", "no zone %q can be reached", in.Zone)
	}
	m, err := s.preflight(ctx, z, tz, g, in)
	if err != nil {
		return nil, err
	}
	// While the move runs its target holds a copy of the disks: the VDC
	// must have room for them.
	if err := s.quota.ReserveStorage(ctx, m.vdc, moveReservation(m.op), tz.ID, "move", m.diskGiB()); err != nil {
		return nil, quotaError(m.vdc, err)
	}
	if err := s.claimTarget(ctx, m); err != nil {
		s.releaseMoveQuota(ctx, m)
		return nil, err
	}
	opID := taskOpID(z.ID, g.VMID, OpMigrate, "move:"+m.op)
	op := Operation{ID: opID, Kind: OpMigrate, State: OpRunning, Step: "prepare", VMID: in.ID, Started: time.Now(),
		Progress: &Progress{Total: m.total()}}
	s.record(m.vdc, tz.Name, op)
	s.setLive(z, g.VMID, m.op)
	s.log.Info("moving a VM across zones", "vm", in.ID, "from", z.Name, "to", tz.Name, "node", m.node, "disks", len(m.disks))
	s.spawn(func(ctx context.Context) {
		defer s.clearLive(z, g.VMID)
		s.finishOp(opID, s.runMove(ctx, m, opID))
	})
	return &op, nil
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

// releaseMoveQuota releases the quota reservation of m's disks' copy.
func (s *Service) releaseMoveQuota(ctx context.Context, m *move) {
	if err := s.quota.Release(ctx, m.vdc, moveReservation(m.op)); err != nil {
		s.log.Warn("releasing a move's quota", "op", m.op, "err", err)
	}
}

func (m *move) total() int64 {
	var n int64
	for _, d := range m.disks {
		n += d.size
	}
	return n
}

// preflight checks everything a move needs before any disk I/O.
func (s *Service) preflight(ctx context.Context, z, tz Zone, g pveapi.Resource, in MigrateInput) (*move, error) {
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
	if g.HAState != "" {
		return nil, newError(KindConflict, "the VM is managed by Proxmox HA (%s); remove it from HA first", g.HAState)
	}
	if cpu := propFirst(cfg.Str("cpu")); cpu == "host" || strings.HasPrefix(cpu, "host-") {
		return nil, newError(KindConflict, "the VM's CPU type is %q, tied to its cluster's CPUs; give it a named CPU model first", cpu)
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
	if err := s.planDisks(ctx, m); err != nil {
		return nil, err
	}
	if err := s.planNetworks(ctx, m, in.Networks); err != nil {
		return nil, err
	}
	if in.Host != "" {
		if m.node, err = s.targetNode(ctx, tz, in.Host); err != nil {
			return nil, err
		}
	} else {
		nodes, err := pveapi.Resources(ctx, tz.Client, "node")
		if err != nil {
			return nil, zoneDown(tz.Name, err)
		}
		for _, n := range nodes {
			if n.Type == "node" && n.Status == "online" && (m.node == "" || n.Node < m.node) {
				m.node = n.Node
			}
		}
		if m.node == "" {
			return nil, &Error{Kind: KindConflict, Field: "zone", Message: fmt.Sprintf("zone %s has no online host", tz.Name)}
		}
	}
	return m, nil
}

// planDisks finds the VM's disks (raw, on storage the target zone has).
func (s *Service) planDisks(ctx context.Context, m *move) error {
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
func (s *Service) planNetworks(ctx context.Context, m *move, given []NetworkMapping) error {
	to := map[string]string{}
	for i, nm := range given {
		ref, err := tenancy.ParseNetworkID(nm.From)
		if err != nil || ref.ZoneID != m.src.ID || !slices.ContainsFunc(m.in.NICs, func(n NICIntent) bool { return n.VNet == ref.VNet }) {
			return badInput(fmt.Sprintf("networks[%d].from", i), "the VM has no NIC on network %q", nm.From)
		}
		if _, err := s.network(ctx, m.dst, m.vdc, nm.To); err != nil {
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
			name, err := s.networkName(ctx, m.src, n.VNet)
			if err != nil {
				return err
			}
			id = tenancy.NetworkRef{ZoneID: m.dst.ID, VNet: tenancy.VNetID(m.vdc, name)}.ID()
			if _, err := s.network(ctx, m.dst, m.vdc, id); err != nil {
				if errors.Is(err, errNoNetwork) {
					return badInput("networks", "NIC %d is on network %q, which zone %s does not have: map it to one of its networks", i, name, m.dst.Name)
				}
				return zoneDown(m.dst.Name, err)
			}
		}
		sub, _ := s.network(ctx, m.dst, m.vdc, id)
		nic := NICIntent{SDNZone: sub.Zone, VNet: sub.VNet, MAC: n.MAC, Bits: sub.Prefix.Bits(), Gateway: gatewayString(sub.Gateway),
			Address: n.Address}
		m.nics = append(m.nics, nic)
		m.subnets = append(m.subnets, sub)
	}
	return nil
}

// networkName is the name of the VDC network of VNet vnet in zone z.
func (s *Service) networkName(ctx context.Context, z Zone, vnet string) (string, error) {
	var vn struct {
		Zone  string `json:"zone"`
		Alias string `json:"alias"`
	}
	if err := z.Client.Get(ctx, "/cluster/sdn/vnets/"+url.PathEscape(vnet), &vn); err != nil {
		return "", zoneDown(z.Name, err)
	}
	_, name, ok := tenancy.VNetOf(vn.Zone, vn.Alias)
	if !ok {
		return "", newError(KindConflict, "the VM's network %s is not a network of its VDC", vnet)
	}
	return name, nil
}

// claimTarget claims the NICs' addresses in the target zone's IPAM under
// their MACs: the same address if the target network has it free, else
// the first free one. A failed claim releases what it claimed.
func (s *Service) claimTarget(ctx context.Context, m *move) error {
	for i := range m.nics {
		n := &m.nics[i]
		s.addrs.hold(n.MAC)
		want, _ := netip.ParseAddr(n.Address)
		if !m.subnets[i].Assignable(want) {
			want = netip.Addr{}
		}
		addr, err := ipam.Claim(ctx, m.dst.Client, m.subnets[i], want, n.MAC)
		if errors.Is(err, ipam.ErrTaken) {
			addr, err = ipam.Claim(ctx, m.dst.Client, m.subnets[i], netip.Addr{}, n.MAC)
		}
		if err != nil {
			s.releaseTarget(ctx, m)
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
func (s *Service) releaseTarget(ctx context.Context, m *move) {
	var macs []string
	for _, n := range m.nics {
		macs = append(macs, n.MAC)
	}
	if err := ipam.ReleaseMACs(ctx, m.dst.Client, macs); err != nil {
		s.log.Warn("releasing the target's addresses", "op", m.op, "err", err)
	}
	s.addrs.drop(macs...)
}

// runMove copies a VM to its target zone and cuts over: the target guest
// (stopped, marked incoming, in no pool), the source stopped, each disk
// copied agent to agent and checked, then the cut-over (the source marked
// moved with the digest it read: from then on the target is the VM), the
// target finished (pool, tags, started if the source ran) and the source
// destroyed with its addresses released: the phases of movePhases. A
// failure before the cut-over undoes the target and restarts the source.
func (s *Service) runMove(ctx context.Context, m *move, opID string) error {
	sc := &moveScope{m: m, opID: opID}
	err := runPhases(ctx, s.engine, opID, m.op, s.movePhases(), sc)
	if sc.stopBeat != nil {
		sc.stopBeat()
	}
	if err == nil {
		return nil
	}
	if sc.vmid == 0 {
		// No target guest: its addresses and quota go back.
		s.releaseTarget(ctx, m)
		s.releaseMoveQuota(ctx, m)
		return err
	}
	if phase, _ := failedPhase(err); phase == "finish" || ctx.Err() != nil {
		// Cut over (the target is the VM: Recover finishes it), or shut
		// down (the move stays recorded for Recover).
		return err
	}
	s.setStep(opID, "rollback")
	s.rollbackMove(context.WithoutCancel(ctx), m, sc.vmid)
	return err
}

// moveScope is what the phases of a move across zones work on.
type moveScope struct {
	m    *move
	opID string
	vmid int // the target guest (target)
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
// and before the cut-over undoes the move (rollbackMove).
func (s *Service) movePhases() []phase[moveScope] {
	return []phase[moveScope]{
		{name: "target", run: func(ctx context.Context, sc *moveScope) error {
			vmid, err := s.createTarget(ctx, sc.m)
			if err != nil {
				return err
			}
			sc.vmid = vmid
			return nil
		}},
		{name: "stop", run: func(ctx context.Context, sc *moveScope) error {
			m := sc.m
			sc.stopBeat = s.heartbeat(ctx, m, sc.vmid)
			if !m.running {
				return nil
			}
			_, err := pveapi.Run(ctx, m.src.Client, "POST", fmt.Sprintf("/nodes/%s/qemu/%d/status/stop", m.g.Node, m.g.VMID), map[string]any{})
			return err
		}},
		{name: "copy", run: func(ctx context.Context, sc *moveScope) error {
			if err := s.copyDisks(ctx, sc.m, sc.opID, sc.vmid); err != nil {
				return err
			}
			// The cut-over's conditional writes must not race a beat.
			sc.stopBeat()
			sc.stopBeat = nil
			return nil
		}},
		{name: "cutover", run: func(ctx context.Context, sc *moveScope) error { return s.cutOver(ctx, sc.m) }},
		{name: "finish", run: func(ctx context.Context, sc *moveScope) error { return s.finishMove(ctx, sc.m, sc.vmid) }},
	}
}

// copyDisks copies each disk of the stopped source to the target guest
// vmid agent to agent, following the bytes moved.
func (s *Service) copyDisks(ctx context.Context, m *move, opID string, vmid int) error {
	start := time.Now()
	for i, d := range m.disks {
		to := VolumeRef{ZoneID: m.dst.ID, Node: m.node, Volume: targetVolume(m, vmid, i)}
		_, err := s.cfg.Volumes.MoveVolume(ctx, VolumeRef{ZoneID: m.src.ID, Node: m.g.Node, Volume: d.volume}, to, func(done, _ int64) {
			m.mu.Lock()
			m.done[d.key] = done
			var sum int64
			for _, n := range m.done {
				sum += n
			}
			m.mu.Unlock()
			s.setProgress(opID, sum, m.total(), float64(sum)/max(time.Since(start).Seconds(), 0.001))
		})
		if err != nil {
			return fmt.Errorf("compute: copy disk %s: %w", d.key, err)
		}
	}
	return nil
}

// heartbeat records, every StaleAfter/4 until the returned stop is
// called, that the runner of m is alive on the target guest vmid's move
// intent (MoveIntent.Beat): a copy longer than StaleAfter is not taken
// for a dead one by another replica's Recover. stop waits for a write in
// flight, so that the cut-over's conditional writes do not race it.
func (s *Service) heartbeat(ctx context.Context, m *move, vmid int) (stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(max(s.cfg.StaleAfter/4, 50*time.Millisecond))
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			if err := s.beat(ctx, m, vmid); err != nil && ctx.Err() == nil {
				s.log.Warn("recording a move's heartbeat", "op", m.op, "vmid", vmid, "err", err)
			}
		}
	}()
	return func() { cancel(); <-done }
}

// beat writes the time into the move intent of the target guest vmid,
// conditional on the digest read.
func (s *Service) beat(ctx context.Context, m *move, vmid int) error {
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
func (s *Service) createTarget(ctx context.Context, m *move) (int, error) {
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
	if m.cfg.Str("ide2") != "" && strings.Contains(m.cfg.Str("ide2"), "cloudinit") {
		params["ide2"] = m.storage + ":cloudinit"
	}
	for _, d := range m.disks {
		gib := (d.size + 1<<30 - 1) >> 30
		v := fmt.Sprintf("%s:%d", m.storage, gib)
		if d.opts != "" {
			v += "," + d.opts
		}
		params[d.key] = v
	}
	vmid := m.g.VMID                // the same VMID if it is free there
	kept := s.keptVMIDs(ctx, m.dst) // and not one a VM that left the zone keeps
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
	for i, n := range m.nics {
		a, _ := netip.ParseAddr(n.Address)
		if err := ipam.Assign(ctx, m.dst.Client, n.SDNZone, n.VNet, a, n.MAC, vmid); err != nil {
			s.log.Warn("recording the target address's guest", "nic", i, "err", err)
		}
	}
	return vmid, nil
}

// cutOver marks the source moved, conditional on the digest read: from
// then on the target is the VM.
func (s *Service) cutOver(ctx context.Context, m *move) error {
	cfg, err := pveapi.GuestConfig(ctx, m.src.Client, m.g.Node, m.g.VMID)
	if err != nil {
		return err
	}
	tags := append(tenancy.SplitTags(cfg.Str("tags")), movedTag, tenancy.OpTag(m.op))
	_, err = pveapi.Run(ctx, m.src.Client, "POST", fmt.Sprintf("/nodes/%s/qemu/%d/config", m.g.Node, m.g.VMID),
		map[string]any{"tags": tenancy.JoinTags(tags), "digest": cfg.Digest()})
	return err
}

// finishMove makes the target the VM (in the VDC's pool, unmarked,
// started if the source ran) and destroys the source, releasing its
// addresses.
func (s *Service) finishMove(ctx context.Context, m *move, vmid int) error {
	if err := s.ensurePool(ctx, m.dst, m.vdc); err != nil {
		return err
	}
	if err := m.dst.Client.Put(ctx, "/pools/"+tenancy.PoolID(m.vdc), map[string]any{"vms": vmid}, nil); err != nil && !pveapi.IsAlreadyExists(err) {
		return fmt.Errorf("compute: add the target to the pool: %w", err)
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
	src, ok, err := pveapi.FindGuest(ctx, m.src.Client, m.g.VMID)
	if err != nil {
		return err
	}
	if ok {
		// destroy releases the source's addresses (the MACs are the same,
		// but the mappings are the source zone's).
		if _, err := s.destroySource(ctx, m.src, src); err != nil {
			return fmt.Errorf("compute: remove the source: %w", err)
		}
	}
	for _, n := range m.nics {
		s.addrs.drop(n.MAC)
	}
	s.releaseMoveQuota(ctx, m)
	s.moved.mu.Lock()
	if m.id != "" {
		s.moved.m[tenancy.VMRef{ZoneID: m.dst.ID, VMID: vmid}] = m.id
	}
	delete(s.moved.m, tenancy.VMRef{ZoneID: m.src.ID, VMID: m.g.VMID})
	s.moved.mu.Unlock()
	s.log.Info("VM moved across zones", "vm", m.id, "from", m.src.Name, "to", m.dst.Name, "vmid", vmid)
	return nil
}

// destroySource destroys a moved source without touching quota (the VM
// lives on).
func (s *Service) destroySource(ctx context.Context, z Zone, g pveapi.Resource) (string, error) {
	return s.destroy(ctx, z, g, nil)
}

// rollbackMove undoes a move that has not cut over: the source runs again
// if it ran, then the target guest and its addresses go. It stops at the
// first step that fails (a zone out of reach), leaving the target marked
// incoming with its move recorded, for Recover to finish the undo once
// both zones answer: until then the source stays the VM.
func (s *Service) rollbackMove(ctx context.Context, m *move, vmid int) {
	if m.running {
		src, ok, err := pveapi.FindGuest(ctx, m.src.Client, m.g.VMID)
		if err != nil {
			s.log.Warn("restarting the source of a failed move", "op", m.op, "err", err)
			return
		}
		if ok && src.Status != "running" {
			if _, err := pveapi.Run(ctx, m.src.Client, "POST", fmt.Sprintf("/nodes/%s/qemu/%d/status/start", src.Node, src.VMID), map[string]any{}); err != nil {
				s.log.Warn("restarting the source of a failed move", "op", m.op, "err", err)
				return
			}
		}
	}
	g, ok, err := pveapi.FindGuest(ctx, m.dst.Client, vmid)
	if err != nil {
		s.log.Warn("removing the target of a failed move", "op", m.op, "vmid", vmid, "err", err)
		return
	}
	if ok && g.HasTag(incomingTag) {
		if _, err := s.destroy(ctx, m.dst, g, nil); err != nil {
			s.log.Warn("removing the target of a failed move", "op", m.op, "vmid", vmid, "err", err)
			return
		}
	}
	s.releaseTarget(ctx, m)
	s.releaseMoveQuota(ctx, m)
	s.log.Info("move across zones undone", "op", m.op, "vm", m.id, "from", m.src.Name, "to", m.dst.Name)
}

// setProgress updates the progress of a running operation of this process.
func (s *Service) setProgress(id string, done, total int64, rate float64) {
	s.update(id, func(op *Operation) { op.Progress = &Progress{Done: done, Total: total, BytesPerSecond: rate} })
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
func (s *Service) recoverMove(ctx context.Context, z Zone, g pveapi.Resource, in *Intent) {
	mi := in.Move
	if time.Since(mi.last()) < s.cfg.StaleAfter {
		return // perhaps live in another replica
	}
	sz, ok := s.zoneByID(ctx, mi.From)
	if !ok {
		return // the source's zone cannot be reached: wait
	}
	src, found, err := pveapi.FindGuest(ctx, sz.Client, mi.VMID)
	if err != nil {
		return
	}
	if s.isLive(sz, mi.VMID) {
		return
	}
	m := &move{op: mi.Op, vdc: in.VDC, src: sz, dst: z, g: src, node: g.Node, running: mi.Running, nics: in.NICs, in: in}
	if !found {
		m.g = pveapi.Resource{VMID: mi.VMID}
	}
	if was, ok := wasOf(g.Tags()); ok {
		m.id = was.ID()
	}
	if found && src.HasTag(movedTag) || !found {
		s.log.Info("recovering a move across zones: finishing it", "op", mi.Op, "zone", z.Name, "vmid", g.VMID)
		if err := s.finishMove(ctx, m, g.VMID); err != nil {
			s.log.Warn("finishing a move", "op", mi.Op, "err", err)
		}
		return
	}
	s.log.Info("recovering a move across zones: undoing it", "op", mi.Op, "zone", z.Name, "vmid", g.VMID)
	s.rollbackMove(ctx, m, g.VMID)
}
