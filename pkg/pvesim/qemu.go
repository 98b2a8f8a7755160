package pvesim

import (
	"crypto/rand"
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"golang.org/x/crypto/ssh"
)

const (
	errDigest     = "detected modified configuration - file changed by other user? Try again."
	runningMach   = "pc-i440fx-10.1+pve0"
	runningQemu   = "10.1.2"
	macOUI        = "BC:24:11"
	unusedMaxKeys = 256
)

// configSkip are create/update parameters that are not config keys.
var configSkip = map[string]bool{
	"node": true, "vmid": true, "digest": true, "delete": true, "revert": true, "skiplock": true,
	"background_delay": true, "force": true, "start": true, "pool": true, "storage": true,
	"unique": true, "archive": true, "live-restore": true, "bwlimit": true,
	"import-working-storage": true, "ha-managed": true,
}

// liveKeys change a running guest at once: qemu-server's fast-plug options and the
// cloud-init options (which only matter at the next boot). Disks, NICs and USB devices
// are hot-plugged as the guest's hotplug option allows (default "network,disk,usb"),
// unused volumes always; vcpus and memory too when it names cpu and memory (memory also
// needs numa=1, and vcpus at most cores×sockets), as qemu-server's hotplug does.
// Everything else, such as cores, waits in the pending section for the next boot.
var liveKeys = map[string]bool{
	"name": true, "description": true, "tags": true, "onboot": true, "protection": true,
	"startup": true, "hookscript": true, "vmstatestorage": true, "lock": true,
	"balloon": true, "shares": true, "cpulimit": true, "cpuunits": true,
	"ciuser": true, "cipassword": true, "citype": true, "ciupgrade": true, "cicustom": true,
	"sshkeys": true, "nameserver": true, "searchdomain": true,
}

// appliesLive reports whether a change of k to conf (the config being written) takes
// effect on the running guest at once.
func (g *guest) appliesLive(k string, conf map[string]any) bool {
	hp := g.hotplug()
	switch {
	case liveKeys[k] || ipconfigKeyR.MatchString(k) || strings.HasPrefix(k, "unused"):
		return true
	case isDiskKey(k):
		return hp["disk"]
	case netKeyR.MatchString(k):
		return hp["network"]
	case strings.HasPrefix(k, "usb"):
		return hp["usb"]
	case k == "vcpus":
		// The running topology bounds the vCPUs that can be plugged.
		want := (&guest{conf: conf}).confInt("vcpus", 0)
		return hp["cpu"] && want <= g.confInt("cores", 1)*g.confInt("sockets", 1)
	case k == "memory":
		return hp["memory"] && g.confInt("numa", 0) == 1
	}
	return false
}

// hotplug is the set of hot-pluggable device kinds of the guest's hotplug option: a
// list of network, disk, cpu, memory, usb and cloudinit, "0" for none, "1" for the
// default "network,disk,usb".
func (g *guest) hotplug() map[string]bool {
	v, ok := g.conf["hotplug"]
	s := fmt.Sprint(v)
	switch {
	case !ok || s == "1" || s == "true":
		s = "network,disk,usb"
	case s == "0" || s == "false":
		s = ""
	}
	out := map[string]bool{}
	for _, f := range splitList(s) {
		out[f] = true
	}
	return out
}

// applyPending moves the pending section into the config, as a (re)boot does.
func (g *guest) applyPending() {
	for k, v := range g.pending {
		g.conf[k] = v
	}
	for k := range g.pendDel {
		delete(g.conf, k)
	}
	g.pending, g.pendDel = nil, nil
}

// deferChanges keeps the changes from g.conf to conf that a running guest cannot take
// live in the pending section instead; the keys in touched were set or deleted by this
// request (setting a key back to its current value drops its pending change).
func (g *guest) deferChanges(conf map[string]any, touched map[string]bool) {
	pending := map[string]any{}
	for k, v := range g.pending {
		pending[k] = v
	}
	pendDel := map[string]bool{}
	for k := range g.pendDel {
		pendDel[k] = true
	}
	keys := map[string]bool{}
	for k := range conf {
		keys[k] = true
	}
	for k := range g.conf {
		keys[k] = true
	}
	for k := range keys {
		if g.appliesLive(k, conf) {
			continue
		}
		nv, inNew := conf[k]
		ov, inOld := g.conf[k]
		changed := inNew != inOld || (inNew && formatValue(nv) != formatValue(ov))
		if !changed {
			if touched[k] {
				delete(pending, k)
				delete(pendDel, k)
			}
			continue
		}
		if inNew {
			pending[k] = nv
			delete(pendDel, k)
		} else {
			pendDel[k] = true
			delete(pending, k)
		}
		if inOld {
			conf[k] = ov
		} else {
			delete(conf, k)
		}
	}
	g.pending, g.pendDel = pending, pendDel
}

var netModels = map[string]bool{
	"e1000": true, "e1000-82540em": true, "e1000-82544gc": true, "e1000-82545em": true, "e1000e": true,
	"i82551": true, "i82557b": true, "i82559er": true, "ne2k_isa": true, "ne2k_pci": true,
	"pcnet": true, "rtl8139": true, "virtio": true, "vmxnet3": true,
}

func randomMAC() string {
	b := make([]byte, 3)
	_, _ = rand.Read(b)
	return fmt.Sprintf("%s:%02X:%02X:%02X", macOUI, b[0], b[1], b[2])
}

func (cl *call) vmid() int {
	n, _ := cl.p.int("vmid")
	if n == 0 {
		n, _ = strconv.ParseInt(cl.vars["vmid"], 10, 64)
	}
	return int(n)
}

// guestStatus is the shared shape of /qemu list entries and status/current.
func (st *state) guestStatus(g *guest, now time.Time) map[string]any {
	m := g.metrics(now)
	status := "stopped"
	if g.running {
		status = "running"
	}
	e := map[string]any{
		"vmid":      g.vmid,
		"name":      g.name(),
		"status":    status,
		"qmpstatus": status,
		"cpus":      g.cpus(),
		"cpu":       m.cpu,
		"maxmem":    g.maxmem(),
		"mem":       m.mem,
		"maxdisk":   g.maxdisk(),
		"disk":      0,
		"netin":     m.netin,
		"netout":    m.netout,
		"diskread":  m.diskread,
		"diskwrite": m.diskwrite,
		"uptime":    m.uptime,
		"ha":        map[string]any{"managed": 0},
	}
	if g.paused {
		e["qmpstatus"] = "paused"
	}
	if g.running {
		e["pid"] = g.pid
		e["running-machine"] = runningMach
		e["running-qemu"] = runningQemu
	}
	if t, ok := g.conf["tags"].(string); ok && t != "" {
		e["tags"] = t
	}
	if l := g.lock(); l != "" {
		e["lock"] = l
	}
	if g.isTemplate() {
		e["template"] = 1
	}
	if a, ok := g.conf["agent"].(string); ok {
		if pr := parseProperty(a); pr.first == "1" || pr.get("enabled") == "1" {
			e["agent"] = 1
		}
	}
	if n := st.nodes[g.node]; n != nil && !n.online {
		e["status"] = "unknown"
		for _, k := range []string{"cpu", "mem", "uptime", "qmpstatus", "pid", "running-machine", "running-qemu"} {
			delete(e, k)
		}
	}
	return e
}

func hQemuList(cl *call) (any, error) {
	c := cl.c
	now := time.Now()
	node := cl.vars["node"]
	ids := []int{}
	for id, g := range c.st.guests {
		if g.node == node {
			ids = append(ids, id)
		}
	}
	sort.Ints(ids)
	out := []map[string]any{}
	for _, id := range ids {
		e := c.st.guestStatus(c.st.guests[id], now)
		delete(e, "ha")
		delete(e, "qmpstatus")
		delete(e, "running-machine")
		delete(e, "running-qemu")
		delete(e, "agent")
		out = append(out, e)
	}
	return out, nil
}

func hQemuStatusCurrent(cl *call, g *guest) (any, error) {
	c := cl.c
	return c.st.guestStatus(g, time.Now()), nil
}

func hQemuConfigGet(cl *call, g *guest) (any, error) {
	out := make(map[string]any, len(g.conf)+1)
	for k, v := range g.conf {
		out[k] = jsonValue(v)
	}
	if !cl.p.bool("current") {
		for k, v := range g.pending {
			out[k] = jsonValue(v)
		}
		for k := range g.pendDel {
			delete(out, k)
		}
	}
	out["digest"] = g.digest()
	return out, nil
}

func hQemuPending(cl *call, g *guest) (any, error) {
	keys := map[string]bool{}
	for k := range g.conf {
		keys[k] = true
	}
	for k := range g.pending {
		keys[k] = true
	}
	out := []map[string]any{}
	for _, k := range sortedKeys(keys) {
		e := map[string]any{"key": k}
		if v, ok := g.conf[k]; ok {
			e["value"] = jsonValue(v)
		}
		if v, ok := g.pending[k]; ok {
			e["pending"] = jsonValue(v)
		}
		if g.pendDel[k] {
			e["delete"] = 1
		}
		out = append(out, e)
	}
	return out, nil
}

// hQemuConfigPut is the synchronous config update.
func hQemuConfigPut(cl *call, g *guest) (any, error) {
	c := cl.c
	if err := cl.checkConfigPerms(g.vmid); err != nil {
		return nil, err
	}
	if err := c.st.checkUpdate(g, cl.p); err != nil {
		return nil, err
	}
	if err := c.st.applyConfig(g, cl.p, cl); err != nil {
		return nil, err
	}
	return nil, nil
}

// hQemuConfigPost is the asynchronous config update: checks and changes happen now, a
// qmconfig task reports them.
func hQemuConfigPost(cl *call, g *guest) (any, error) {
	c := cl.c
	if _, err := hQemuConfigPut(cl, g); err != nil {
		return nil, err
	}
	t := c.st.runTask(g.node, "qmconfig", strconv.Itoa(g.vmid), cl.user, c.taskDuration(0, 0), func(*task) error { return nil })
	t.log = append(t.log, "update VM "+strconv.Itoa(g.vmid)+": "+describeUpdate(cl.p))
	return t.upid, nil
}

func describeUpdate(p params) string {
	var parts []string
	for _, k := range sortedKeys(p) {
		if k == "node" || k == "vmid" || k == "digest" {
			continue
		}
		v, _ := p.str(k)
		if k == "cipassword" {
			v = "<hidden>"
		}
		parts = append(parts, "-"+k+" "+v)
	}
	return strings.Join(parts, " ")
}

var (
	cpuKeys      = map[string]bool{"cores": true, "sockets": true, "cpu": true, "vcpus": true, "cpulimit": true, "cpuunits": true, "affinity": true, "numa": true}
	memoryKeys   = map[string]bool{"memory": true, "balloon": true, "shares": true}
	hwKeys       = map[string]bool{"vga": true, "scsihw": true, "machine": true, "bios": true, "tablet": true, "audio0": true, "rng0": true, "watchdog": true, "keyboard": true}
	cloudKeys    = map[string]bool{"ciuser": true, "cipassword": true, "sshkeys": true, "nameserver": true, "searchdomain": true, "citype": true, "ciupgrade": true, "cicustom": true}
	ipconfigKeyR = regexp.MustCompile(`^ipconfig\d+$`)
	netKeyR      = regexp.MustCompile(`^net\d+$`)
)

// configPrivilege is the privilege qemu-server's check_vm_modify_config_perm demands
// for changing one config key.
func configPrivilege(key string, value any) string {
	switch {
	case cpuKeys[key]:
		return "VM.Config.CPU"
	case memoryKeys[key]:
		return "VM.Config.Memory"
	case hwKeys[key]:
		return "VM.Config.HWType"
	case cloudKeys[key] || ipconfigKeyR.MatchString(key):
		return "VM.Config.Cloudinit"
	case netKeyR.MatchString(key):
		return "VM.Config.Network"
	case isDiskKey(key):
		if s, ok := value.(string); ok && isCDROM(s) && !strings.Contains(s, "cloudinit") {
			return "VM.Config.CDROM"
		}
		return "VM.Config.Disk"
	case strings.HasPrefix(key, "unused"):
		return "VM.Config.Disk"
	}
	return "VM.Config.Options"
}

// checkConfigPerms checks the per-key privileges of a config change.
func (cl *call) checkConfigPerms(vmid int) error {
	path := fmt.Sprintf("/vms/%d", vmid)
	keys := []string{}
	for k := range cl.p {
		if !configSkip[k] {
			keys = append(keys, k)
		}
	}
	if d, ok := cl.p.str("delete"); ok {
		keys = append(keys, splitList(d)...)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if err := cl.require(path, configPrivilege(k, cl.p[k])); err != nil {
			return err
		}
	}
	return nil
}

// checkUpdate applies the lock and digest checks of a config update.
func (st *state) checkUpdate(g *guest, p params) error {
	if !p.bool("skiplock") {
		if err := g.checkLock(); err != nil {
			return err
		}
	}
	if d, ok := p.str("digest"); ok && d != "" && d != g.digest() {
		return errorf(http.StatusInternalServerError, errDigest)
	}
	return g.checkBootOrder(p)
}

// checkBootOrder refuses a boot order naming a device the guest would not
// have, as qemu-server's update_vm_api does: each device of the order must
// be in the config, its pending section or the request, and not deleted by
// the request.
func (g *guest) checkBootOrder(p params) error {
	boot, ok := p.str("boot")
	if !ok {
		return nil
	}
	order := parseProperty(boot).get("order")
	if order == "" {
		return nil
	}
	var deletes []string
	if d, ok := p.str("delete"); ok {
		deletes = splitList(d)
	}
	for _, dev := range strings.Split(order, ";") {
		_, inConf := g.conf[dev]
		_, inPending := g.pending[dev]
		if (!inConf && !inPending && !p.has(dev)) || slices.Contains(deletes, dev) {
			return errorf(http.StatusInternalServerError, "invalid bootorder: device '%s' does not exist'", dev)
		}
	}
	return nil
}

var (
	allocRE  = regexp.MustCompile(`^([a-zA-Z][a-zA-Z0-9._-]*):(\d+(\.\d+)?)$`)
	sizeArgR = regexp.MustCompile(`^(\+)?(\d+(\.\d+)?)([KMGT])?$`)
)

func splitList(s string) []string {
	return strings.FieldsFunc(s, func(r rune) bool { return r == ',' || r == ';' || r == ' ' })
}

// applyConfig changes g's config as Proxmox's update_vm does: validated parameters are
// set, `delete` keys removed (disks become unusedN), new disks allocated ("STORAGE:SIZE",
// "STORAGE:cloudinit", "STORAGE:0,import-from=VOLID"). Nothing changes on error.
func (st *state) applyConfig(g *guest, p params, cl *call) error {
	if !g.running {
		g.applyPending()
	}
	conf := make(map[string]any, len(g.conf))
	for k, v := range g.conf {
		conf[k] = v
	}
	var newVols []*volume
	var freed []string
	touched := map[string]bool{}

	var deletes []string
	if d, ok := p.str("delete"); ok {
		deletes = splitList(d)
	}
	var reverts []string
	if r, ok := p.str("revert"); ok {
		reverts = splitList(r)
		for _, k := range reverts {
			if _, ok := g.pending[k]; !ok && !g.pendDel[k] {
				return paramError("revert", fmt.Sprintf("no pending change for '%s'", k))
			}
		}
	}
	if keys, ok := p.str("sshkeys"); ok {
		if err := validateSSHKeys(keys); err != nil {
			return err
		}
	}
	for _, k := range deletes {
		if p.has(k) {
			return paramError("delete", fmt.Sprintf("you can't use '-%s' and '-delete %s' at the same time", k, k))
		}
		touched[k] = true
		v, ok := conf[k]
		if !ok {
			continue
		}
		if err := g.checkRemovable(k, v); err != nil {
			return err
		}
		delete(conf, k)
		s, _ := v.(string)
		if isDiskKey(k) && !isCDROM(s) && p.bool("force") {
			freed = append(freed, parseProperty(s).first) // force: removed, not kept as unusedN
		} else if isDiskKey(k) && !isCDROM(s) {
			unusedAdd(conf, parseProperty(s).first)
		} else if isDiskKey(k) && strings.Contains(s, "cloudinit") {
			freed = append(freed, parseProperty(s).first)
		} else if strings.HasPrefix(k, "unused") {
			freed = append(freed, s)
		}
	}

	for _, k := range sortedKeys(p) {
		if configSkip[k] {
			continue
		}
		touched[k] = true
		v := p[k]
		s, isStr := v.(string)
		switch {
		case isDiskKey(k) && isStr:
			nv, vol, err := st.prepareDisk(g, conf, k, s, newVols)
			if err != nil {
				return err
			}
			if old, ok := conf[k].(string); ok {
				oldVol := parseProperty(old).first
				if oldVol != parseProperty(nv).first && !isCDROM(old) {
					unusedAdd(conf, oldVol)
				} else if oldVol != parseProperty(nv).first && strings.Contains(oldVol, "cloudinit") {
					freed = append(freed, oldVol)
				}
			}
			if vol != nil {
				newVols = append(newVols, vol)
			}
			conf[k] = nv
		case strings.HasPrefix(k, "net") && isStr:
			nv, err := normalizeNet(cl.ep, k, s)
			if err != nil {
				return err
			}
			conf[k] = nv
		case k == "tags" && isStr:
			conf[k] = canonicalTags(s)
		case k == "cicustom" && isStr:
			if err := st.checkCICustom(g.node, s); err != nil {
				return err
			}
			conf[k] = v
		default:
			conf[k] = v
		}
	}
	if g.running {
		g.deferChanges(conf, touched)
	}
	for _, k := range reverts {
		delete(g.pending, k)
		delete(g.pendDel, k)
	}
	for _, vol := range newVols {
		st.addVolume(g.node, vol)
	}
	for _, volid := range freed {
		st.removeVolume(g.node, volid)
	}
	g.conf = conf
	return nil
}

// canonicalTags renders a tag list as Proxmox stores it: lowercased, each tag once,
// sorted, joined with ";".
func canonicalTags(s string) string {
	seen := map[string]bool{}
	for _, t := range splitList(s) {
		seen[strings.ToLower(t)] = true
	}
	return strings.Join(sortedKeys(seen), ";")
}

// validateSSHKeys checks each non-empty line of the (URL-encoded) sshkeys value is an SSH
// public key, as PVE::Tools::validate_ssh_public_keys does with ssh-keygen.
func validateSSHKeys(encoded string) error {
	keys, err := url.PathUnescape(encoded)
	if err != nil {
		return errorf(http.StatusInternalServerError, "SSH public key validation error")
	}
	for _, line := range strings.Split(keys, "\n") {
		if strings.TrimSpace(line) == "" {
			continue
		}
		if _, _, _, _, err := ssh.ParseAuthorizedKey([]byte(line)); err != nil {
			return errorf(http.StatusInternalServerError, "SSH public key validation error")
		}
	}
	return nil
}

func (g *guest) protected() bool { return g.confInt("protection", 0) != 0 }

// checkRemovable refuses removing a drive or unused volume of a protected guest, as
// qemu-server's check_protection does.
func (g *guest) checkRemovable(key string, value any) error {
	if !g.protected() {
		return nil
	}
	switch {
	case isDiskKey(key):
		return errorf(http.StatusInternalServerError, "can't remove drive '%s' - protection mode enabled", key)
	case strings.HasPrefix(key, "unused"):
		return errorf(http.StatusInternalServerError, "can't remove unused disk '%v' - protection mode enabled", value)
	}
	return nil
}

func unusedAdd(conf map[string]any, volid string) {
	for i := 0; i < unusedMaxKeys; i++ {
		k := "unused" + strconv.Itoa(i)
		if _, ok := conf[k]; !ok {
			conf[k] = volid
			return
		}
	}
}

// normalizeNet renders a netN value as qemu-server stores it: "MODEL=MAC,bridge=...",
// generating a MAC address when none is given.
func normalizeNet(ep *apiEndpoint, key, s string) (string, error) {
	typed, aerr := ep.property(key, s)
	if aerr != nil {
		return "", aerr
	}
	model, _ := typed.str("model")
	mac, _ := typed.str("macaddr")
	if mac == "" {
		mac = randomMAC()
	}
	pr := parseProperty(s)
	pr.first = ""
	for _, k := range append([]string(nil), pr.keys...) {
		if k == "model" || k == "macaddr" || netModels[k] {
			pr.del(k)
		}
	}
	return netValue(model, mac, pr), nil
}

// netValue renders a NIC as qemu-server prints it: "MODEL=MAC" first, then the other
// options (pr, without the model key) sorted.
func netValue(model, mac string, pr *property) string {
	out := model + "=" + strings.ToUpper(mac)
	if rest := pr.String(); rest != "" {
		out += "," + rest
	}
	return out
}

// nextDiskName returns the next free disk name for vmid on a store.
func (st *state) nextDiskName(node, storage string, vmid int, pending []*volume) int {
	used := map[int]bool{}
	marker := fmt.Sprintf("-%d-disk-", vmid)
	mark := func(volid string) {
		// vm-100-disk-0, base-100-disk-1, base-9000-disk-0/vm-100-disk-2, ...
		for _, part := range strings.Split(volid, "/") {
			i := strings.Index(part, marker)
			if i < 0 {
				continue
			}
			digits := strings.TrimSuffix(part[i+len(marker):], ".qcow2")
			if n, err := strconv.Atoi(digits); err == nil {
				used[n] = true
			}
		}
	}
	for volid := range st.volumesOn(node, storage) {
		mark(volid)
	}
	for _, v := range pending {
		mark(v.volid)
	}
	n := 0
	for used[n] {
		n++
	}
	return n
}

func diskVolid(s *storageDef, vmid, n int, prefix string) (volid, format string) {
	if s.typ == "lvmthin" {
		return fmt.Sprintf("%s:%s-%d-disk-%d", s.id, prefix, vmid, n), "raw"
	}
	return fmt.Sprintf("%s:%d/%s-%d-disk-%d.qcow2", s.id, vmid, prefix, vmid, n), "qcow2"
}

// prepareDisk turns a disk parameter into its stored form, allocating a volume if asked.
func (st *state) prepareDisk(g *guest, conf map[string]any, key, s string, pending []*volume) (string, *volume, error) {
	pr := parseProperty(s)
	vol := pr.first
	if pr.get("file") != "" {
		vol = pr.get("file")
		pr.del("file")
	}
	if vol == "" {
		return "", nil, paramError(key, "invalid format - format error: file: property is missing and it is not optional")
	}
	if vol == "none" || vol == "cdrom" {
		pr.first = vol
		return pr.String(), nil, nil
	}
	storageID, rest, hasColon := strings.Cut(vol, ":")
	if !hasColon {
		return "", nil, paramError(key, fmt.Sprintf("unable to parse volume ID '%s'", vol))
	}
	sd := st.storage(storageID)
	if sd == nil {
		return "", nil, errorf(http.StatusInternalServerError, "storage '%s' does not exist", storageID)
	}
	if pr.get("media") == "cdrom" {
		if st.findVolume(g.node, vol) == nil {
			return "", nil, errorf(http.StatusInternalServerError, "volume '%s' does not exist", vol)
		}
		pr.first = vol
		return pr.String(), nil, nil
	}
	switch {
	case rest == "cloudinit":
		if !sd.hasContent("images") {
			return "", nil, errorf(http.StatusInternalServerError, "storage '%s' does not support content-type 'images'", storageID)
		}
		volid := fmt.Sprintf("%s:vm-%d-cloudinit", storageID, g.vmid)
		format := "raw"
		if sd.typ != "lvmthin" {
			volid = fmt.Sprintf("%s:%d/vm-%d-cloudinit.qcow2", storageID, g.vmid, g.vmid)
			format = "qcow2"
		}
		pr.first = volid
		pr.set("media", "cdrom")
		return pr.String(), &volume{volid: volid, storage: storageID, content: "images", format: format, size: 4 << 20, vmid: g.vmid}, nil
	case allocRE.MatchString(vol):
		if !sd.hasContent("images") {
			return "", nil, errorf(http.StatusInternalServerError, "storage '%s' does not support content-type 'images'", storageID)
		}
		gib, _ := strconv.ParseFloat(rest, 64)
		size := int64(gib * (1 << 30))
		var from *volume
		if src := pr.get("import-from"); src != "" {
			sv := st.findVolume(g.node, src)
			from = sv
			if sv == nil {
				return "", nil, errorf(http.StatusInternalServerError, "volume '%s' does not exist", src)
			}
			if sv.size > size {
				size = sv.size
			}
			pr.del("import-from")
		}
		if size <= 0 {
			return "", nil, paramError(key, "invalid format - disk size must be positive")
		}
		n := st.nextDiskName(g.node, storageID, g.vmid, pending)
		volid, format := diskVolid(sd, g.vmid, n, "vm")
		pr.first = volid
		pr.set("size", formatSize(size))
		return pr.String(), &volume{volid: volid, storage: storageID, content: "images", format: format, size: size, vmid: g.vmid, src: from}, nil
	default:
		v := st.findVolume(g.node, vol)
		if v == nil {
			return "", nil, errorf(http.StatusInternalServerError, "volume '%s' does not exist", vol)
		}
		pr.first = vol
		if pr.get("size") == "" {
			pr.set("size", formatSize(v.size))
		}
		return pr.String(), nil, nil
	}
}

// hQemuCreate creates a VM: the VMID is claimed at once (a second claim fails), disks are
// allocated, and a qmcreate task releases the create lock.
func hQemuCreate(cl *call) (any, error) {
	c := cl.c
	node := cl.vars["node"]
	vmid := cl.vmid()
	if err := cl.checkConfigPerms(vmid); err != nil {
		return nil, err
	}
	if err := c.st.checkVMIDFree(vmid); err != nil {
		return nil, err
	}
	if archive, ok := cl.p.str("archive"); ok {
		return restoreGuest(cl, vmid, archive)
	}
	poolID, _ := cl.p.str("pool")
	if poolID != "" && c.st.pools[poolID] == nil {
		return nil, errorf(http.StatusInternalServerError, "pool '%s' does not exist", poolID)
	}
	g := &guest{vmid: vmid, node: node, conf: map[string]any{}}
	if err := c.st.applyConfig(g, cl.p, cl); err != nil {
		return nil, err
	}
	if _, ok := g.conf["smbios1"]; !ok {
		g.conf["smbios1"] = "uuid=" + uuid()
	}
	if _, ok := g.conf["vmgenid"]; !ok {
		g.conf["vmgenid"] = uuid()
	}
	if _, ok := g.conf["meta"]; !ok {
		g.conf["meta"] = fmt.Sprintf("creation-qemu=%s,ctime=%d", runningQemu, time.Now().Unix())
	}
	g.conf["lock"] = "create"
	g.pool = poolID
	c.st.guests[vmid] = g
	start := cl.p.bool("start")
	user := cl.user
	t := c.st.runTask(node, "qmcreate", strconv.Itoa(vmid), user, c.taskDuration(0, float64(g.diskBytes())/float64(1<<30)/10), func(t *task) error {
		if c.st.guests[vmid] != g {
			return fmt.Errorf("VM %d vanished during create", vmid)
		}
		delete(g.conf, "lock")
		if start {
			c.st.startGuest(g, user)
		}
		return nil
	})
	for _, k := range g.disks() {
		t.log = append(t.log, fmt.Sprintf("%s: successfully created disk '%s'", k, g.conf[k]))
	}
	return t.upid, nil
}

// newMACs gives every NIC of conf a new random MAC, as a clone or a
// restore with unique does.
func newMACs(conf map[string]any) {
	for k, v := range conf {
		if s, ok := v.(string); ok && strings.HasPrefix(k, "net") {
			pr := parseProperty(s)
			for _, key := range pr.keys {
				if netModels[key] {
					pr.del(key)
					conf[k] = netValue(key, randomMAC(), pr)
					break
				}
			}
		}
	}
}

func uuid() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:])
}

// startGuest starts a qmstart task for g; the caller holds mu.
func (st *state) startGuest(g *guest, user string) *task {
	return st.startGuestAs(g, "qmstart", user)
}

// startGuestAs starts g in a task of type typ (qmstart, or hastart when the HA manager
// starts it on the API's request); the caller holds mu.
func (st *state) startGuestAs(g *guest, typ, user string) *task {
	c := st.c
	check := func() error {
		if err := g.checkLock(); err != nil {
			return err
		}
		if g.isTemplate() {
			return fmt.Errorf("you can't start a vm if it's a template")
		}
		if g.running {
			return fmt.Errorf("VM %d already running", g.vmid)
		}
		for _, k := range sortedKeys(g.conf) {
			s, ok := g.conf[k].(string)
			if !ok || !netKeyR.MatchString(k) {
				continue
			}
			if br := parseProperty(s).get("bridge"); br != "" && !st.bridgeExists(g.node, br) {
				return fmt.Errorf("bridge '%s' does not exist", br)
			}
		}
		for _, volid := range g.volumes() {
			if st.findVolume(g.node, volid) == nil {
				return fmt.Errorf("volume '%s' does not exist", volid)
			}
		}
		return nil
	}
	return st.runChecked(g.node, typ, strconv.Itoa(g.vmid), user, c.taskDuration(c.cfg.Timing.Start, 0), check, func(t *task) error {
		g.applyPending()
		if err := st.sdn.dhcpMappings(g, t); err != nil {
			return err
		}
		st.boot(g)
		return nil
	})
}

// boot marks g running from now on, with a new QEMU process.
func (st *state) boot(g *guest) {
	g.running = true
	g.paused = false
	g.startedAt = time.Now()
	g.pid = int(st.nextPID) + 17
	st.noteFirstBoot(g)
}

// checkRunning is the precondition of shutdown and reboot: unlocked and running.
func (g *guest) checkRunning() error {
	if err := g.checkLock(); err != nil {
		return err
	}
	if !g.running {
		return fmt.Errorf("VM %d not running", g.vmid)
	}
	return nil
}

// bridgeExists reports whether node has an applied bridge (or SDN vnet) called name.
func (st *state) bridgeExists(node, name string) bool {
	if e := st.nodes[node].ifaces[name]; e != nil && (e["type"] == "bridge" || e["type"] == "OVSBridge") {
		return true
	}
	_, ok := st.sdn.running.vnets[name]
	return ok
}

// onGuest resolves the {vmid} of the path on its {node} for a guest handler.
func onGuest(h func(*call, *guest) (any, error)) handlerFunc {
	return func(cl *call) (any, error) {
		g, err := cl.c.st.guestOn(cl.vars["node"], cl.vmid())
		if err != nil {
			return nil, err
		}
		return h(cl, g)
	}
}

// guestSubdirs is a directory index below an existing guest.
func guestSubdirs(names ...string) handlerFunc {
	idx := subdirs("subdir", names...)
	return onGuest(func(cl *call, _ *guest) (any, error) { return idx(cl) })
}

// subdirs answers a directory index like Proxmox's: [{key: name}, ...].
func subdirs(key string, names ...string) handlerFunc {
	return func(*call) (any, error) {
		out := make([]map[string]any, 0, len(names))
		for _, n := range names {
			out = append(out, map[string]any{key: n})
		}
		return out, nil
	}
}

// hQemuStart starts g; an HA-managed guest is started by the HA manager: qemu-server
// answers a hastart task that ends once the request state "started" is queued, and the
// node's LRM starts the guest on the manager's next cycle (haRequest).
func hQemuStart(cl *call, g *guest) (any, error) {
	c := cl.c
	if r := c.st.haManaged(g.vmid); r != nil {
		return c.st.haRequest(g, r, "hastart", "started", cl.user).upid, nil
	}
	return c.st.startGuest(g, cl.user).upid, nil
}

func hQemuStop(cl *call, g *guest) (any, error) {
	c := cl.c
	if r := c.st.haManaged(g.vmid); r != nil {
		return c.st.haRequest(g, r, "hastop", "stopped", cl.user).upid, nil
	}
	skiplock := cl.p.bool("skiplock")
	check := func() error {
		if skiplock {
			return nil
		}
		return g.checkLock()
	}
	t := c.st.runChecked(g.node, "qmstop", strconv.Itoa(g.vmid), cl.user, c.taskDuration(c.cfg.Timing.Stop, 0), check, func(*task) error {
		g.stop()
		return nil
	})
	return t.upid, nil
}

func hQemuShutdown(cl *call, g *guest) (any, error) {
	c := cl.c
	if r := c.st.haManaged(g.vmid); r != nil {
		return c.st.haRequest(g, r, "hastop", "stopped", cl.user).upid, nil
	}
	t := c.st.runChecked(g.node, "qmshutdown", strconv.Itoa(g.vmid), cl.user, c.taskDuration(c.cfg.Timing.Shutdown, 0), g.checkRunning, func(*task) error {
		g.stop()
		return nil
	})
	return t.upid, nil
}

func hQemuReboot(cl *call, g *guest) (any, error) {
	c := cl.c
	if !g.running {
		return nil, errorf(http.StatusInternalServerError, "VM %d not running", g.vmid)
	}
	t := c.st.runChecked(g.node, "qmreboot", strconv.Itoa(g.vmid), cl.user, c.taskDuration(c.cfg.Timing.Shutdown+c.cfg.Timing.Start, 0), g.checkRunning, func(*task) error {
		g.stop()
		g.applyPending()
		c.st.boot(g)
		return nil
	})
	return t.upid, nil
}

// hQemuTemplate converts a stopped VM into a template, renaming its disks to base-*.
func hQemuTemplate(cl *call, g *guest) (any, error) {
	c := cl.c
	if err := g.checkLock(); err != nil {
		return nil, err
	}
	if g.isTemplate() {
		return nil, errorf(http.StatusInternalServerError, "you can't convert a template to a template")
	}
	if g.running {
		return nil, errorf(http.StatusInternalServerError, "you can't convert a VM to template if VM is running")
	}
	g.conf["lock"] = "template"
	t := c.st.runTask(g.node, "qmtemplate", strconv.Itoa(g.vmid), cl.user, c.taskDuration(0, 0), func(*task) error {
		delete(g.conf, "lock")
		for _, k := range g.disks() {
			s := g.conf[k].(string)
			pr := parseProperty(s)
			old := pr.first
			nv := strings.Replace(old, fmt.Sprintf("vm-%d-disk-", g.vmid), fmt.Sprintf("base-%d-disk-", g.vmid), 1)
			if nv == old {
				continue
			}
			// A thin pool's base volume is a plain LV: a linked clone turned template
			// leaves its own base's name behind ("base-9000-disk-0/vm-101-disk-0" ->
			// "base-101-disk-0"); file storages keep the chain in the name.
			if sid, name, _ := strings.Cut(nv, ":"); c.st.storage(sid) != nil && c.st.storage(sid).typ == "lvmthin" {
				nv = sid + ":" + name[strings.LastIndex(name, "/")+1:]
			}
			if v := c.st.findVolume(g.node, old); v != nil {
				v.volid = nv
				c.st.moveVolume(g.node, old, g.node, v)
			}
			pr.first = nv
			g.conf[k] = pr.String()
		}
		g.conf["template"] = true
		return nil
	})
	return t.upid, nil
}

// hQemuResize grows a disk ("+1G" or an absolute size); shrinking fails like Proxmox.
func hQemuResize(cl *call, g *guest) (any, error) {
	c := cl.c
	if err := c.st.checkUpdate(g, cl.p); err != nil {
		return nil, err
	}
	disk, _ := cl.p.str("disk")
	sizeArg, _ := cl.p.str("size")
	s, ok := g.conf[disk].(string)
	if !ok || !isDiskKey(disk) {
		return nil, errorf(http.StatusInternalServerError, "disk '%s' does not exist", disk)
	}
	if isCDROM(s) {
		return nil, errorf(http.StatusInternalServerError, "you can't resize a cdrom")
	}
	m := sizeArgR.FindStringSubmatch(sizeArg)
	if m == nil {
		return nil, paramError("size", "value does not match the regex pattern")
	}
	pr := parseProperty(s)
	cur, _ := parseSize(pr.get("size"))
	if v := c.st.findVolume(g.node, pr.first); v != nil {
		cur = v.size
	}
	amount, _ := parseSize(m[2] + m[4])
	if m[4] == "" {
		amount, _ = parseSize(m[2])
	}
	newSize := amount
	if m[1] == "+" {
		newSize = cur + amount
	}
	if newSize < cur {
		return nil, errorf(http.StatusInternalServerError, "shrinking disks is not supported")
	}
	volid := pr.first
	t := c.st.runTask(g.node, "resize", strconv.Itoa(g.vmid), cl.user, c.taskDuration(0, 0), func(*task) error {
		s, ok := g.conf[disk].(string)
		if !ok {
			return fmt.Errorf("disk '%s' does not exist", disk)
		}
		pr := parseProperty(s)
		if pr.first != volid {
			return fmt.Errorf("disk '%s' changed during resize", disk)
		}
		pr.set("size", formatSize(newSize))
		g.conf[disk] = pr.String()
		if v := c.st.findVolume(g.node, volid); v != nil {
			v.size = newSize
			c.st.resizeFile(v)
		}
		return nil
	})
	if newSize == cur {
		t.log = append(t.log, "disk size unchanged")
	}
	return t.upid, nil
}

// hQemuDelete destroys a stopped VM and its disks.
func hQemuDelete(cl *call, g *guest) (any, error) {
	c := cl.c
	if g.protected() {
		return nil, errorf(http.StatusInternalServerError, "can't remove VM %d - protection mode enabled", g.vmid)
	}
	if !cl.p.bool("skiplock") {
		if err := g.checkLock(); err != nil {
			return nil, err
		}
	}
	if g.running {
		return nil, errorf(http.StatusInternalServerError, "VM %d is running - destroy failed", g.vmid)
	}
	sid := "vm:" + strconv.Itoa(g.vmid)
	purge := cl.p.bool("purge")
	if c.st.ha.res[sid] != nil && !purge {
		return nil, errorf(http.StatusInternalServerError, "unable to remove VM %d - used in HA resources and purge parameter not set.", g.vmid)
	}
	if g.isTemplate() {
		for _, other := range c.st.guests {
			for _, v := range other.volumes() {
				for _, base := range g.volumes() {
					_, baseName, _ := strings.Cut(base, ":")
					if other != g && strings.Contains(v, baseName+"/") {
						return nil, errorf(http.StatusInternalServerError, "base volume '%s' is still in use by linked cloned", base)
					}
				}
			}
		}
	}
	destroyUnref := cl.p.bool("destroy-unreferenced-disks")
	g.conf["lock"] = "destroyed"
	vmid := g.vmid
	t := c.st.runTask(g.node, "qmdestroy", strconv.Itoa(vmid), cl.user, c.taskDuration(0, 0), func(t *task) error {
		for _, volid := range g.volumes() {
			c.st.removeVolume(g.node, volid)
			t.log = append(t.log, fmt.Sprintf("Removing image: 100%% complete...done. (%s)", volid))
		}
		if destroyUnref {
			for _, s := range c.st.storages {
				for volid, v := range c.st.volumesOn(g.node, s.id) {
					if v.vmid == vmid && v.content == "images" {
						c.st.removeVolume(g.node, volid)
					}
				}
			}
		}
		delete(c.st.guests, vmid)
		c.st.sdn.releaseVM(vmid)
		if purge {
			c.st.haRemove(sid, true)
		}
		return nil
	})
	return t.upid, nil
}

// hQemuClone clones a VM or template, full or linked, optionally to another node. The new
// VMID is claimed at once (with lock "clone"); its disks appear when the task ends.
func hQemuClone(cl *call, src *guest) (any, error) {
	c := cl.c
	newid64, _ := cl.p.int("newid")
	newid := int(newid64)
	if newid == src.vmid {
		return nil, paramError("newid", "unable to clone to the same VM ID")
	}
	if err := src.checkLock(); err != nil {
		return nil, err
	}
	// snapname clones the config a snapshot holds instead of the current one.
	from := src.conf
	if name, ok := cl.p.str("snapname"); ok && name != "" {
		s := src.snaps[name]
		if s == nil {
			return nil, errorf(http.StatusInternalServerError, "snapshot '%s' does not exist", name)
		}
		from = s.conf
	}
	target := cl.vars["node"]
	if t, ok := cl.p.str("target"); ok && t != "" {
		n := c.st.nodes[t]
		if n == nil {
			return nil, paramError("target", fmt.Sprintf("no such cluster node '%s'", t))
		}
		if !n.online {
			return nil, errorf(http.StatusInternalServerError, "target node '%s' is not online", t)
		}
		target = t
	}
	full := !src.isTemplate()
	if cl.p.has("full") {
		full = cl.p.bool("full")
	}
	if !full && !src.isTemplate() {
		return nil, paramError("full", "linked clones are only possible on templates")
	}
	if !full {
		for _, k := range src.disks() {
			volid := parseProperty(src.conf[k].(string)).first
			if !isBaseVolume(volid) {
				return nil, errorf(http.StatusInternalServerError, "Linked clone feature is not supported for '%s' (%s)", volid, k)
			}
		}
	}
	storageID, hasStorage := cl.p.str("storage")
	if hasStorage && !full {
		return nil, paramError("storage", "parameter not allowed for linked clones")
	}
	if hasStorage {
		sd := c.st.storage(storageID)
		if sd == nil {
			return nil, errorf(http.StatusInternalServerError, "storage '%s' does not exist", storageID)
		}
		if !sd.hasContent("images") {
			return nil, errorf(http.StatusInternalServerError, "storage '%s' does not support content-type 'images'", storageID)
		}
	}
	if target != src.node {
		for _, volid := range src.volumes() {
			sid, _, _ := strings.Cut(volid, ":")
			if sd := c.st.storage(sid); sd == nil || !sd.shared {
				return nil, errorf(http.StatusInternalServerError, "can't clone VM to node '%s' (VM uses local storage)", target)
			}
		}
	}
	poolID, _ := cl.p.str("pool")
	if poolID != "" && c.st.pools[poolID] == nil {
		return nil, errorf(http.StatusInternalServerError, "pool '%s' does not exist", poolID)
	}
	if g := c.st.guests[newid]; g != nil {
		return nil, errorf(http.StatusInternalServerError, "unable to create VM %d: config file already exists", newid)
	}

	conf := map[string]any{}
	for k, v := range from {
		switch {
		case k == "template" || k == "lock" || k == "parent" || k == "snapshots":
		case isDiskKey(k) && !isCDROM(v.(string)):
		case isDiskKey(k) && strings.Contains(v.(string), "cloudinit"):
		case strings.HasPrefix(k, "unused"):
		default:
			conf[k] = v
		}
	}
	newMACs(conf)
	conf["name"] = cl.p.strOr("name", "Copy-of-VM-"+src.name())
	if d, ok := cl.p.str("description"); ok {
		conf["description"] = d
	}
	conf["vmgenid"] = uuid()
	conf["smbios1"] = "uuid=" + uuid()
	conf["lock"] = "clone"
	ng := &guest{vmid: newid, node: target, conf: conf, pool: poolID}
	if src.fw != nil {
		ng.fw = src.fw.clone()
	}
	c.st.guests[newid] = ng

	srcConf := make(map[string]any, len(from))
	for k, v := range from {
		srcConf[k] = v
	}
	gib := 0.0
	if full {
		gib = float64(src.diskBytes()) / float64(1<<30)
	}
	srcNode := src.node
	t := c.st.runTask(cl.vars["node"], "qmclone", strconv.Itoa(src.vmid), cl.user, c.taskDuration(0, gib), func(t *task) error {
		if c.st.guests[newid] != ng {
			return fmt.Errorf("VM %d vanished during clone", newid)
		}
		if !c.st.nodes[target].online {
			delete(c.st.guests, newid)
			return fmt.Errorf("clone failed: target node '%s' is not online", target)
		}
		var pending []*volume
		for _, k := range sortedKeys(srcConf) {
			s, ok := srcConf[k].(string)
			if !ok || !isDiskKey(k) {
				continue
			}
			pr := parseProperty(s)
			if isCDROM(s) && !strings.Contains(pr.first, "cloudinit") {
				continue
			}
			sv := c.st.findVolume(srcNode, pr.first)
			if sv == nil {
				delete(c.st.guests, newid)
				return fmt.Errorf("clone failed: volume '%s' does not exist", pr.first)
			}
			sid := sv.storage
			if hasStorage {
				sid = storageID
			}
			sd := c.st.storage(sid)
			var nv *volume
			switch {
			case strings.Contains(pr.first, "cloudinit"):
				volid := fmt.Sprintf("%s:vm-%d-cloudinit", sid, newid)
				if sd.typ != "lvmthin" {
					volid = fmt.Sprintf("%s:%d/vm-%d-cloudinit.qcow2", sid, newid, newid)
				}
				nv = &volume{volid: volid, storage: sid, content: "images", format: sv.format, size: sv.size, vmid: newid}
			case full:
				n := c.st.nextDiskName(target, sid, newid, pending)
				volid, format := diskVolid(sd, newid, n, "vm")
				nv = &volume{volid: volid, storage: sid, content: "images", format: format, size: sv.size, vmid: newid, src: sv}
			default:
				n := c.st.nextDiskName(target, sid, newid, pending)
				child, format := diskVolid(sd, newid, n, "vm")
				_, childName, _ := strings.Cut(child, ":")
				_, baseName, _ := strings.Cut(sv.volid, ":")
				if sd.typ != "lvmthin" {
					childName = strings.TrimPrefix(childName, fmt.Sprintf("%d/", newid))
					nv = &volume{volid: fmt.Sprintf("%s:%s/%d/%s", sid, baseName, newid, childName), storage: sid, content: "images", format: format, size: sv.size, vmid: newid, parent: sv.volid, src: sv}
				} else {
					nv = &volume{volid: fmt.Sprintf("%s:%s/%s", sid, baseName, childName), storage: sid, content: "images", format: format, size: sv.size, vmid: newid, parent: sv.volid, src: sv}
				}
			}
			pending = append(pending, nv)
			pr.first = nv.volid
			ng.conf[k] = pr.String()
			t.log = append(t.log, fmt.Sprintf("create full clone of drive %s (%s)", k, sv.volid))
		}
		for _, v := range pending {
			c.st.addVolume(target, v)
		}
		delete(ng.conf, "lock")
		return nil
	})
	return t.upid, nil
}

// isBaseVolume reports whether volid is a template's base volume ("local-lvm:base-100-disk-0",
// "shared:100/base-100-disk-0.qcow2"), the only kind storage can clone linked.
func isBaseVolume(volid string) bool {
	_, name, _ := strings.Cut(volid, ":")
	return strings.HasPrefix(name[strings.LastIndex(name, "/")+1:], "base-")
}

// hQemuMigrate moves a VM to another node of the cluster, online or offline, copying
// local disks.
func hQemuMigrate(cl *call, g *guest) (any, error) {
	c := cl.c
	target, _ := cl.p.str("target")
	if target == g.node {
		return nil, paramError("target", "target is local node.")
	}
	tn := c.st.nodes[target]
	if tn == nil {
		return nil, paramError("target", fmt.Sprintf("no such cluster node '%s'", target))
	}
	if !tn.online {
		return nil, errorf(http.StatusInternalServerError, "target node '%s' is not online", target)
	}
	if err := g.checkLock(); err != nil {
		return nil, err
	}
	online := cl.p.bool("online")
	if g.running && !online {
		return nil, errorf(http.StatusInternalServerError, "can't migrate running VM without --online")
	}
	// qemu-server hands an HA-managed guest's migration to the manager: a hamigrate
	// task that ends once the request is queued; the CRM migrates it on its next cycle.
	if r := c.st.haManaged(g.vmid); r != nil {
		return c.st.haMigrateRequest(g, r, target, cl.user).upid, nil
	}
	withLocal := cl.p.bool("with-local-disks")
	targetStorage, _ := cl.p.str("targetstorage")
	var localBytes int64
	var localVols []string
	for _, volid := range g.volumes() {
		sid, _, _ := strings.Cut(volid, ":")
		if sd := c.st.storage(sid); sd != nil && !sd.shared {
			localVols = append(localVols, volid)
			if v := c.st.findVolume(g.node, volid); v != nil {
				localBytes += v.size
			}
		}
	}
	gib := float64(localBytes) / float64(1<<30)
	if g.running {
		gib += float64(g.maxmem()) / float64(1<<30)
	}
	src := g.node
	if g.running && len(localVols) > 0 && !withLocal {
		// qemu-server's phase 1 refuses at once; the task fails without moving anything.
		t := c.st.newTask(src, "qmigrate", strconv.Itoa(g.vmid), cl.user)
		t.finish(fmt.Errorf("migration aborted: can't live migrate attached local disks without with-local-disks option"))
		return t.upid, nil
	}
	g.conf["lock"] = "migrate"
	d := c.taskDuration(0, gib)
	t := c.st.runTask(src, "qmigrate", strconv.Itoa(g.vmid), cl.user, d, func(t *task) error {
		delete(g.conf, "lock")
		if !c.st.nodes[target].online {
			return fmt.Errorf("migration aborted: target node '%s' is not online", target)
		}
		t.log = append(t.log, fmt.Sprintf("starting migration of VM %d to node '%s' (%s)", g.vmid, target, c.st.nodes[target].ip))
		final := migrationProgress(c, g, localVols, src, 1, d)
		for _, volid := range localVols {
			v := c.st.findVolume(src, volid)
			if v == nil {
				continue
			}
			if targetStorage != "" && targetStorage != v.storage {
				newVolid := targetStorage + ":" + strings.SplitN(volid, ":", 2)[1]
				for k, cv := range g.conf {
					if s, ok := cv.(string); ok && parseProperty(s).first == volid {
						pr := parseProperty(s)
						pr.first = newVolid
						g.conf[k] = pr.String()
					}
				}
				v.volid, v.storage = newVolid, targetStorage
			}
			c.st.moveVolume(src, volid, target, v)
			t.log = append(t.log, fmt.Sprintf("volume '%s' is '%s' on the target", volid, v.volid))
		}
		g.node = target
		t.log = append(t.log, final...)
		t.log = append(t.log, "migration finished successfully")
		return nil
	})
	// qemu-server logs each mirror job's progress and, for a running guest,
	// the memory's as it goes; the simulator logs a quarter at a time.
	for k := 1; k < 4; k++ {
		frac := float64(k) / 4
		c.st.after(time.Duration(frac*float64(d)), func() {
			if t.running {
				t.log = append(t.log, migrationProgress(c, g, localVols, src, frac, d)...)
			}
		})
	}
	return t.upid, nil
}

// migrationProgress renders the task log lines of a migration that is frac
// done after frac of d, as qemu-server writes them: one line per local
// disk's mirror job, one for the memory of a running guest. The caller
// holds mu.
func migrationProgress(c *Cluster, g *guest, vols []string, node string, frac float64, d time.Duration) []string {
	secs := int64(frac * d.Seconds())
	var out []string
	for i, volid := range vols {
		var size int64
		if v := c.st.findVolume(node, volid); v != nil {
			size = v.size
		}
		drive := "drive-" + driveOf(g, volid, i)
		done := int64(frac * float64(size))
		out = append(out, fmt.Sprintf("%s: transferred %s of %s (%.2f%%) in %ds", drive, renderSize(done), renderSize(size), frac*100, secs))
	}
	if g.running {
		mem := g.maxmem()
		done := int64(frac * float64(mem))
		rate := float64(mem) / max(d.Seconds(), 0.001)
		state := "active"
		if frac >= 1 {
			state = "completed"
		}
		out = append(out, fmt.Sprintf("migration %s, transferred %s of %s VM-state, %s/s", state, renderSize(done), renderSize(mem), renderSize(int64(rate))))
	}
	return out
}

// driveOf names the disk slot of volid in g's config (scsi0, ...), or a
// made-up one.
func driveOf(g *guest, volid string, i int) string {
	for k, cv := range g.conf {
		if s, ok := cv.(string); ok && isDiskKey(k) && parseProperty(s).first == volid {
			return k
		}
	}
	return "unused" + strconv.Itoa(i)
}

// renderSize renders n bytes as Proxmox's task logs do (one decimal,
// binary units).
func renderSize(n int64) string {
	units := []string{"B", "KiB", "MiB", "GiB", "TiB"}
	f, i := float64(n), 0
	for f >= 1024 && i < len(units)-1 {
		f /= 1024
		i++
	}
	if i == 0 {
		return fmt.Sprintf("%d B", n)
	}
	return fmt.Sprintf("%.1f %s", f, units[i])
}
