package compute

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/flexplane/flexplane/pkg/catalog"
	"github.com/flexplane/flexplane/pkg/proxmox/pveapi"
	"github.com/flexplane/flexplane/pkg/support/paging"
	"github.com/flexplane/flexplane/pkg/tenancy"
)

// Backups. A backup is a Proxmox backup archive (vzdump) on the storage a
// storage profile of kind BACKUP maps in the VM's zone; nothing of it is
// kept anywhere else. Its tenancy is in its notes, which vzdump writes
// from the notes-template the create sends: a first line naming the VDC,
// the VM and the VM's name (backupNotes), then the description. Only
// archives whose notes name the caller's VDC are listed, deleted or
// restored; any other answers NOT_FOUND. A backup job of Proxmox's that
// sends the same notes-template makes archives listed the same way.

// OpCreateBackup is the kind of a backup's operation, which follows its
// vzdump task.
const OpCreateBackup OpKind = "CREATE_BACKUP"

// BackupStatus is where a backup is.
type BackupStatus string

// Backup states.
const (
	BackupRunning   BackupStatus = "RUNNING"
	BackupSucceeded BackupStatus = "SUCCEEDED"
	BackupFailed    BackupStatus = "FAILED"
)

// MaxBackupDescription bounds a backup's description, in bytes.
const MaxBackupDescription = 1024

// Backup is a backup of a VM.
type Backup struct {
	// ID is the backup's id: a tenancy.BackupRef's for an archive, the
	// id of its operation while it runs or once it failed.
	ID string
	// VM is the id of the VM it was taken of (which may be gone);
	// VMName the VM's name then.
	VM, VMName string
	// VDC is the VDC it belongs to.
	VDC string
	// Zone and ZoneID are the name and identity of its zone.
	Zone, ZoneID string
	// Created is when it was taken (started, while it runs).
	Created time.Time
	// SizeBytes is the archive's size (0 until it exists).
	SizeBytes int64
	Status    BackupStatus
	// Message is Proxmox's account of a failure.
	Message string
	// Description is the description it was created with.
	Description string
}

// BackupInput asks for a backup of a VM.
type BackupInput struct {
	// Description is free text, at most MaxBackupDescription bytes.
	Description string
	// StorageProfile is a storage profile of kind BACKUP with a storage
	// in the VM's zone; "" takes the zone's only one.
	StorageProfile string
}

// RestoreInput asks for a new VM restored from a backup.
type RestoreInput struct {
	// Backup is the backup's id (Backup.ID of a SUCCEEDED backup).
	Backup string
	// Name is the new VM's name, a DNS name no other VM of the VDC has.
	Name string
	// Host pins the new VM to a host of the zone (a host id or its node
	// name); "" lets placement choose.
	Host string
}

// Backups is the backups of the service's VMs.
type Backups struct{ d *deps }

// Backups returns the backups of the service's VMs: archives of their
// disks (the Service's budget of methods is spent, so they hang off its
// disks).
func (s *Disks) Backups() *Backups { return &Backups{d: s.d} }

// backupHeader starts the first line of a flexplane backup's notes.
const backupHeader = "flexplane-backup"

// backupNotes is the notes-template of a backup of VM vmID (named name)
// of vdc with description: "flexplane-backup vdc=V vm=ID name=N", then the
// description on the lines after it, escaped for vzdump's template
// ("\n" a new line, "\\" a backslash).
func backupNotes(vdc, vmID, name, description string) string {
	s := fmt.Sprintf("%s vdc=%s vm=%s name=%s", backupHeader, vdc, vmID, name)
	if description != "" {
		s += `\n` + strings.NewReplacer(`\`, `\\`, "\n", `\n`, "\r", "").Replace(description)
	}
	return s
}

// backupMeta is what a backup's notes say.
type backupMeta struct {
	vdc, vm, name, description string
}

// parseBackupNotes reads the notes of an archive; ok is false for one
// that is not a flexplane backup. Only the first line is flexplane's: the
// description (the rest) cannot change it.
func parseBackupNotes(notes string) (backupMeta, bool) {
	first, rest, _ := strings.Cut(notes, "\n")
	f := strings.Fields(first)
	if len(f) != 4 || f[0] != backupHeader {
		return backupMeta{}, false
	}
	var m backupMeta
	for _, kv := range f[1:] {
		k, v, _ := strings.Cut(kv, "=")
		switch k {
		case "vdc":
			m.vdc = v
		case "vm":
			m.vm = v
		case "name":
			m.name = v
		}
	}
	if m.vdc == "" || m.vm == "" {
		return backupMeta{}, false
	}
	m.description = rest
	return m, true
}

// backupStore is a storage of backups in a zone: the storage a BACKUP
// profile maps there, and whether every node sees the same archives. On a
// Proxmox Backup Server (pbs set), the storage is the operator's entry and
// each VDC's backups go to an entry of its own (pbsbackups.go).
type backupStore struct {
	profile, storage string
	shared           bool
	pbs              *pbsBase
}

// backupStores lists the storages of the BACKUP profiles in zone z.
func backupStores(ctx context.Context, d *deps, z Zone) ([]backupStore, error) {
	profiles, err := catalog.List[*catalog.StorageProfile](ctx, d.cfg.Catalog)
	if err != nil {
		return nil, internal("reading the storage profiles failed", err)
	}
	var out []backupStore
	for _, p := range profiles {
		pool, ok := p.PoolFor(z.Name)
		if !p.IsBackup() || !ok {
			continue
		}
		var cfg struct {
			pbsBase
			Type   string `json:"type"`
			Shared int    `json:"shared"`
		}
		if err := z.Client.Get(ctx, "/storage/"+url.PathEscape(pool), &cfg); err != nil {
			return nil, zoneDown(z.Name, err)
		}
		shared := cfg.Shared == 1 || cfg.Type == "pbs" || cfg.Type == "nfs" || cfg.Type == "cifs" || cfg.Type == "cephfs"
		st := backupStore{profile: p.Name, storage: pool, shared: shared}
		if cfg.Type == "pbs" {
			st.pbs = &cfg.pbsBase
		}
		out = append(out, st)
	}
	return out, nil
}

// onlineNodes lists the online nodes of zone z.
func onlineNodes(ctx context.Context, z Zone) ([]string, error) {
	rs, err := pveapi.Resources(ctx, z.Client, "node")
	if err != nil {
		return nil, err
	}
	var out []string
	for _, r := range rs {
		if r.Type == "node" && r.Status == "online" {
			out = append(out, r.Node)
		}
	}
	slices.Sort(out)
	return out, nil
}

// archive is a backup archive of a VDC as found on its storage.
type archive struct {
	ref   tenancy.BackupRef
	store backupStore
	vol   pveapi.BackupVolume
	meta  backupMeta
}

func (a archive) backup(z Zone) Backup {
	return Backup{ID: a.ref.ID(), VM: a.meta.vm, VMName: a.meta.name, VDC: a.meta.vdc, Zone: z.Name, ZoneID: z.ID, Created: a.vol.Created,
		SizeBytes: a.vol.Size, Status: BackupSucceeded, Description: a.meta.description}
}

// archives lists the archives of vdc in zone z, on every backup storage
// (each node's, for a storage that is not shared).
func archives(ctx context.Context, d *deps, z Zone, vdc string) ([]archive, error) {
	stores, err := backupStores(ctx, d, z)
	if err != nil || len(stores) == 0 {
		return nil, err
	}
	nodes, err := onlineNodes(ctx, z)
	if err != nil {
		return nil, zoneDown(z.Name, err)
	}
	var out []archive
	for _, st := range stores {
		on := nodes
		if st.shared && len(nodes) > 0 {
			on = nodes[:1]
		}
		storage := st.of(vdc)
		for _, n := range on {
			vols, err := pveapi.BackupVolumes(ctx, z.Client, n, storage)
			if err != nil {
				if st.pbs != nil && pveapi.IsNotFound(err) {
					break // the VDC has no entry yet: no backups there
				}
				return nil, zoneDown(z.Name, err)
			}
			for _, v := range vols {
				m, ok := parseBackupNotes(v.Notes)
				if !ok || m.vdc != vdc {
					continue
				}
				if st.pbs != nil {
					// PBS lists the notes' first line: the description
					// is in the rest.
					full, err := pveapi.BackupNotes(ctx, z.Client, n, storage, v.VolID)
					if err != nil {
						return nil, zoneDown(z.Name, err)
					}
					if fm, ok := parseBackupNotes(full); ok && fm.vdc == vdc {
						m = fm
					}
				}
				out = append(out, archive{ref: tenancy.BackupRef{ZoneID: z.ID, Node: n, VolID: v.VolID}, store: st, vol: v, meta: m})
			}
		}
	}
	return out, nil
}

// findArchive finds backup id of vdc: NOT_FOUND (naming field) for one
// that does not exist, is not on a backup storage, or is another VDC's.
func findArchive(ctx context.Context, d *deps, vdc, id, field string) (Zone, archive, error) {
	gone := &Error{Kind: KindNotFound, Field: field, Message: "no such backup"}
	ref, err := tenancy.ParseBackupID(id)
	if err != nil {
		return Zone{}, archive{}, gone
	}
	z, ok := d.find.zoneByID(ctx, ref.ZoneID)
	if !ok {
		if _, down := d.find.unreachableZone(ctx, ref.ZoneID); down {
			return Zone{}, archive{}, zoneDown(ref.ZoneID, errUnreachable)
		}
		return Zone{}, archive{}, gone
	}
	storage, _, _ := strings.Cut(ref.VolID, ":")
	stores, err := backupStores(ctx, d, z)
	if err != nil {
		return Zone{}, archive{}, err
	}
	i := slices.IndexFunc(stores, func(s backupStore) bool { return s.of(vdc) == storage })
	if i < 0 {
		return Zone{}, archive{}, gone
	}
	vols, err := pveapi.BackupVolumes(ctx, z.Client, ref.Node, storage)
	if err != nil {
		if pveapi.IsNotFound(err) {
			return Zone{}, archive{}, gone
		}
		return Zone{}, archive{}, zoneDown(z.Name, err)
	}
	for _, v := range vols {
		if v.VolID != ref.VolID {
			continue
		}
		m, ok := parseBackupNotes(v.Notes)
		if !ok || m.vdc != vdc {
			return Zone{}, archive{}, gone
		}
		return z, archive{ref: ref, store: stores[i], vol: v, meta: m}, nil
	}
	return Zone{}, archive{}, gone
}

// List lists the backups of vdc, newest first: every archive of the VDC
// in the reachable zones, and the backups running or failed of its VMs
// (from their vzdump tasks); of VM vm only, unless vm is "". A zone that
// does not answer is passed over, its error returned with what the others
// have.
func (b *Backups) List(ctx context.Context, vdc, vm string) ([]*Backup, error) {
	d := b.d
	zones := d.cfg.Zones.Zones(ctx)
	if vm != "" {
		z, _, _, err := d.find.lookup(ctx, vdc, vm)
		if err != nil {
			return nil, err
		}
		zones = []Zone{z}
	}
	lists, errs := eachZone(ctx, d.find.timeout, zones, func(ctx context.Context, z Zone) ([]Backup, error) {
		return zoneBackups(ctx, d, z, vdc, vm)
	})
	out := []*Backup{}
	for _, l := range lists {
		for i := range l {
			out = append(out, &l[i])
		}
	}
	slices.SortStableFunc(out, func(a, b *Backup) int { return strings.Compare(BackupKey(a), BackupKey(b)) })
	return out, errors.Join(errs...)
}

// BackupKey is the paging key of a backup: the newest first, then by id.
func BackupKey(b *Backup) string {
	return paging.Key(fmt.Sprintf("%019d", math.MaxInt64-b.Created.Unix()), b.ID)
}

// zoneBackups lists the backups of vdc (of VM vm, unless "") in zone z.
func zoneBackups(ctx context.Context, d *deps, z Zone, vdc, vm string) ([]Backup, error) {
	arcs, err := archives(ctx, d, z, vdc)
	if err != nil {
		return nil, err
	}
	var out []Backup
	for _, a := range arcs {
		if vm == "" || a.meta.vm == vm {
			out = append(out, a.backup(z))
		}
	}
	tasks, err := backupTasks(ctx, d, z, vdc, vm)
	if err != nil {
		return nil, err
	}
	return append(out, tasks...), nil
}

// backupTasks are the backups of vdc's VMs in zone z (of VM vm, unless
// "") that run or failed, from the zone's recent vzdump tasks: only tasks
// of the guest that is the VM now (taskOfThisGuest).
func backupTasks(ctx context.Context, d *deps, z Zone, vdc, vm string) ([]Backup, error) {
	tasks, err := pveapi.ClusterTasks(ctx, z.Client)
	if err != nil {
		return nil, zoneDown(z.Name, err)
	}
	var out []Backup
	for _, t := range tasks {
		if t.Type != "vzdump" || (!t.Running && t.ExitStatus == "OK") {
			continue
		}
		var vmid int
		if _, err := fmt.Sscanf(t.ID, "%d", &vmid); err != nil || vmid < 100 {
			continue
		}
		_, g, in, _, err := d.find.lookupAt(ctx, vdc, z, vmid)
		if err != nil || in == nil || !taskOfThisGuest(t.Started, in) {
			continue // not a VM of the VDC, or an earlier guest's task
		}
		id, _ := keptID(tenancy.VMRef{ZoneID: z.ID, VMID: vmid}, g.Tags())
		if vm != "" && id != vm {
			continue
		}
		bk := Backup{ID: taskOpID(z.ID, vmid, OpCreateBackup, t.UPID), VM: id, VMName: g.Name, VDC: vdc, Zone: z.Name, ZoneID: z.ID,
			Created: t.Started, Status: BackupRunning}
		if !t.Running {
			bk.Status, bk.Message = BackupFailed, backupFailure(ctx, z, t.UPID, t.ExitStatus)
		}
		out = append(out, bk)
	}
	return out, nil
}

// backupErrorRE is vzdump's line for a guest whose backup failed.
var backupErrorRE = regexp.MustCompile(`^ERROR: Backup of VM \d+ failed - (.*)$`)

// backupFailure is Proxmox's account of the failed vzdump task upid: the
// error its log gives for the guest, else its exit status.
func backupFailure(ctx context.Context, z Zone, upid, exit string) string {
	lines, err := pveapi.TaskLog(ctx, z.Client, upid)
	if err == nil {
		for _, l := range lines {
			if m := backupErrorRE.FindStringSubmatch(l); m != nil {
				return m[1]
			}
		}
	}
	return exit
}

// Create backs VM id of vdc up (every disk; a running VM in snapshot mode)
// to the storage of in.StorageProfile in the VM's zone. The operation
// follows the vzdump task.
func (b *Backups) Create(ctx context.Context, vdc, id string, in BackupInput) (*Operation, error) {
	sc := &backupScope{deps: b.d, vdc: vdc, id: id, in: in}
	if err := runPhases(ctx, b.d.eng, "", "", backupPhases(), sc); err != nil {
		return nil, cause(err)
	}
	return taskOp(sc.z, sc.g, id, OpCreateBackup, sc.upid), nil
}

// backupScope is what the phases of a backup's creation work on.
type backupScope struct {
	*deps
	vdc, id string
	in      BackupInput
	// z, g and storage: the VM's zone and guest, and the backup storage
	// (check).
	z       Zone
	g       pveapi.Resource
	store   backupStore
	storage string // the VDC's storage of store (storage)
	upid    string // the vzdump task (request)
}

// backupPhases are the phases of a backup's creation, in order: check
// (the input, the VM: created, not locked; the backup storage), storage
// (the VDC's entry on a Proxmox Backup Server), request (the vzdump
// task).
func backupPhases() []phase[backupScope] {
	return []phase[backupScope]{
		step("check", (*backupScope).check),
		step("storage", (*backupScope).vdcStorage),
		step("request", (*backupScope).request),
	}
}

// check checks the input, the VM and the storage of a backup.
func (sc *backupScope) check(ctx context.Context) error {
	if len(sc.in.Description) > MaxBackupDescription || !utf8.ValidString(sc.in.Description) {
		return badInput("description", "a description is UTF-8 of at most %d bytes", MaxBackupDescription)
	}
	z, g, _, err := sc.find.lookup(ctx, sc.vdc, sc.id)
	if err != nil {
		return err
	}
	if isCreating(g) || sc.eng.isLive(z, g.VMID) {
		return newError(KindConflict, "the VM is still being created")
	}
	if g.Lock != "" {
		return newError(KindConflict, "the VM is busy (Proxmox holds it locked: %s)", g.Lock)
	}
	sc.z, sc.g = z, g
	if sc.store, err = pickBackupStore(ctx, sc.deps, z, sc.in.StorageProfile); err != nil {
		return err
	}
	return checkBackupQuota(ctx, sc.deps, sc.vdc, z, g)
}

// pickBackupStore is the backup store of profile name in zone z, or of
// the zone's only BACKUP profile for "" (BAD_USER_INPUT storageProfile
// otherwise).
func pickBackupStore(ctx context.Context, d *deps, z Zone, name string) (backupStore, error) {
	stores, err := backupStores(ctx, d, z)
	if err != nil {
		return backupStore{}, err
	}
	switch {
	case name != "":
		p, err := catalog.Get[*catalog.StorageProfile](ctx, d.cfg.Catalog, name)
		if err != nil {
			return backupStore{}, catalogInput("storageProfile", "storage profile", name, err)
		}
		if !p.IsBackup() {
			return backupStore{}, badInput("storageProfile", "storage profile %s is not of kind BACKUP", name)
		}
		i := slices.IndexFunc(stores, func(s backupStore) bool { return s.profile == name })
		if i < 0 {
			return backupStore{}, badInput("storageProfile", "storage profile %s has no storage in zone %s", name, z.Name)
		}
		return stores[i], nil
	case len(stores) == 0:
		return backupStore{}, badInput("storageProfile", "zone %s has no storage profile of kind BACKUP", z.Name)
	case len(stores) > 1:
		return backupStore{}, badInput("storageProfile", "zone %s has %d storage profiles of kind BACKUP: name one", z.Name, len(stores))
	}
	return stores[0], nil
}

// vdcStore is the storage of store that holds vdc's archives, made first
// when it is the VDC's own entry on a Proxmox Backup Server.
func vdcStore(ctx context.Context, z Zone, store backupStore, vdc string) (string, error) {
	if store.pbs != nil {
		if err := ensurePBSEntry(ctx, z, store, vdc); err != nil {
			return "", err
		}
	}
	return store.of(vdc), nil
}

// vdcStorage makes sure the VDC's storage of the backup exists: its own
// entry on a Proxmox Backup Server, the profile's storage otherwise.
func (sc *backupScope) vdcStorage(ctx context.Context) error {
	var err error
	sc.storage, err = vdcStore(ctx, sc.z, sc.store, sc.vdc)
	return err
}

// request asks Proxmox for the vzdump task. It prunes nothing (remove=0):
// retention is the schedules'.
func (sc *backupScope) request(ctx context.Context) error {
	id := sc.id
	if was, ok := wasOf(sc.g.Tags()); ok {
		id = was.ID()
	}
	params := map[string]any{
		"vmid": sc.g.VMID, "storage": sc.storage, "mode": "snapshot", "compress": "zstd", "remove": 0,
		"notes-template": backupNotes(sc.vdc, id, sc.g.Name, sc.in.Description),
	}
	if err := sc.z.Client.Post(ctx, fmt.Sprintf("/nodes/%s/vzdump", sc.g.Node), params, &sc.upid); err != nil {
		return conflict(err)
	}
	return nil
}

// Delete deletes backup id of vdc and waits until its storage no longer
// lists it.
func (b *Backups) Delete(ctx context.Context, vdc, id string) error {
	z, a, err := findArchive(ctx, b.d, vdc, id, "id")
	if err != nil {
		return err
	}
	if a.vol.Protected {
		return newError(KindConflict, "the backup is protected in Proxmox")
	}
	storage, _, _ := strings.Cut(a.ref.VolID, ":")
	_, err = pveapi.Run(ctx, z.Client, "DELETE", fmt.Sprintf("/nodes/%s/storage/%s/content/%s",
		url.PathEscape(a.ref.Node), url.PathEscape(storage), a.ref.VolID), nil)
	if err != nil {
		if pveapi.IsNotFound(err) {
			return &Error{Kind: KindNotFound, Field: "id", Message: "no such backup"}
		}
		return conflict(err)
	}
	return nil
}

// restoreSource is the backup a restore makes its guest from.
type restoreSource struct {
	// node is the node whose storage lists the archive; volid the
	// archive.
	node, volid string
}

// params are the parameters of the restore of guest vmid with intent in:
// the new guest gets new MACs (which the configure phase then sets to the
// intent's), its disks on the intent's storage, the VDC's pool, and the
// intent, name and marker tags once the archive is restored (Proxmox
// applies them over the restored configuration).
func (r *restoreSource) params(vmid int, in *Intent) map[string]any {
	return map[string]any{
		"vmid": vmid, "archive": r.volid, "storage": in.Storage, "unique": 1, "pool": tenancy.PoolID(in.VDC),
		"name": in.Name, "description": in.Description(), "tags": tenancy.GuestTags(in.VDC, tenancy.CreatingTag, tenancy.OpTag(in.Op)),
	}
}

// Restore creates a new VM of vdc from backup in.Backup, as CreateVM
// creates one: a new VMID and MACs, addresses from the IPAM on the
// networks of the backed-up VM, its intent (sizes, user, keys, security
// groups) for the new VM, its own user-data in a snippet of the new VM's
// while the backed-up VM is there to read it from, quota reserved,
// placed by placement (on the archive's host when its storage is not
// shared), recovered like any create. The name must not be another VM's
// of the VDC (CONFLICT), nor another restore's in flight.
func (b *Backups) Restore(ctx context.Context, vdc string, in RestoreInput) (*VM, *Operation, error) {
	d := b.d
	vctx, cancel := context.WithTimeout(ctx, d.find.timeout)
	p, intent, err := restorePlan(vctx, d, vdc, in)
	cancel()
	if err != nil {
		return nil, nil, err
	}
	return startCreate(ctx, d, p, intent)
}

// restorePlan checks a restore and plans it: the backup, the VM it was
// taken of (its intent, read from the archive), the networks, the name
// and the host.
func restorePlan(ctx context.Context, d *deps, vdc string, in RestoreInput) (*plan, *Intent, error) {
	if !validDNSName(in.Name) {
		return nil, nil, badInput("name", "name must be a DNS name of lower-case letters, digits, '-' and '.'")
	}
	z, a, err := findArchive(ctx, d, vdc, in.Backup, "backup")
	if err != nil {
		return nil, nil, err
	}
	cfg, err := pveapi.BackupConfig(ctx, z.Client, a.ref.Node, a.ref.VolID)
	if err != nil {
		return nil, nil, zoneDown(z.Name, err)
	}
	orig, ok := ParseIntent(cfg.Str("description"))
	if !ok || orig.VDC != vdc {
		return nil, nil, &Error{Kind: KindNotFound, Field: "backup", Message: "no such backup"}
	}
	if err := placeable(ctx, d, z.Name, vdc, badInput("backup", "the backup's zone %s is not open to the VDC", z.Name)); err != nil {
		return nil, nil, err
	}
	if taken, err := nameTaken(ctx, z, vdc, in.Name); err != nil {
		return nil, nil, zoneDown(z.Name, err)
	} else if taken {
		return nil, nil, &Error{Kind: KindConflict, Field: "name", Message: fmt.Sprintf("the VDC has a VM named %s", in.Name)}
	}
	p := &plan{zone: z, storage: orig.Storage, keys: orig.SSHKeys, restore: &restoreSource{node: a.ref.Node, volid: a.ref.VolID}}
	for i, n := range orig.NICs {
		sub, err := d.find.network(ctx, z, vdc, tenancy.NetworkRef{ZoneID: z.ID, VNet: n.VNet}.ID())
		if errors.Is(err, errNoNetwork) {
			return nil, nil, &Error{Kind: KindConflict, Field: "backup",
				Message: fmt.Sprintf("the network of the backed-up VM's NIC %d no longer exists", i)}
		}
		if err != nil {
			return nil, nil, zoneDown(z.Name, err)
		}
		p.nics = append(p.nics, nicPlan{network: tenancy.NetworkRef{ZoneID: z.ID, VNet: n.VNet}.ID(), subnet: sub})
	}
	if p.groups, err = createGroups(ctx, d.cfg.Catalog, vdc, orig.SecurityGroups); err != nil {
		return nil, nil, err
	}
	pin := in.Host
	if !a.store.shared {
		// The archive is on one host's storage: the restore reads it there.
		if pin != "" {
			if node, err := d.find.targetNode(ctx, z, pin); err != nil || node != a.ref.Node {
				return nil, nil, badInput("host", "the backup is on host %s's own storage: it can be restored there only", a.ref.Node)
			}
		}
		pin = a.ref.Node
	}
	if !d.unplaced {
		s, err := d.place(ctx, placeRequest{Zone: z, Pin: pin, Field: "host", VM: in.Name, Demand: demand{
			MemBytes: int64(orig.MemoryMiB) << 20, VCPUs: orig.VCPUs, DiskBytes: int64(orig.DiskGiB) << 30, Storage: orig.Storage}})
		if err != nil {
			return nil, nil, err
		}
		p.slot = s
	}
	intent := &Intent{
		Op: newOpID(), Created: time.Now().UTC(), VDC: vdc, Name: in.Name, Image: orig.Image,
		VCPUs: orig.VCPUs, MemoryMiB: orig.MemoryMiB, DiskGiB: orig.DiskGiB, ComputeProfile: orig.ComputeProfile,
		Storage: orig.Storage, ReadMBps: orig.ReadMBps, WriteMBps: orig.WriteMBps,
		User: orig.User, SSHKeys: orig.SSHKeys, SecurityGroups: p.groups,
	}
	if p.userData, err = originalUserData(ctx, d, vdc, a, cfg); err != nil {
		return nil, nil, err
	}
	return p, intent, nil
}

// originalUserData is the caller's part of the user-data of the VM that
// archive a (its configuration cfg) was taken of, which the restore
// carries over into a snippet of the new VM's, with flexplane's part
// written for the new VM (startCreate merges them): nil when the VM had
// none, had it verbatim, is gone (its snippet went with it), or the
// installation writes no snippets.
func originalUserData(ctx context.Context, d *deps, vdc string, a archive, cfg pveapi.Config) ([]byte, error) {
	if d.snips.w == nil {
		return nil, nil
	}
	if _, ok := userDataSnippet(cfg.Str("cicustom"), a.vol.VMID); !ok {
		return nil, nil
	}
	z, g, _, gcfg, err := d.find.lookupConfig(ctx, vdc, a.meta.vm)
	if IsKind(err, KindNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	if _, ok := userDataSnippet(gcfg.Str("cicustom"), g.VMID); !ok {
		return nil, nil
	}
	data, err := readUserData(ctx, z, g.Node, g.VMID)
	if err != nil {
		return nil, zoneDown(z.Name, err)
	}
	return tenantUserData(data), nil
}

// nameTaken reports whether a VM of vdc in zone z is called name.
func nameTaken(ctx context.Context, z Zone, vdc, name string) (bool, error) {
	guests, err := pveapi.PoolGuests(ctx, z.Client, tenancy.PoolID(vdc))
	if err != nil {
		if pveapi.IsNotFound(err) {
			return false, nil
		}
		return false, err
	}
	return slices.ContainsFunc(guests, func(g pveapi.Resource) bool { return g.Name == name && g.Template != 1 }), nil
}

// DeleteVM deletes VM id of vdc as Service.DeleteVM does and, unless
// keepBackups, then its backups (their archives); a backup that cannot be
// deleted fails it, with the VM gone.
func (b *Backups) DeleteVM(ctx context.Context, vdc, id string, keepBackups bool) (*Operation, error) {
	var arcs []archive
	if !keepBackups {
		z, _, _, err := b.d.find.lookup(ctx, vdc, id)
		if err != nil {
			return nil, err
		}
		all, err := archives(ctx, b.d, z, vdc)
		if err != nil {
			return nil, err
		}
		for _, a := range all {
			if a.meta.vm == id {
				arcs = append(arcs, a)
			}
		}
	}
	op, err := deleteVM(ctx, b.d, vdc, id)
	if err != nil {
		return nil, err
	}
	for _, a := range arcs {
		if err := b.Delete(ctx, vdc, a.ref.ID()); err != nil && !IsKind(err, KindNotFound) {
			return nil, internal("the VM is deleted, but deleting its backups failed", err)
		}
	}
	return op, nil
}
