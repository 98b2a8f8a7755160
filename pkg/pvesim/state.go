package pvesim

import (
	"crypto/sha1"
	"encoding/hex"
	"fmt"
	"net/http"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"
)

// state is one cluster's model. Every field is protected by Cluster.mu.
type state struct {
	c        *Cluster
	nodes    map[string]*node
	guests   map[int]*guest
	storages []*storageDef
	volumes  map[string]map[string]*volume // store key (storage or node/storage) -> volid -> volume
	tasks    map[string]*task
	taskList []*task
	pools    map[string]*pool
	repl     map[string]*replJob // replication jobs by id
	// backupJobs are the backup jobs by id (backupjobs.go).
	backupJobs map[string]*backupJob
	// vzdumpBusy says whether a vzdump holds a node's lock;
	// vzdumpQueue are the vzdumps waiting for it, in turn (backup.go).
	vzdumpBusy  map[string]bool
	vzdumpQueue map[string][]func()
	sdn         *sdnState
	fw          *fwConf // the cluster's firewall (cluster.fw)
	ha          *haState
	nextPID     uint32
	// firstBoots are the guests' starts whose cloud-init is still to run
	// (cloudinit.go).
	firstBoots []firstBoot
	timers     map[*taskTimer]struct{}
}

type node struct {
	name       string
	id         int
	online     bool
	ip         string
	booted     time.Time
	ifaces     map[string]map[string]any // applied network interfaces
	pendIfaces map[string]map[string]any // interfaces.new; nil without pending changes
}

type guest struct {
	vmid      int
	node      string
	conf      map[string]any  // typed config values, as Proxmox keeps them
	pending   map[string]any  // changes waiting for the next boot ([PENDING] section)
	pendDel   map[string]bool // keys the next boot deletes
	running   bool
	paused    bool // suspended (qmpstatus "paused")
	startedAt time.Time
	pid       int
	pool      string
	snaps     map[string]*snapshot // by name
	fw        *fwConf              // the guest's firewall (<vmid>.fw); nil without one
	// metric counters carried over from earlier runs
	baseNetIn, baseNetOut, baseRead, baseWrite int64
	// ciInstance is the cloud-init instance-id whose first start ran its
	// user-data (cloudinit.go); "" before.
	ciInstance string
}

type storageDef struct {
	id      string
	typ     string // dir, lvmthin, nfs, pbs
	content []string
	shared  bool
	path    string
	// pbs is where an entry of type pbs points (pbs.go); nil for others.
	pbs *pbsTarget
}

type volume struct {
	volid     string
	storage   string
	node      string // "" on shared storage
	content   string // images, iso, import, vztmpl, backup
	format    string
	size      int64
	vmid      int
	ctime     int64
	parent    string
	notes     string
	protected bool
	data      []byte // an uploaded file's content; never written in place
	// file holds a disk's bytes (Config.DiskDir, diskfiles.go); src is
	// the volume whose bytes a new disk starts with (clone, import-from),
	// until its file is made.
	file string
	src  *volume
	// dump is what a backup archive holds (backup.go); nil for others.
	dump *dumpArchive
}

type pool struct {
	id      string
	comment string
}

func newState(c *Cluster) *state {
	st := &state{
		c:           c,
		nodes:       map[string]*node{},
		guests:      map[int]*guest{},
		volumes:     map[string]map[string]*volume{},
		tasks:       map[string]*task{},
		pools:       map[string]*pool{},
		repl:        map[string]*replJob{},
		backupJobs:  map[string]*backupJob{},
		vzdumpBusy:  map[string]bool{},
		vzdumpQueue: map[string][]func(){},
		sdn:         newSDNState(),
		fw:          newFWConf(),
		ha:          newHAState(),
		nextPID:     4000 + uint32(time.Now().UnixNano()%20000),
		timers:      map[*taskTimer]struct{}{},
		storages: []*storageDef{
			{id: "local", typ: "dir", content: []string{"backup", "import", "iso", "vztmpl"}, path: "/var/lib/vz"},
			{id: "local-lvm", typ: "lvmthin", content: []string{"images", "rootdir"}},
			{id: "shared", typ: "nfs", content: []string{"images", "import", "iso"}, shared: true, path: "/mnt/pve/shared"},
		},
	}
	for i, name := range c.nodes {
		ip := fmt.Sprintf("10.%d.0.%d", 10+len(c.name)%200, i+1)
		st.nodes[name] = &node{
			name:   name,
			id:     i + 1,
			online: true,
			ip:     ip,
			booted: c.started.Add(-time.Duration(3600*(24+i*7)) * time.Second),
			ifaces: defaultIfaces(ip),
		}
	}
	return st
}

func (st *state) storage(id string) *storageDef {
	for _, s := range st.storages {
		if s.id == id {
			return s
		}
	}
	return nil
}

func (s *storageDef) hasContent(ct string) bool {
	for _, c := range s.content {
		if c == ct {
			return true
		}
	}
	return false
}

func (st *state) storeKey(node, storage string) string {
	if s := st.storage(storage); s != nil && s.shared {
		return storage
	}
	return node + "/" + storage
}

func (st *state) volumesOn(node, storage string) map[string]*volume {
	if s := st.storage(storage); s != nil && s.pbs != nil {
		return st.pbsView(s)
	}
	k := st.storeKey(node, storage)
	m := st.volumes[k]
	if m == nil {
		m = map[string]*volume{}
		st.volumes[k] = m
	}
	if s := st.storage(storage); s != nil && st.c.cfg.FileRoot != "" && s.path != "" {
		st.syncFiles(node, s, m)
	}
	return m
}

func (st *state) findVolume(node, volid string) *volume {
	storage, _, _ := strings.Cut(volid, ":")
	return st.volumesOn(node, storage)[volid]
}

func (st *state) addVolume(node string, v *volume) {
	if s := st.storage(v.storage); s != nil && s.shared {
		v.node = ""
	} else {
		v.node = node
	}
	if v.ctime == 0 {
		v.ctime = time.Now().Unix()
	}
	st.createFile(v)
	if s := st.storage(v.storage); s != nil && s.pbs != nil {
		_, name, _ := strings.Cut(v.volid, ":")
		st.pbsNamespace(s)[name] = v
		return
	}
	st.volumesOn(node, v.storage)[v.volid] = v
}

// removeVolume deletes a volume and its bytes.
func (st *state) removeVolume(node, volid string) {
	storage, _, _ := strings.Cut(volid, ":")
	if v := st.volumesOn(node, storage)[volid]; v != nil {
		st.removeFile(v)
		if v.dump != nil {
			st.removeDumpFiles(v.dump)
		}
	}
	if s := st.storage(storage); s != nil && s.pbs != nil {
		_, name, _ := strings.Cut(volid, ":")
		delete(st.pbsNamespace(s), name)
		return
	}
	delete(st.volumesOn(node, storage), volid)
}

func (st *state) usedOn(node, storage string) int64 {
	if s := st.storage(storage); s != nil && s.pbs != nil {
		return st.pbsUsed(s)
	}
	var n int64
	for _, v := range st.volumesOn(node, storage) {
		n += v.size
	}
	return n
}

func (st *state) setNodeOnline(name string, online bool) {
	n := st.nodes[name]
	if n == nil || n.online == online {
		return
	}
	n.online = online
	if !online {
		for _, g := range st.guests {
			if g.node == name && g.running {
				g.stop()
			}
		}
		st.haNodeOffline(name)
	} else {
		n.booted = time.Now()
		st.haNodeOnline(name)
	}
}

// guestOn returns the guest vmid on node, failing like Proxmox when it does not exist
// there.
func (st *state) guestOn(node string, vmid int) (*guest, error) {
	g := st.guests[vmid]
	if g == nil || g.node != node {
		return nil, errorf(http.StatusInternalServerError, "Configuration file 'nodes/%s/qemu-server/%d.conf' does not exist", node, vmid)
	}
	return g, nil
}

// checkVMIDFree fails like PVE::Cluster::check_vmid_unused.
func (st *state) checkVMIDFree(vmid int) error {
	if g := st.guests[vmid]; g != nil {
		return errorf(http.StatusInternalServerError, "VM %d already exists on node '%s'", vmid, g.node)
	}
	return nil
}

func (g *guest) lock() string {
	s, _ := g.conf["lock"].(string)
	return s
}

// checkLock fails like PVE::AbstractConfig::check_lock.
func (g *guest) checkLock() error {
	if l := g.lock(); l != "" {
		return errorf(http.StatusInternalServerError, "VM is locked (%s)", l)
	}
	return nil
}

func (g *guest) isTemplate() bool {
	v, ok := g.conf["template"]
	if !ok {
		return false
	}
	switch v := v.(type) {
	case bool:
		return v
	case int64:
		return v != 0
	case string:
		return v == "1"
	}
	return false
}

func (g *guest) name() string {
	if s, ok := g.conf["name"].(string); ok && s != "" {
		return s
	}
	return fmt.Sprintf("VM %d", g.vmid)
}

func (g *guest) confInt(key string, def int64) int64 {
	switch v := g.conf[key].(type) {
	case int64:
		return v
	case string:
		// memory is a property string "[current=]<MiB>"
		s, _, _ := strings.Cut(v, ",")
		if strings.Contains(s, "=") {
			s = propValue(v, "current")
		}
		if n, err := strconv.ParseInt(s, 10, 64); err == nil {
			return n
		}
	case bool:
		if v {
			return 1
		}
		return 0
	}
	return def
}

func (g *guest) cpus() int64 {
	if v := g.confInt("vcpus", 0); v > 0 {
		return v
	}
	return g.confInt("cores", 1) * g.confInt("sockets", 1)
}

func (g *guest) maxmem() int64 { return g.confInt("memory", 512) << 20 }

// diskBuses are the disk key prefixes with their highest index.
var diskBuses = map[string]int{"ide": 3, "sata": 5, "scsi": 30, "virtio": 15, "efidisk": 0, "tpmstate": 0}

// isDiskKey reports whether k is a disk slot (ide0-3, sata0-5, scsi0-30, virtio0-15,
// efidisk0, tpmstate0).
func isDiskKey(k string) bool {
	i := strings.IndexAny(k, "0123456789")
	if i <= 0 {
		return false
	}
	limit, ok := diskBuses[k[:i]]
	if !ok || (len(k) > i+1 && k[i] == '0') {
		return false
	}
	n, err := strconv.Atoi(k[i:])
	return err == nil && n <= limit
}

func isCDROM(v string) bool {
	first, _, _ := strings.Cut(v, ",")
	return propValue(v, "media") == "cdrom" || first == "none" || first == "cdrom"
}

// disks lists the guest's disk keys (not CD-ROMs, not cloud-init drives) in order.
func (g *guest) disks() []string {
	var out []string
	for k, v := range g.conf {
		s, ok := v.(string)
		if !ok || !isDiskKey(k) || isCDROM(s) {
			continue
		}
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// maxdisk is the size of the first disk (in key order), as Proxmox reports it.
func (g *guest) maxdisk() int64 {
	first := ""
	var size int64
	for k, v := range g.conf {
		s, ok := v.(string)
		if !ok || !isDiskKey(k) || (first != "" && k > first) || isCDROM(s) {
			continue
		}
		if sz, ok := parseSize(propValue(s, "size")); ok {
			first, size = k, sz
		}
	}
	return size
}

func (g *guest) diskBytes() int64 {
	var total int64
	for _, k := range g.disks() {
		if sz, ok := parseSize(parseProperty(g.conf[k].(string)).get("size")); ok {
			total += sz
		}
	}
	return total
}

// volumes lists the volume ids the guest references (disks, cloud-init drives, unused).
func (g *guest) volumes() []string {
	var out []string
	for k, v := range g.conf {
		s, ok := v.(string)
		if !ok {
			continue
		}
		if isDiskKey(k) || strings.HasPrefix(k, "unused") {
			pr := parseProperty(s)
			if strings.Contains(pr.first, ":") && (pr.get("media") != "cdrom" || strings.Contains(pr.first, "cloudinit")) {
				out = append(out, pr.first)
			}
		}
	}
	sort.Strings(out)
	return out
}

func (g *guest) stop() {
	if !g.running {
		return
	}
	m := g.metricsAt(time.Since(g.startedAt))
	g.baseNetIn, g.baseNetOut, g.baseRead, g.baseWrite = m.netin, m.netout, m.diskread, m.diskwrite
	g.running = false
	g.paused = false
	g.pid = 0
}

// configText renders the config as Proxmox writes /etc/pve/qemu-server/<vmid>.conf;
// its SHA-1 is the config digest.
func (g *guest) configText() string {
	keys := make([]string, 0, len(g.conf))
	for k := range g.conf {
		if k != "description" {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	var b strings.Builder
	if d, ok := g.conf["description"].(string); ok && d != "" {
		for _, line := range strings.Split(d, "\n") {
			b.WriteString("#" + line + "\n")
		}
	}
	for _, k := range keys {
		b.WriteString(k + ": " + formatValue(g.conf[k]) + "\n")
	}
	return b.String()
}

func (g *guest) digest() string {
	text := g.configText()
	text += g.snapshotsText()
	if len(g.pending) > 0 || len(g.pendDel) > 0 {
		text += "\n[PENDING]\n"
		for _, k := range sortedKeys(g.pending) {
			text += k + ": " + formatValue(g.pending[k]) + "\n"
		}
		if len(g.pendDel) > 0 {
			text += "delete: " + strings.Join(sortedKeys(g.pendDel), ",") + "\n"
		}
	}
	sum := sha1.Sum([]byte(text))
	return hex.EncodeToString(sum[:])
}

// parseSize parses Proxmox disk sizes: "32G", "512M", "1T", "4096K" or bytes.
func parseSize(s string) (int64, bool) {
	if s == "" {
		return 0, false
	}
	mult := int64(1)
	switch s[len(s)-1] {
	case 'K', 'k':
		mult = 1 << 10
	case 'M', 'm':
		mult = 1 << 20
	case 'G', 'g':
		mult = 1 << 30
	case 'T', 't':
		mult = 1 << 40
	}
	if mult != 1 {
		s = s[:len(s)-1]
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil || f < 0 {
		return 0, false
	}
	return int64(f * float64(mult)), true
}

// formatSize renders a size the way qemu-server writes it into a disk's size= option.
func formatSize(n int64) string {
	switch {
	case n%(1<<40) == 0 && n > 0:
		return fmt.Sprintf("%dT", n>>40)
	case n%(1<<30) == 0 && n > 0:
		return fmt.Sprintf("%dG", n>>30)
	case n%(1<<20) == 0 && n > 0:
		return fmt.Sprintf("%dM", n>>20)
	case n%(1<<10) == 0 && n > 0:
		return fmt.Sprintf("%dK", n>>10)
	}
	return strconv.FormatInt(n, 10)
}

func validClusterName(s string) bool {
	return regexp.MustCompile(`^[A-Za-z][A-Za-z0-9_-]{0,14}$`).MatchString(s)
}
