package pvesim

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/flexplane/flexplane/pkg/support/atomicfile"
)

// stateVersion is the version of the state file format; a file of another version is
// refused at Start rather than misread.
const stateVersion = 1

// saveInterval is the shortest time between two writes of the state file: a burst of
// mutations costs one write.
const saveInterval = 200 * time.Millisecond

// interruptedExit is the exit status of a task that was running when the simulator
// stopped: what Proxmox reports for a worker that vanished in a node reboot.
const interruptedExit = "unexpected status"

// stateFile is the on-disk form of a cluster's model (Config.StateFile), JSON.
type stateFile struct {
	Version int            `json:"version"`
	Cluster string         `json:"cluster"`
	Saved   time.Time      `json:"saved"`
	NextPID uint32         `json:"next_pid"`
	Nodes   []nodeRecord   `json:"nodes"`
	Guests  []guestRecord  `json:"guests"`
	Volumes []volumeRecord `json:"volumes"`
	Pools   []poolRecord   `json:"pools"`
	SDN     sdnRecord      `json:"sdn"`
	Tasks   []taskRecord   `json:"tasks"`
	// Firewall is the cluster's firewall (cluster.fw): options, rules, ipsets, groups.
	Firewall *fwConf `json:"firewall,omitempty"`
	// StorageContent is each storage's content types (PUT /storage).
	StorageContent map[string][]string `json:"storage_content,omitempty"`
	// Storages are the storage entries POST /storage added (pbs.go).
	Storages []storageRecord `json:"storages,omitempty"`
	// HA is the HA configuration: resources and rules (the manager's view is derived
	// again at start).
	HA *haRecord `json:"ha,omitempty"`
	// BackupJobs are the backup jobs (/cluster/backup) and when each last ran.
	BackupJobs []backupJobRecord `json:"backup_jobs,omitempty"`
}

type backupJobRecord struct {
	ID   string    `json:"id"`
	Opts typedMap  `json:"opts"`
	Last time.Time `json:"last"`
}

type nodeRecord struct {
	Name       string              `json:"name"`
	Booted     time.Time           `json:"booted"`
	Ifaces     map[string]typedMap `json:"ifaces"`
	HasPending bool                `json:"has_pending,omitempty"`
	Pending    map[string]typedMap `json:"pending,omitempty"`
}

type guestRecord struct {
	VMID          int              `json:"vmid"`
	Node          string           `json:"node"`
	Pool          string           `json:"pool,omitempty"`
	Conf          typedMap         `json:"conf"`
	Pending       typedMap         `json:"pending,omitempty"`
	PendingDelete []string         `json:"pending_delete,omitempty"`
	Running       bool             `json:"running,omitempty"`
	Paused        bool             `json:"paused,omitempty"`
	StartedAt     time.Time        `json:"started_at,omitzero"`
	PID           int              `json:"pid,omitempty"`
	NetIn         int64            `json:"netin,omitempty"`
	NetOut        int64            `json:"netout,omitempty"`
	DiskRead      int64            `json:"diskread,omitempty"`
	DiskWrite     int64            `json:"diskwrite,omitempty"`
	Snapshots     []snapshotRecord `json:"snapshots,omitempty"`
	// CloudInit is the cloud-init instance-id whose user-data the guest ran.
	CloudInit string  `json:"cloudinit_instance,omitempty"`
	Firewall  *fwConf `json:"firewall,omitempty"`
}

type snapshotRecord struct {
	Name        string   `json:"name"`
	Description string   `json:"description,omitempty"`
	SnapTime    int64    `json:"snaptime"`
	VMState     bool     `json:"vmstate,omitempty"`
	Parent      string   `json:"parent,omitempty"`
	Conf        typedMap `json:"conf"`
}

type volumeRecord struct {
	VolID     string `json:"volid"`
	Storage   string `json:"storage"`
	Node      string `json:"node,omitempty"`
	Content   string `json:"content"`
	Format    string `json:"format,omitempty"`
	Size      int64  `json:"size"`
	VMID      int    `json:"vmid,omitempty"`
	CTime     int64  `json:"ctime"`
	Parent    string `json:"parent,omitempty"`
	Notes     string `json:"notes,omitempty"`
	Protected bool   `json:"protected,omitempty"`
	Data      []byte `json:"data,omitempty"`
	File      string `json:"file,omitempty"`
	// Dump is what a backup archive holds.
	Dump *dumpRecord `json:"dump,omitempty"`
	// PBS is the namespace of an archive on a Proxmox Backup Server
	// (pbsTarget.key), whose VolID is then its name there.
	PBS string `json:"pbs,omitempty"`
}

// dumpRecord is a backup archive's configuration and disks (backup.go).
type dumpRecord struct {
	Conf  typedMap         `json:"conf"`
	Disks []dumpDiskRecord `json:"disks,omitempty"`
}

type dumpDiskRecord struct {
	Key     string `json:"key"`
	Storage string `json:"storage"`
	Size    int64  `json:"size"`
	File    string `json:"file,omitempty"`
}

type poolRecord struct {
	ID      string `json:"id"`
	Comment string `json:"comment,omitempty"`
}

type sdnRecord struct {
	Current sdnConfigRecord `json:"current"`
	Running sdnConfigRecord `json:"running"`
	IPs     []ipRecord      `json:"ips"`
}

type sdnConfigRecord struct {
	Zones   map[string]typedMap `json:"zones"`
	VNets   map[string]typedMap `json:"vnets"`
	Subnets map[string]typedMap `json:"subnets"`
}

type ipRecord struct {
	Zone     string `json:"zone"`
	VNet     string `json:"vnet"`
	Subnet   string `json:"subnet"`
	IP       string `json:"ip"`
	MAC      string `json:"mac,omitempty"`
	Hostname string `json:"hostname,omitempty"`
	VMID     int    `json:"vmid,omitempty"`
	Gateway  bool   `json:"gateway,omitempty"`
}

type taskRecord struct {
	UPID    string    `json:"upid"`
	Node    string    `json:"node"`
	Type    string    `json:"type"`
	ID      string    `json:"id"`
	User    string    `json:"user"`
	PID     uint32    `json:"pid"`
	PStart  uint32    `json:"pstart"`
	Start   time.Time `json:"start"`
	End     time.Time `json:"end,omitzero"`
	Running bool      `json:"running,omitempty"`
	Exit    string    `json:"exit,omitempty"`
	Log     []string  `json:"log,omitempty"`
}

// typedMap is a config map whose values keep their Go types through JSON: each value is
// written as [tag, value] with tag s (string), i (int64), n (int), f (float64), b (bool),
// l ([]string) or z (nil).
type typedMap map[string]any

func (m typedMap) MarshalJSON() ([]byte, error) {
	out := make(map[string][2]any, len(m))
	for k, v := range m {
		var tag string
		switch v.(type) {
		case string:
			tag = "s"
		case int64:
			tag = "i"
		case int:
			tag = "n"
		case float64:
			tag = "f"
		case bool:
			tag = "b"
		case []string:
			tag = "l"
		case nil:
			tag = "z"
		default:
			return nil, fmt.Errorf("key %q: unsupported value type %T", k, v)
		}
		out[k] = [2]any{tag, v}
	}
	return json.Marshal(out)
}

// valueDecoders decode a typedMap value by its tag.
var valueDecoders = map[string]func(json.RawMessage) (any, error){
	"s": decodeAs[string], "i": decodeAs[int64], "n": decodeAs[int], "f": decodeAs[float64],
	"b": decodeAs[bool], "l": decodeAs[[]string], "z": func(json.RawMessage) (any, error) { return nil, nil },
}

func decodeAs[T any](raw json.RawMessage) (any, error) {
	var v T
	err := json.Unmarshal(raw, &v)
	return v, err
}

func (m *typedMap) UnmarshalJSON(b []byte) error {
	var raw map[string][2]json.RawMessage
	if err := json.Unmarshal(b, &raw); err != nil {
		return err
	}
	out := make(typedMap, len(raw))
	for k, tv := range raw {
		var tag string
		if err := json.Unmarshal(tv[0], &tag); err != nil {
			return fmt.Errorf("key %q: value tag: %w", k, err)
		}
		decode, ok := valueDecoders[tag]
		if !ok {
			return fmt.Errorf("key %q: unknown value tag %q", k, tag)
		}
		v, err := decode(tv[1])
		out[k] = v
		if err != nil {
			return fmt.Errorf("key %q: %w", k, err)
		}
	}
	*m = out
	return nil
}

func copyTyped(m map[string]any) typedMap {
	if m == nil {
		return nil
	}
	out := make(typedMap, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

func copyTypedObjects(m map[string]map[string]any) map[string]typedMap {
	out := make(map[string]typedMap, len(m))
	for id, obj := range m {
		out[id] = copyTyped(obj)
	}
	return out
}

func untypedObjects(m map[string]typedMap) map[string]map[string]any {
	out := make(map[string]map[string]any, len(m))
	for id, obj := range m {
		if obj == nil {
			obj = typedMap{}
		}
		out[id] = map[string]any(obj)
	}
	return out
}

// snapshot copies the model into its file form; the caller holds mu. Values in the
// copied maps are immutable (strings, numbers, slices never written in place), so the
// result can be encoded after mu is released.
func (st *state) snapshot() *stateFile {
	f := &stateFile{Version: stateVersion, Cluster: st.c.name, Saved: time.Now(), NextPID: st.nextPID, StorageContent: map[string][]string{},
		Storages: st.addedStorages()}
	for _, s := range st.storages {
		f.StorageContent[s.id] = slices.Clone(s.content)
	}
	for _, name := range st.c.nodes {
		n := st.nodes[name]
		r := nodeRecord{Name: name, Booted: n.booted, Ifaces: copyTypedObjects(n.ifaces)}
		if n.pendIfaces != nil {
			r.HasPending, r.Pending = true, copyTypedObjects(n.pendIfaces)
		}
		f.Nodes = append(f.Nodes, r)
	}
	for _, vmid := range slices.Sorted(maps.Keys(st.guests)) {
		g := st.guests[vmid]
		r := guestRecord{
			VMID: vmid, Node: g.node, Pool: g.pool, Conf: copyTyped(g.conf), Pending: copyTyped(g.pending),
			PendingDelete: sortedKeys(g.pendDel), Running: g.running, Paused: g.paused, PID: g.pid,
			NetIn: g.baseNetIn, NetOut: g.baseNetOut, DiskRead: g.baseRead, DiskWrite: g.baseWrite, CloudInit: g.ciInstance,
		}
		if g.running {
			r.StartedAt = g.startedAt
		}
		if g.fw != nil {
			r.Firewall = g.fw.clone()
		}
		for _, name := range sortedKeys(g.snaps) {
			s := g.snaps[name]
			r.Snapshots = append(r.Snapshots, snapshotRecord{Name: s.name, Description: s.description, SnapTime: s.snaptime, VMState: s.vmstate, Parent: s.parent, Conf: copyTyped(s.conf)})
		}
		f.Guests = append(f.Guests, r)
	}
	for _, key := range sortedKeys(st.volumes) {
		vols := st.volumes[key]
		pbs := ""
		if strings.HasPrefix(key, "pbs|") {
			pbs = key
		}
		for _, volid := range sortedKeys(vols) {
			v := vols[volid]
			id := v.volid
			if pbs != "" {
				id = volid // the archive's name in its namespace
			}
			f.Volumes = append(f.Volumes, volumeRecord{
				PBS: pbs, VolID: id, Storage: v.storage, Node: v.node, Content: v.content, Format: v.format, Size: v.size,
				VMID: v.vmid, CTime: v.ctime, Parent: v.parent, Notes: v.notes, Protected: v.protected, Data: v.data, File: v.file,
				Dump: dumpOf(v.dump),
			})
		}
	}
	for _, id := range sortedKeys(st.pools) {
		f.Pools = append(f.Pools, poolRecord{ID: id, Comment: st.pools[id].comment})
	}
	sdnRec := func(s *sdnConfig) sdnConfigRecord {
		return sdnConfigRecord{Zones: copyTypedObjects(s.zones), VNets: copyTypedObjects(s.vnets), Subnets: copyTypedObjects(s.subnets)}
	}
	f.SDN.Current, f.SDN.Running = sdnRec(st.sdn.current), sdnRec(st.sdn.running)
	for _, key := range sortedKeys(st.sdn.ips) {
		m := st.sdn.ips[key]
		f.SDN.IPs = append(f.SDN.IPs, ipRecord{Zone: m.zone, VNet: m.vnet, Subnet: m.subnet, IP: m.ip, MAC: m.mac, Hostname: m.hostname, VMID: m.vmid, Gateway: m.gateway})
	}
	f.Firewall = st.fw.clone()
	f.HA = st.ha.record()
	for _, id := range sortedKeys(st.backupJobs) {
		j := st.backupJobs[id]
		f.BackupJobs = append(f.BackupJobs, backupJobRecord{ID: id, Opts: typedMap(maps.Clone(j.opts)), Last: j.last})
	}
	f.Tasks = make([]taskRecord, 0, len(st.taskList))
	for _, t := range st.taskList {
		f.Tasks = append(f.Tasks, taskRecord{
			UPID: t.upid, Node: t.node, Type: t.typ, ID: t.id, User: t.user, PID: t.pid, PStart: t.pstart,
			Start: t.start, End: t.end, Running: t.running, Exit: t.exit, Log: t.log[:len(t.log):len(t.log)],
		})
	}
	return f
}

// restore replaces the fresh model with the file's, checking that it fits the cluster,
// then settles what a restart interrupts: running tasks end with "unexpected status" and
// guest locks are cleared, except that the half-made target of an interrupted clone is
// removed as qemu-server's failed clone removes it. The caller holds mu (or owns st).
func (st *state) restore(f *stateFile) error {
	if f.Version != stateVersion {
		return fmt.Errorf("format version %d, want %d", f.Version, stateVersion)
	}
	if f.Cluster != st.c.name {
		return fmt.Errorf("state of cluster %q, not %q", f.Cluster, st.c.name)
	}
	for id, content := range f.StorageContent {
		if s := st.storage(id); s != nil {
			s.content = slices.Clone(content)
		}
	}
	for _, r := range f.Nodes {
		n := st.nodes[r.Name]
		if n == nil {
			return fmt.Errorf("node %q is not one of this cluster's %d nodes", r.Name, len(st.c.nodes))
		}
		n.booted = r.Booted
		if r.Ifaces != nil {
			n.ifaces = untypedObjects(r.Ifaces)
		}
		n.pendIfaces = nil
		if r.HasPending {
			n.pendIfaces = untypedObjects(r.Pending)
		}
	}
	checkNode := func(what, node string) error {
		if st.nodes[node] == nil {
			return fmt.Errorf("%s is on node %q, which this cluster does not have", what, node)
		}
		return nil
	}
	for _, r := range f.Pools {
		st.pools[r.ID] = &pool{id: r.ID, comment: r.Comment}
	}
	for _, r := range f.Guests {
		if err := checkNode("VM "+strconv.Itoa(r.VMID), r.Node); err != nil {
			return err
		}
		if r.Conf == nil {
			return fmt.Errorf("VM %d has no config", r.VMID)
		}
		g := &guest{
			vmid: r.VMID, node: r.Node, pool: r.Pool, conf: r.Conf, running: r.Running, paused: r.Paused,
			startedAt: r.StartedAt, pid: r.PID, baseNetIn: r.NetIn, baseNetOut: r.NetOut, baseRead: r.DiskRead, baseWrite: r.DiskWrite,
			ciInstance: r.CloudInit,
		}
		if len(r.Pending) > 0 {
			g.pending = r.Pending
		}
		if r.Firewall != nil {
			g.fw = r.Firewall.normalize()
		}
		if len(r.PendingDelete) > 0 {
			g.pendDel = map[string]bool{}
			for _, k := range r.PendingDelete {
				g.pendDel[k] = true
			}
		}
		for _, sr := range r.Snapshots {
			if sr.Conf == nil {
				return fmt.Errorf("VM %d: snapshot %q has no config", r.VMID, sr.Name)
			}
			if g.snaps == nil {
				g.snaps = map[string]*snapshot{}
			}
			g.snaps[sr.Name] = &snapshot{name: sr.Name, description: sr.Description, snaptime: sr.SnapTime, vmstate: sr.VMState, parent: sr.Parent, conf: sr.Conf}
		}
		st.guests[r.VMID] = g
	}
	if err := st.addStorages(f.Storages); err != nil {
		return err
	}
	for _, r := range f.Volumes {
		if r.PBS != "" {
			if st.volumes[r.PBS] == nil {
				st.volumes[r.PBS] = map[string]*volume{}
			}
			st.volumes[r.PBS][r.VolID] = &volume{volid: r.VolID, storage: r.Storage, content: r.Content, format: r.Format, size: r.Size,
				vmid: r.VMID, ctime: r.CTime, notes: r.Notes, protected: r.Protected, dump: dumpFrom(r.Dump)}
			continue
		}
		s := st.storage(r.Storage)
		if s == nil {
			return fmt.Errorf("volume %q is on unknown storage %q", r.VolID, r.Storage)
		}
		if !s.shared {
			if err := checkNode("volume "+r.VolID, r.Node); err != nil {
				return err
			}
		}
		v := &volume{volid: r.VolID, storage: r.Storage, node: r.Node, content: r.Content, format: r.Format, size: r.Size,
			vmid: r.VMID, ctime: r.CTime, parent: r.Parent, notes: r.Notes, protected: r.Protected, data: r.Data, file: r.File}
		v.dump = dumpFrom(r.Dump)
		st.volumesOn(r.Node, r.Storage)[r.VolID] = v
	}
	sdnConf := func(r sdnConfigRecord) *sdnConfig {
		return &sdnConfig{zones: untypedObjects(r.Zones), vnets: untypedObjects(r.VNets), subnets: untypedObjects(r.Subnets)}
	}
	st.sdn.current, st.sdn.running = sdnConf(f.SDN.Current), sdnConf(f.SDN.Running)
	for _, r := range f.SDN.IPs {
		st.sdn.ips[r.Zone+"/"+r.IP] = &ipMapping{zone: r.Zone, vnet: r.VNet, subnet: r.Subnet, ip: r.IP, mac: r.MAC, hostname: r.Hostname, vmid: r.VMID, gateway: r.Gateway}
	}
	st.fw = f.Firewall.normalize()
	st.ha.load(f.HA)
	for _, r := range f.BackupJobs {
		st.backupJobs[r.ID] = &backupJob{id: r.ID, opts: params(r.Opts), last: r.Last}
	}
	st.nextPID = max(st.nextPID, f.NextPID)
	for _, r := range f.Tasks {
		if err := checkNode("task "+r.UPID, r.Node); err != nil {
			return err
		}
		t := &task{upid: r.UPID, node: r.Node, typ: r.Type, id: r.ID, user: r.User, pid: r.PID, pstart: r.PStart,
			start: r.Start, end: r.End, running: r.Running, exit: r.Exit, log: r.Log}
		if t.running {
			t.finish(errors.New(interruptedExit))
			t.end = f.Saved
		}
		st.tasks[t.upid] = t
		st.taskList = append(st.taskList, t)
	}
	for vmid, g := range st.guests {
		switch g.lock() {
		case "":
		case "clone":
			delete(st.guests, vmid)
			st.sdn.releaseVM(vmid)
		default:
			delete(g.conf, "lock")
		}
	}
	return nil
}

// persister writes the cluster's model to Config.StateFile after mutations, at most once
// per saveInterval, and once more at Close.
type persister struct {
	path  string
	kick  chan struct{} // capacity 1: a pending request to save
	stop  chan struct{} // closed by Close
	done  chan struct{} // closed when the save loop ends
	saves atomic.Int64  // files written, for tests
}

// loadState reads the state file into the fresh model; a missing file leaves it fresh.
// The caller owns c.st (Start, before serving).
func (c *Cluster) loadState(path string) error {
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("load state file %s: %w", path, err)
	}
	var f stateFile
	if err := json.Unmarshal(b, &f); err != nil {
		return fmt.Errorf("load state file %s: corrupt: %w", path, err)
	}
	if err := c.st.restore(&f); err != nil {
		return fmt.Errorf("load state file %s: incompatible: %w", path, err)
	}
	c.log.Info("pvesim state loaded", "file", path, "guests", len(f.Guests), "tasks", len(f.Tasks))
	return nil
}

// startPersister starts the save loop and asks for a first save, so the file exists
// (and holds what settling the loaded state changed) soon after Start.
func (c *Cluster) startPersister(path string) {
	p := &persister{path: path, kick: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{})}
	c.persist = p
	go c.saveLoop()
	c.markDirty()
}

// markDirty asks the save loop to write the state file; it never blocks and may be
// called with or without mu.
func (c *Cluster) markDirty() {
	c.kickNet()
	if c.persist == nil {
		return
	}
	select {
	case c.persist.kick <- struct{}{}:
	default:
	}
}

func (c *Cluster) saveLoop() {
	p := c.persist
	defer close(p.done)
	var last time.Time
	failures := 0
	for {
		select {
		case <-p.kick:
		case <-p.stop:
			return
		}
		// A failing disk is retried ever more slowly (up to every 6.4 s), not 5 times a second.
		if wait := saveInterval<<min(failures, 5) - time.Since(last); wait > 0 {
			t := time.NewTimer(wait)
			select {
			case <-t.C:
			case <-p.stop:
				t.Stop()
				return
			}
		}
		last = time.Now()
		err := c.saveState()
		switch {
		case err != nil:
			if failures == 0 {
				c.log.Error("save state: retrying", "file", p.path, "err", err)
			}
			failures++
			c.markDirty()
		case failures > 0:
			c.log.Info("save state: saved again", "file", p.path, "failures", failures)
			failures = 0
		}
	}
}

// stopPersister ends the save loop and writes the final state; the caller has stopped
// every source of mutations.
func (c *Cluster) stopPersister() error {
	if c.persist == nil {
		return nil
	}
	close(c.persist.stop)
	<-c.persist.done
	return c.saveState()
}

// saveState snapshots the model under mu and writes it outside mu: to a temporary file
// in the state file's directory, synced, then renamed over the state file.
func (c *Cluster) saveState() error {
	c.mu.Lock()
	f := c.st.snapshot()
	c.mu.Unlock()
	b, err := json.Marshal(f)
	if err != nil {
		return fmt.Errorf("save state: encode: %w", err)
	}
	if err := atomicfile.WriteFile(c.persist.path, b, 0o600); err != nil {
		return fmt.Errorf("save state: %w", err)
	}
	c.persist.saves.Add(1)
	return nil
}

// dumpOf is the record of archive a (nil for none).
func dumpOf(a *dumpArchive) *dumpRecord {
	if a == nil {
		return nil
	}
	r := &dumpRecord{Conf: copyTyped(a.conf)}
	for _, d := range a.disks {
		r.Disks = append(r.Disks, dumpDiskRecord{Key: d.key, Storage: d.storage, Size: d.size, File: d.file})
	}
	return r
}

// dumpFrom is the archive a state file's record holds (nil for none).
func dumpFrom(d *dumpRecord) *dumpArchive {
	if d == nil {
		return nil
	}
	a := &dumpArchive{conf: map[string]any(d.Conf)}
	for _, dd := range d.Disks {
		a.disks = append(a.disks, dumpDisk{key: dd.Key, storage: dd.Storage, size: dd.Size, file: dd.File})
	}
	return a
}
