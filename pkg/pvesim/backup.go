package pvesim

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Backups. POST /nodes/{node}/vzdump backs a guest of the node up into an
// archive volume (content "backup") on a storage that allows backups, in
// a "vzdump" task whose log is the one vzdump writes; the guest is locked
// "backup" meanwhile. The archive holds the guest's configuration as it
// was (GET /nodes/{node}/vzdump/extractconfig returns it) and, with
// Config.DiskDir, a copy of each disk's bytes. An archive that does not fit
// on its storage fails the task with vzdump's message and leaves nothing
// listed. POST /nodes/{node}/qemu with `archive` restores one into a new
// guest in a "qmrestore" task: its disks on `storage` (else where they
// were), new MACs with `unique`, and the other parameters (name,
// description, tags...) applied over the restored configuration once the
// restore is done, as qemu-server does.

// dumpArchive is what a backup archive holds.
type dumpArchive struct {
	// conf is the guest's configuration at the backup.
	conf map[string]any
	// disks are the archived disks, in key order.
	disks []dumpDisk
}

// dumpDisk is one archived disk: its slot, storage, size and, with
// DiskDir, the file of its bytes.
type dumpDisk struct {
	key, storage string
	size         int64
	file         string
}

// dumpExt is the archive's file extension for each compress value.
var dumpExt = map[string]string{"0": "vma", "1": "vma.lzo", "lzo": "vma.lzo", "gzip": "vma.gz", "zstd": "vma.zst"}

// hVzdump backs up the guests vmid names (of this node) to storage.
func hVzdump(cl *call) (any, error) {
	c := cl.c
	storageID := cl.p.strOr("storage", "local")
	s, err := c.st.backupStorage(storageID)
	if err != nil {
		return nil, err
	}
	list, ok := cl.p.str("vmid")
	if !ok || cl.p.bool("all") || cl.p.has("pool") {
		return nil, errorf(http.StatusNotImplemented, "the simulator backs up the guests 'vmid' lists only")
	}
	vmids, err := parseVMIDList(list)
	if err != nil {
		return nil, err
	}
	o := dumpOpts{vmids: vmids, storage: s, ext: dumpExt[cl.p.strOr("compress", "0")], mode: cl.p.strOr("mode", "snapshot"),
		protected: cl.p.bool("protected"), notes: cl.p.strOr("notes-template", "")}
	if !cl.p.has("remove") || cl.p.bool("remove") {
		o.prune = cl.p.strOr("prune-backups", "")
	}
	return c.st.startVzdump(cl.vars["node"], cl.user, o).upid, nil
}

// backupStorage is storage id, failing as vzdump does when it is missing
// or holds no backups.
func (st *state) backupStorage(id string) (*storageDef, error) {
	s := st.storage(id)
	if s == nil {
		return nil, errorf(http.StatusInternalServerError, "storage '%s' does not exist", id)
	}
	if !s.hasContent("backup") {
		return nil, errorf(http.StatusInternalServerError, "storage '%s' does not support backups", id)
	}
	return s, nil
}

// parseVMIDList reads a pve-vmid-list.
func parseVMIDList(list string) ([]int, error) {
	var vmids []int
	for _, f := range splitList(list) {
		n, err := strconv.Atoi(f)
		if err != nil {
			return nil, paramError("vmid", "invalid format - value does not look like a valid VM ID")
		}
		vmids = append(vmids, n)
	}
	return vmids, nil
}

// dumpOpts are the options of one vzdump run.
type dumpOpts struct {
	vmids     []int
	storage   *storageDef
	ext, mode string
	notes     string // the notes-template
	protected bool
	// prune is the prune-backups retention applied to each guest's
	// archives after its backup; "" prunes nothing.
	prune string
}

// startVzdump starts the vzdump task of node that backs o.vmids up, as
// POST /nodes/{node}/vzdump and the backup jobs' runs do; the caller
// holds mu.
func (st *state) startVzdump(node, user string, o dumpOpts) *task {
	id := ""
	if len(o.vmids) == 1 {
		id = strconv.Itoa(o.vmids[0])
	}
	names := make([]string, len(o.vmids))
	for i, v := range o.vmids {
		names[i] = strconv.Itoa(v)
	}
	t := st.newTask(node, "vzdump", id, user)
	t.log = append(t.log, "INFO: starting new backup job: vzdump "+strings.Join(names, " ")+
		" --storage "+o.storage.id+" --mode "+o.mode+" --node "+node)
	run := func() { st.runVzdump(t, node, o) }
	// vzdump takes a node-wide lock: one backup runs on a node at a time,
	// the others wait for it in turn.
	if st.vzdumpBusy[node] {
		t.log = append(t.log, "INFO: trying to get global lock - waiting...")
		st.vzdumpQueue[node] = append(st.vzdumpQueue[node], run)
		return t
	}
	st.vzdumpBusy[node] = true
	run()
	return t
}

// runVzdump runs vzdump task t of node once it holds the node's lock, and
// hands the lock to the next waiting task when it ends; the caller holds
// mu.
func (st *state) runVzdump(t *task, node string, o dumpOpts) {
	next := func() {
		q := st.vzdumpQueue[node]
		if len(q) == 0 {
			st.vzdumpBusy[node] = false
			return
		}
		st.vzdumpQueue[node] = q[1:]
		q[0]()
	}
	if !t.running { // stopped while it waited
		next()
		return
	}
	// Each guest is locked for its backup at once, as vzdump locks it
	// before it reads the guest's disks.
	var locked []*guest
	for _, vmid := range o.vmids {
		if g := st.guests[vmid]; g != nil && g.node == node && g.lock() == "" {
			g.conf["lock"] = "backup"
			locked = append(locked, g)
		}
	}
	var gib float64
	for _, g := range locked {
		gib += float64(g.diskBytes()) / float64(1<<30)
	}
	st.after(st.c.taskDuration(0, gib), func() {
		defer next()
		for _, g := range locked {
			if st.guests[g.vmid] == g && g.lock() == "backup" {
				delete(g.conf, "lock")
			}
		}
		if !t.running {
			return
		}
		failed := 0
		for _, vmid := range o.vmids {
			err := st.dumpGuest(t, node, o.storage, vmid, locked, o.ext, o.mode, o.notes, o.protected)
			if err == nil && o.prune != "" {
				st.pruneGroup(t, node, o.storage, vmid, o.prune)
			}
			if err != nil {
				failed++
				t.log = append(t.log, fmt.Sprintf("ERROR: Backup of VM %d failed - %v", vmid, err))
			}
		}
		if failed > 0 {
			t.log = append(t.log, "INFO: Backup job finished with errors")
			t.finish(errors.New("job errors"))
			return
		}
		t.log = append(t.log, "INFO: Backup job finished successfully")
		t.finish(nil)
	})
}

// dumpGuest writes the archive of guest vmid to storage s, logging as
// vzdump does; the caller holds mu.
func (st *state) dumpGuest(t *task, node string, s *storageDef, vmid int, locked []*guest, ext, mode, notesTmpl string, protected bool) error {
	g := st.guests[vmid]
	t.log = append(t.log, fmt.Sprintf("INFO: Starting Backup of VM %d (qemu)", vmid))
	switch {
	case g == nil || g.node != node:
		return fmt.Errorf("unable to find VM '%d' on node '%s'", vmid, node)
	case !containsGuest(locked, g):
		return fmt.Errorf("VM is locked (%s)", g.lock())
	}
	started := st.c.now()
	t.log = append(t.log, "INFO: Backup started at "+started.Format("2006-01-02 15:04:05"))
	status := "stopped"
	if g.running {
		status = "running"
	}
	t.log = append(t.log, "INFO: status = "+status, "INFO: VM Name: "+g.name())
	arch := &dumpArchive{conf: maps.Clone(g.conf)}
	delete(arch.conf, "lock")
	for _, k := range g.disks() {
		pr := parseProperty(g.conf[k].(string))
		v := st.findVolume(g.node, pr.first)
		if v == nil {
			return fmt.Errorf("volume '%s' does not exist", pr.first)
		}
		t.log = append(t.log, fmt.Sprintf("INFO: include disk '%s' '%s' %s", k, v.volid, formatSize(v.size)))
		arch.disks = append(arch.disks, dumpDisk{key: k, storage: v.storage, size: v.size, file: v.file})
	}
	t.log = append(t.log, "INFO: backup mode: "+mode, "INFO: ionice priority: 7")
	stamp := started
	volid, format := "", ext
	for {
		volid = fmt.Sprintf("%s:backup/vzdump-qemu-%d-%s.%s", s.id, vmid, stamp.Format("2006_01_02-15_04_05"), ext)
		if s.pbs != nil {
			volid, format = pbsArchiveName(s, vmid, stamp), "pbs-vm"
		}
		if st.findVolume(node, volid) == nil {
			break
		}
		stamp = stamp.Add(time.Second) // one archive per second and guest
	}
	if s.pbs != nil {
		_, name, _ := strings.Cut(volid, ":backup/")
		t.log = append(t.log, fmt.Sprintf("INFO: creating Proxmox Backup Server archive '%s'", name))
	} else {
		_, name, _ := strings.Cut(volid, ":backup/")
		t.log = append(t.log, fmt.Sprintf("INFO: creating vzdump archive '%s/dump/%s'", s.path, name))
	}
	size, err := st.copyDumpDisks(arch, s)
	if err == nil && st.usedOn(node, s.id)+size > st.c.cfg.StorageSize {
		err = errors.New("vma_queue_write: write error - No space left on device")
	}
	if err != nil {
		st.removeDumpFiles(arch)
		t.log = append(t.log, "INFO: aborting backup job")
		return err
	}
	t.log = append(t.log, fmt.Sprintf("INFO: transferred %s in %d seconds", renderSize(g.diskBytes()), int(st.c.now().Sub(started).Seconds())),
		"INFO: archive file size: "+renderSize(size))
	v := &volume{volid: volid, storage: s.id, content: "backup", format: format, size: size, vmid: vmid,
		ctime: stamp.Unix(), protected: protected, dump: arch}
	if notesTmpl != "" {
		v.notes = st.expandNotes(notesTmpl, g, node)
		t.log = append(t.log, "INFO: adding notes to backup")
	}
	if protected {
		t.log = append(t.log, "INFO: marking backup as protected")
	}
	st.addVolume(node, v)
	t.log = append(t.log, fmt.Sprintf("INFO: Finished Backup of VM %d (%s)", vmid, st.c.now().Sub(started).Truncate(time.Second)),
		"INFO: Backup finished at "+st.c.now().Format("2006-01-02 15:04:05"))
	return nil
}

func containsGuest(list []*guest, g *guest) bool {
	for _, l := range list {
		if l == g {
			return true
		}
	}
	return false
}

// copyDumpDisks copies the bytes of the archive's disks (with DiskDir)
// into files of the archive and returns the archive's size: the bytes
// copied, or an eighth of the disks' sizes without DiskDir (what a
// compressed archive of mostly empty disks takes).
func (st *state) copyDumpDisks(arch *dumpArchive, s *storageDef) (int64, error) {
	var size int64
	for i, d := range arch.disks {
		if d.file == "" || st.c.cfg.DiskDir == "" {
			arch.disks[i].file = ""
			size += d.size / 8
			continue
		}
		var b [8]byte
		_, _ = rand.Read(b[:])
		dir := filepath.Join(st.c.cfg.DiskDir, s.id, "dump")
		f := filepath.Join(dir, "dump-"+hex.EncodeToString(b[:])+".raw")
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return 0, err
		}
		if err := writeSparse(f, &volume{file: d.file}, d.size); err != nil {
			arch.disks[i].file = ""
			return 0, err
		}
		arch.disks[i].file = f
		size += allocated(f)
	}
	return max(size, 1), nil
}

// allocated is the bytes a sparse file has allocated.
func allocated(path string) int64 {
	fi, err := os.Stat(path)
	if err != nil {
		return 0
	}
	if sys, ok := fi.Sys().(*syscall.Stat_t); ok {
		return sys.Blocks * 512
	}
	return fi.Size()
}

// removeDumpFiles deletes the files of an archive's disks.
func (st *state) removeDumpFiles(arch *dumpArchive) {
	for _, d := range arch.disks {
		if d.file != "" && st.c.cfg.DiskDir != "" && strings.HasPrefix(d.file, st.c.cfg.DiskDir) {
			if err := os.Remove(d.file); err != nil && !errors.Is(err, os.ErrNotExist) {
				st.c.log.Error("pvesim: remove archive file", "file", d.file, "err", err)
			}
		}
	}
}

// expandNotes fills vzdump's notes-template: {{cluster}}, {{guestname}},
// {{node}} and {{vmid}}, "\n" a new line and "\\" a backslash.
func (st *state) expandNotes(tmpl string, g *guest, node string) string {
	r := strings.NewReplacer("{{cluster}}", st.c.name, "{{guestname}}", g.name(), "{{node}}", node,
		"{{vmid}}", strconv.Itoa(g.vmid), `\n`, "\n", `\\`, `\`)
	return r.Replace(tmpl)
}

// hVzdumpExtractConfig returns the configuration an archive holds, as
// the guest's configuration file was.
func hVzdumpExtractConfig(cl *call) (any, error) {
	volid, _ := cl.p.str("volume")
	v := cl.c.st.findVolume(cl.vars["node"], volid)
	if v == nil || v.content != "backup" {
		return nil, errorf(http.StatusInternalServerError, "volume '%s' does not exist", volid)
	}
	if v.dump == nil {
		return nil, errorf(http.StatusInternalServerError, "unable to extract configuration from '%s'", volid)
	}
	return (&guest{conf: v.dump.conf}).configText(), nil
}

// restoreParams are the parameters of a restore that are not applied as
// configuration over the restored one.
var restoreParams = map[string]bool{
	"node": true, "vmid": true, "archive": true, "storage": true, "pool": true, "unique": true,
	"force": true, "start": true, "live-restore": true, "bwlimit": true,
}

// restoreGuest is POST /nodes/{node}/qemu with archive: the new guest
// exists (locked "create") at once; a qmrestore task makes its disks
// from the archive, writes the archived configuration with the request's
// other parameters over it and unlocks it.
func restoreGuest(cl *call, vmid int, archive string) (any, error) {
	c := cl.c
	node := cl.vars["node"]
	for k := range cl.p {
		if isDiskKey(k) {
			return nil, paramError(k, "option conflicts with option 'archive'")
		}
	}
	v := c.st.findVolume(node, archive)
	if v == nil || v.content != "backup" {
		return nil, errorf(http.StatusInternalServerError, "volume '%s' does not exist", archive)
	}
	if v.dump == nil {
		return nil, errorf(http.StatusInternalServerError, "unable to restore '%s': the archive holds no configuration", archive)
	}
	target, hasTarget := cl.p.str("storage")
	if hasTarget {
		sd := c.st.storage(target)
		if sd == nil {
			return nil, errorf(http.StatusInternalServerError, "storage '%s' does not exist", target)
		}
		if !sd.hasContent("images") {
			return nil, errorf(http.StatusInternalServerError, "storage '%s' does not support content-type 'images'", target)
		}
	}
	poolID, _ := cl.p.str("pool")
	if poolID != "" && c.st.pools[poolID] == nil {
		return nil, errorf(http.StatusInternalServerError, "pool '%s' does not exist", poolID)
	}
	overrides := params{}
	for k, val := range cl.p {
		if !restoreParams[k] {
			overrides[k] = val
		}
	}
	unique, start, user := cl.p.bool("unique"), cl.p.bool("start"), cl.user
	arch := v.dump
	g := &guest{vmid: vmid, node: node, conf: map[string]any{"lock": "create"}, pool: poolID}
	c.st.guests[vmid] = g
	var bytes int64
	for _, d := range arch.disks {
		bytes += d.size
	}
	t := c.st.runTask(node, "qmrestore", strconv.Itoa(vmid), user, c.taskDuration(0, float64(bytes)/float64(1<<30)), func(t *task) error {
		if c.st.guests[vmid] != g {
			return fmt.Errorf("VM %d vanished during restore", vmid)
		}
		t.log = append(t.log, "restore vma archive: "+archive)
		conf := map[string]any{}
		for k, val := range arch.conf {
			s, _ := val.(string)
			switch {
			case k == "template" || k == "parent" || k == "snapshots" || strings.HasPrefix(k, "unused"):
			case isDiskKey(k) && (!isCDROM(s) || strings.Contains(s, "cloudinit")):
			default:
				conf[k] = val
			}
		}
		var made []*volume
		fail := func(err error) error {
			for _, nv := range made {
				c.st.removeVolume(node, nv.volid)
			}
			delete(c.st.guests, vmid)
			return err
		}
		for _, d := range arch.disks {
			sid := d.storage
			if hasTarget {
				sid = target
			}
			sd := c.st.storage(sid)
			if sd == nil || !sd.hasContent("images") {
				return fail(fmt.Errorf("storage '%s' does not exist", sid))
			}
			if c.st.usedOn(node, sid)+d.size > c.st.c.cfg.StorageSize {
				return fail(fmt.Errorf("error allocating disk on '%s': not enough free space", sid))
			}
			n := c.st.nextDiskName(node, sid, vmid, made)
			volid, format := diskVolid(sd, vmid, n, "vm")
			nv := &volume{volid: volid, storage: sid, content: "images", format: format, size: d.size, vmid: vmid}
			if d.file != "" {
				nv.src = &volume{file: d.file}
			}
			c.st.addVolume(node, nv)
			made = append(made, nv)
			pr := parseProperty(arch.conf[d.key].(string))
			pr.first = volid
			pr.set("size", formatSize(d.size))
			conf[d.key] = pr.String()
			t.log = append(t.log, fmt.Sprintf("map '%s' to '%s' (write zeros = 0)", d.key, volid),
				fmt.Sprintf("restore disk '%s' (%s)", d.key, renderSize(d.size)))
		}
		for k, val := range arch.conf {
			if s, _ := val.(string); isDiskKey(k) && strings.Contains(s, "cloudinit") {
				pr := parseProperty(s)
				sid, _, _ := strings.Cut(pr.first, ":")
				if hasTarget {
					sid = target
				}
				sd := c.st.storage(sid)
				volid := fmt.Sprintf("%s:vm-%d-cloudinit", sid, vmid)
				if sd != nil && sd.typ != "lvmthin" {
					volid = fmt.Sprintf("%s:%d/vm-%d-cloudinit.qcow2", sid, vmid, vmid)
				}
				nv := &volume{volid: volid, storage: sid, content: "images", format: "raw", size: 4 << 20, vmid: vmid}
				c.st.addVolume(node, nv)
				made = append(made, nv)
				pr.first = volid
				conf[k] = pr.String()
			}
		}
		if unique {
			newMACs(conf)
			conf["smbios1"] = "uuid=" + uuid()
		}
		conf["vmgenid"] = uuid()
		g.conf = conf
		if len(overrides) > 0 {
			if err := c.st.applyConfig(g, overrides, cl); err != nil {
				return fail(fmt.Errorf("restore: applying the settings over the restored configuration: %v", err))
			}
		}
		t.log = append(t.log, "rescan volumes...")
		if start {
			c.st.startGuest(g, user)
		}
		return nil
	})
	return t.upid, nil
}
