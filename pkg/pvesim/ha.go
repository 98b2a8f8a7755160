package pvesim

import (
	"cmp"
	"crypto/sha1"
	"encoding/hex"
	"fmt"
	"net/http"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"
)

// DefaultFenceDelay is how long Proxmox's HA manager waits for a node that went offline
// before it fences it and recovers its HA resources elsewhere (the watchdog's 60 s).
const DefaultFenceDelay = 60 * time.Second

// haState is the cluster's HA stack: the configuration (/etc/pve/ha/resources.cfg and
// rules.cfg) and the manager's view of nodes and services (manager_status). Every field
// is protected by Cluster.mu.
type haState struct {
	res   map[string]*haResource // by sid, "vm:100"
	rules map[string]*haRule     // by rule id
	// fenced are the nodes the manager fenced (until they are online again).
	fenced map[string]bool
	// gen counts each node's offline periods, so that a fence timer of an earlier one
	// does nothing.
	gen map[string]int
	// round is set while the manager's next round (haRound) is scheduled.
	round bool
}

// haResource is one HA resource (a guest the HA manager keeps in its requested state).
type haResource struct {
	sid         string
	vmid        int
	state       string // requested: started, stopped, disabled, ignored
	comment     string
	maxRestart  int64
	maxRelocate int64
	failback    bool
	// crm is the service's state as the CRM sees it: started, stopped, request_stop,
	// migrate, fence, recovery, error, ignored.
	crm string
	// target is a migration the API queued (hamigrate, /migrate) that the manager has
	// not begun yet.
	target string
	// lrm is the node's LRM's last start or stop of the guest (nil: none since the
	// manager last looked).
	lrm *task
	// fails counts the LRM's starts that failed in a row since the requested state was
	// last set: more than maxRestart put the service in error.
	fails int64
}

// haRule is one HA rule: node-affinity (nodes with priorities, strict or not) or
// resource-affinity (positive: together; negative: apart).
type haRule struct {
	id        string
	typ       string
	resources []string
	affinity  string
	nodes     string
	strict    bool
	disable   bool
	comment   string
}

func newHAState() *haState {
	return &haState{res: map[string]*haResource{}, rules: map[string]*haRule{}, fenced: map[string]bool{}, gen: map[string]int{}}
}

// fenceDelay is the configured delay before an offline node is fenced.
func (c *Cluster) fenceDelay() time.Duration {
	if c.cfg.Timing.FenceDelay > 0 {
		return c.cfg.Timing.FenceDelay
	}
	return DefaultFenceDelay
}

// normalizeSID turns the VMID shortcut ("100") into "vm:100".
func normalizeSID(s string) string {
	if _, err := strconv.Atoi(s); err == nil {
		return "vm:" + s
	}
	return s
}

// haManaged is the HA resource of vmid unless HA ignores it; the caller holds mu.
func (st *state) haManaged(vmid int) *haResource {
	r := st.ha.res["vm:"+strconv.Itoa(vmid)]
	if r == nil || r.state == "ignored" {
		return nil
	}
	return r
}

func (r *haResource) entry() map[string]any {
	typ, _, _ := strings.Cut(r.sid, ":")
	e := map[string]any{"sid": r.sid, "type": typ, "state": r.state, "max_restart": r.maxRestart,
		"max_relocate": r.maxRelocate, "failback": boolInt(r.failback)}
	if r.comment != "" {
		e["comment"] = r.comment
	}
	return e
}

func (r *haResource) digest() string {
	sum := sha1.Sum([]byte(fmt.Sprint(r.entry())))
	return hex.EncodeToString(sum[:])
}

func (r *haRule) entry() map[string]any {
	e := map[string]any{"rule": r.id, "type": r.typ, "resources": strings.Join(r.resources, ","),
		"disable": boolInt(r.disable), "digest": r.digest()}
	if r.typ == "resource-affinity" {
		e["affinity"] = r.affinity
	} else {
		e["nodes"] = r.nodes
		e["strict"] = boolInt(r.strict)
	}
	if r.comment != "" {
		e["comment"] = r.comment
	}
	return e
}

func (r *haRule) digest() string {
	sum := sha1.Sum([]byte(fmt.Sprint(r.id, r.typ, r.resources, r.affinity, r.nodes, r.strict, r.disable, r.comment)))
	return hex.EncodeToString(sum[:])
}

func hHAIndex(*call) (any, error) {
	return []map[string]any{{"id": "status"}, {"id": "resources"}, {"id": "groups"}, {"id": "rules"}}, nil
}

func hHAResources(cl *call) (any, error) {
	typ := cl.p.strOr("type", "")
	out := []map[string]any{}
	for _, sid := range sortedKeys(cl.c.st.ha.res) {
		r := cl.c.st.ha.res[sid]
		if t, _, _ := strings.Cut(sid, ":"); typ != "" && t != typ {
			continue
		}
		e := r.entry()
		e["digest"] = r.digest()
		out = append(out, e)
	}
	return out, nil
}

func (st *state) haResourceOf(sid string) (*haResource, error) {
	sid = normalizeSID(sid)
	r := st.ha.res[sid]
	if r == nil {
		return nil, errorf(http.StatusInternalServerError, "no such resource '%s'", sid)
	}
	return r, nil
}

func hHAResourceGet(cl *call) (any, error) {
	r, err := cl.c.st.haResourceOf(cl.vars["sid"])
	if err != nil {
		return nil, err
	}
	e := r.entry()
	e["digest"] = r.digest()
	return e, nil
}

// hHACreateResource adds a guest to HA, as PVE::API2::HA::Resources does: the guest must
// exist and not be HA-managed already; a requested state "started" starts it.
func hHAResourceCreate(cl *call) (any, error) {
	st := cl.c.st
	sid := normalizeSID(cl.vars["sid"])
	if s, ok := cl.p.str("sid"); ok {
		sid = normalizeSID(s)
	}
	typ, name, _ := strings.Cut(sid, ":")
	if t, ok := cl.p.str("type"); ok && t != typ {
		return nil, paramError("type", fmt.Sprintf("type mismatch '%s' != '%s'", t, typ))
	}
	if typ != "vm" {
		return nil, errorf(http.StatusInternalServerError, "unable to create resource '%s': no such %s", sid, typ)
	}
	vmid, _ := strconv.Atoi(name)
	g := st.guests[vmid]
	if g == nil {
		return nil, errorf(http.StatusInternalServerError, "no such VM '%d'", vmid)
	}
	if st.ha.res[sid] != nil {
		return nil, errorf(http.StatusInternalServerError, "resource ID '%s' already defined", sid)
	}
	r := &haResource{sid: sid, vmid: vmid, state: "started", maxRestart: 1, maxRelocate: 1, failback: true}
	if err := r.set(cl.p); err != nil {
		return nil, err
	}
	st.ha.res[sid] = r
	st.haKick()
	return nil, nil
}

// set applies the request's settings to r.
func (r *haResource) set(p params) error {
	for _, k := range splitList(p.strOr("delete", "")) {
		switch k {
		case "comment":
			r.comment = ""
		case "max_restart":
			r.maxRestart = 1
		case "max_relocate":
			r.maxRelocate = 1
		case "failback":
			r.failback = true
		case "state":
			r.state = "started"
		}
	}
	if s, ok := p.str("state"); ok {
		if s == "enabled" {
			s = "started"
		}
		r.state = s
	}
	if s, ok := p.str("comment"); ok {
		r.comment = s
	}
	if n, ok := p.int("max_restart"); ok {
		r.maxRestart = n
	}
	if n, ok := p.int("max_relocate"); ok {
		r.maxRelocate = n
	}
	if p.has("failback") {
		r.failback = p.bool("failback")
	}
	if p.has("group") {
		return paramError("group", "ha groups have been migrated to rules")
	}
	return nil
}

func hHAResourceUpdate(cl *call) (any, error) {
	st := cl.c.st
	r, err := st.haResourceOf(cl.vars["sid"])
	if err != nil {
		return nil, err
	}
	if d, ok := cl.p.str("digest"); ok && d != r.digest() {
		return nil, errorf(http.StatusInternalServerError, "detected modified configuration - file changed by other user? Try again.")
	}
	if err := r.set(cl.p); err != nil {
		return nil, err
	}
	r.fails = 0
	if r.crm == "error" && r.state == "disabled" {
		r.crm = "" // as ha-manager: a service leaves the error state when disabled
	}
	st.haKick()
	return nil, nil
}

// hHAResourceDelete removes a resource; with purge also from the rules naming it (a rule
// left without resources is deleted), as PVE 9 does. The guest keeps running as it is.
func hHAResourceDelete(cl *call) (any, error) {
	st := cl.c.st
	r, err := st.haResourceOf(cl.vars["sid"])
	if err != nil {
		return nil, err
	}
	st.haRemove(r.sid, cl.p.bool("purge"))
	return nil, nil
}

// haRemove deletes resource sid (and with purge its references in rules).
func (st *state) haRemove(sid string, purge bool) {
	delete(st.ha.res, sid)
	if !purge {
		return
	}
	for id, rule := range st.ha.rules {
		rule.resources = slices.DeleteFunc(rule.resources, func(s string) bool { return s == sid })
		if len(rule.resources) == 0 {
			delete(st.ha.rules, id)
		}
	}
}

// hHAResourceMigrate asks the manager to move a resource to node: online for a running
// guest (migrate) or stopped and started again there (relocate). The request is queued;
// the guest's migration runs as the CRM's own task on its node on the manager's next
// round.
func hHAResourceMigrate(cl *call) (any, error) {
	st := cl.c.st
	r, err := st.haResourceOf(cl.vars["sid"])
	if err != nil {
		return nil, err
	}
	target, _ := cl.p.str("node")
	tn := st.nodes[target]
	if tn == nil {
		return nil, paramError("node", fmt.Sprintf("no such cluster node '%s'", target))
	}
	g := st.guests[r.vmid]
	if g == nil {
		return nil, errorf(http.StatusInternalServerError, "no such VM '%d'", r.vmid)
	}
	var blocking []map[string]any
	for _, sid := range st.haAffinityConflicts(r, target) {
		blocking = append(blocking, map[string]any{"sid": sid, "cause": "resource-affinity"})
	}
	if len(blocking) > 0 {
		return map[string]any{"sid": r.sid, "requested-node": target, "blocking-resources": blocking}, nil
	}
	st.haQueueMigration(r, target)
	return map[string]any{"sid": r.sid, "requested-node": target}, nil
}

// haMigrate moves g to target as the CRM does (crm state "migrate" until done); the
// caller holds mu and checked target.
func (st *state) haMigrate(r *haResource, g *guest, target string) *task {
	c := st.c
	r.crm = "migrate"
	g.conf["lock"] = "migrate"
	src := g.node
	gib := 0.0
	if g.running {
		gib = float64(g.maxmem()) / float64(1<<30)
	}
	return st.runTask(src, "qmigrate", strconv.Itoa(g.vmid), "root@pam", c.taskDuration(0, gib), func(t *task) error {
		delete(g.conf, "lock")
		r.crm = r.settled(g)
		if !st.nodes[target].online {
			return fmt.Errorf("migration aborted: target node '%s' is not online", target)
		}
		for _, volid := range g.volumes() {
			sid, _, _ := strings.Cut(volid, ":")
			if sd := st.storage(sid); sd != nil && !sd.shared {
				return fmt.Errorf("migration aborted: can't migrate local disk '%s' of an HA resource", volid)
			}
		}
		t.log = append(t.log, fmt.Sprintf("starting migration of VM %d to node '%s' (%s)", g.vmid, target, st.nodes[target].ip))
		g.node = target
		r.crm = r.settled(g)
		t.log = append(t.log, "migration finished successfully")
		return nil
	})
}

// haCycle is how long the manager takes to act on a queued request.
func (c *Cluster) haCycle() time.Duration { return c.cfg.Timing.HACycle }

// haMinCycle is the manager's period while a service has not reached its requested state
// and Timing.HACycle is 0: short, without a busy loop.
const haMinCycle = 50 * time.Millisecond

// haRequest is the API's start or stop of HA guest g: as qemu-server does, it sets the
// requested state in a task of type typ (hastart, hastop) that ends once the request is
// queued; the manager brings the guest to that state from its next round on, in its own
// qmstart or qmstop task. The caller holds mu.
func (st *state) haRequest(g *guest, r *haResource, typ, state, user string) *task {
	t := st.newTask(g.node, typ, strconv.Itoa(g.vmid), user)
	verb := strings.TrimPrefix(typ, "ha")
	t.log = append(t.log, fmt.Sprintf("Requesting HA %s for VM %d", verb, g.vmid))
	r.state = state
	r.fails = 0
	t.finish(nil)
	st.haKick()
	return t
}

// haMigrateRequest is the API's migration of HA guest g to target: a hamigrate task that
// ends once the request is queued (haQueueMigration). The caller holds mu.
func (st *state) haMigrateRequest(g *guest, r *haResource, target, user string) *task {
	t := st.newTask(g.node, "hamigrate", strconv.Itoa(g.vmid), user)
	t.log = append(t.log, fmt.Sprintf("Requesting HA migration for VM %d to node %s", g.vmid, target))
	t.finish(nil)
	st.haQueueMigration(r, target)
	return t
}

// haQueueMigration queues r's migration to target for the manager's next round
// (haMigrateQueued); a later request replaces it. The caller holds mu.
func (st *state) haQueueMigration(r *haResource, target string) {
	r.target = target
	st.haKick()
}

// haKick schedules the manager's next round, a cycle from now, unless one is scheduled.
// The caller holds mu.
func (st *state) haKick() { st.haKickIn(st.c.haCycle()) }

func (st *state) haKickIn(d time.Duration) {
	if st.ha.round {
		return
	}
	st.ha.round = true
	st.after(d, st.haRound)
}

// haRound is one round of the CRM and the nodes' LRMs (a real cluster's run every 10 s):
// every service is driven toward its requested state (haDrive), then services on a node
// their strict node-affinity rule leaves out are moved. As long as a service has not
// reached its requested state (its guest locked by a create, a clone or a backup, a start,
// stop or migration under way), the manager runs again a cycle later, so a request that
// met a locked guest is retried until the guest is unlocked. The caller holds mu.
func (st *state) haRound() {
	st.ha.round = false
	waiting := false
	for _, sid := range sortedKeys(st.ha.res) {
		if !st.haDrive(st.ha.res[sid]) {
			waiting = true
		}
	}
	st.haEnforceNodeAffinity()
	if waiting {
		st.haKickIn(max(st.c.haCycle(), haMinCycle))
	}
}

// haDrive is one round's step of service r: a queued migration is begun once the guest is
// unlocked; a guest requested started is started (requested stopped or disabled: stopped)
// by its node's LRM. A start that fails more than max_restart times in a row leaves the
// service in error (Proxmox would first try another node, max_relocate times; the
// simulator does not). It reports whether r is settled: false while the manager still
// has work for it. The caller holds mu.
func (st *state) haDrive(r *haResource) bool {
	g := st.guests[r.vmid]
	if g == nil || r.state == "ignored" {
		r.crm = "ignored"
		return true
	}
	switch {
	case r.crm == "recovery" || (r.crm == "error" && r.state != "disabled"):
		return true // the fence's recovery, or an operator's disable, moves it on
	case r.crm == "migrate":
		return false
	case st.ha.fenced[g.node] || !st.nodes[g.node].online:
		r.crm = "fence"
		return true
	}
	if t := r.lrm; t != nil {
		if t.running {
			return false
		}
		r.lrm = nil
		if t.typ == "qmstart" && t.exit != "OK" {
			r.fails++
			st.c.log.Warn("ha: the LRM could not start the service", "sid", r.sid, "node", g.node, "err", t.exit, "fails", r.fails)
			if r.fails > r.maxRestart {
				r.crm = "error"
				return true
			}
		}
	}
	if r.target != "" && !st.haMigrateQueued(r, g) {
		return false
	}
	r.crm = r.settled(g)
	switch {
	case r.state == "started" && !g.running && !g.isTemplate():
		if g.lock() != "" {
			return false
		}
		r.lrm = st.startGuest(g, "root@pam")
		return false
	case (r.state == "stopped" || r.state == "disabled") && g.running:
		if g.lock() != "" {
			return false
		}
		r.lrm = st.runTask(g.node, "qmstop", strconv.Itoa(g.vmid), "root@pam", st.c.taskDuration(st.c.cfg.Timing.Stop, 0), func(*task) error {
			g.stop()
			r.crm = r.settled(g)
			return nil
		})
		return false
	}
	return true
}

// haMigrateQueued begins r's queued migration when the guest is unlocked: a migration to
// the node the guest is on, to a node offline or fenced, or one r's rules forbid is
// dropped (logged), as the CRM does. It reports whether r may go on to its requested
// state this round. The caller holds mu.
func (st *state) haMigrateQueued(r *haResource, g *guest) bool {
	target := r.target
	switch {
	case g.lock() != "":
		return false
	case g.node == target:
	case !st.nodes[target].online || st.ha.fenced[target] || len(st.haAffinityConflicts(r, target)) > 0:
		st.c.log.Warn("ha: migration dropped: the target node is offline or a resource-affinity rule forbids it", "sid", r.sid, "node", target)
	case !st.haRulesAllow(r, target):
		st.c.log.Warn("ha: migration not allowed by the service's node-affinity rule", "sid", r.sid, "node", target)
	default:
		r.target = ""
		st.haMigrate(r, g, target)
		return false
	}
	r.target = ""
	return true
}

// settled is the CRM state of a resource whose guest is not moving.
func (r *haResource) settled(g *guest) string {
	switch r.state {
	case "started":
		return "started"
	case "ignored":
		return "ignored"
	case "disabled", "stopped":
		if g.running {
			return "request_stop"
		}
	}
	return "stopped"
}

// haNodeOffline is called when node goes offline: its services are fenced after the
// fence delay unless it comes back first. The caller holds mu.
func (st *state) haNodeOffline(node string) {
	st.ha.gen[node]++
	gen := st.ha.gen[node]
	for _, r := range st.ha.res {
		if g := st.guests[r.vmid]; g != nil && g.node == node && r.state != "ignored" {
			r.crm = "fence"
		}
	}
	st.after(st.c.fenceDelay(), func() {
		if st.ha.gen[node] != gen || st.nodes[node].online {
			return
		}
		st.haFence(node)
	})
}

// haNodeOnline is called when node is back: it is no longer fenced, its services that
// stayed settle, and resources waiting for a node are placed again. The caller holds mu.
func (st *state) haNodeOnline(node string) {
	st.ha.gen[node]++
	delete(st.ha.fenced, node)
	for _, sid := range sortedKeys(st.ha.res) {
		r := st.ha.res[sid]
		g := st.guests[r.vmid]
		if g == nil {
			continue
		}
		switch {
		case g.node == node && r.crm == "fence":
			r.crm = ""
			st.haKick()
		case r.crm == "recovery" && st.ha.fenced[g.node]:
			st.haRecover(r, g)
		}
	}
}

// haFence fences node and recovers its HA resources onto other nodes. The caller holds
// mu.
func (st *state) haFence(node string) {
	st.ha.fenced[node] = true
	st.c.log.Info("ha: node fenced", "node", node)
	for _, sid := range sortedKeys(st.ha.res) {
		r := st.ha.res[sid]
		g := st.guests[r.vmid]
		if g == nil || g.node != node || r.state == "ignored" {
			continue
		}
		r.crm = "recovery"
		st.haRecover(r, g)
	}
}

// haRecover moves the guest of a fenced node's resource to the least loaded node its rules
// allow and starts it there if it is to run. A guest with a disk on local storage cannot
// be recovered (its disk is on the fenced node): the service goes to "error", as Proxmox's
// does when its start fails on every node. With no node allowed, it stays in "recovery"
// until one comes online. The caller holds mu.
func (st *state) haRecover(r *haResource, g *guest) {
	for _, volid := range g.volumes() {
		sid, _, _ := strings.Cut(volid, ":")
		if sd := st.storage(sid); sd != nil && !sd.shared {
			r.crm = "error"
			st.c.log.Warn("ha: cannot recover a guest with a local disk", "sid", r.sid, "volume", volid)
			return
		}
	}
	target := st.haSelectNode(r, g)
	if target == "" {
		st.c.log.Warn("ha: no node to recover onto", "sid", r.sid)
		return
	}
	from := g.node
	g.node = target
	delete(g.conf, "lock")
	st.c.log.Info("ha: recovered", "sid", r.sid, "from", from, "to", target)
	t := st.newTask(target, "hastart", strconv.Itoa(g.vmid), "root@pam")
	t.log = append(t.log, fmt.Sprintf("recover service '%s' from fenced node '%s' to node '%s'", r.sid, from, target))
	t.finish(nil)
	if r.state != "started" {
		r.crm = r.settled(g)
		return
	}
	start := st.startGuest(g, "root@pam")
	if !start.running {
		r.crm = "error"
		return
	}
	st.after(st.c.taskDuration(st.c.cfg.Timing.Start, 0)+time.Millisecond, func() {
		if r.crm == "recovery" {
			r.crm = r.settled(g)
			if start.exit != "OK" {
				r.crm = "error"
			}
		}
	})
}

// haSelectNode picks the node for r: online and not fenced, allowed by its node-affinity
// rules (strict ones exclude other nodes, the highest priority present wins), kept apart
// from or together with the resources of its resource-affinity rules, then the node with
// the least memory of running and recovering guests. "" when none is allowed.
func (st *state) haSelectNode(r *haResource, g *guest) string {
	var cands []string
	for _, name := range st.c.nodes {
		if st.nodes[name].online && !st.ha.fenced[name] && len(st.haAffinityConflicts(r, name)) == 0 {
			cands = append(cands, name)
		}
	}
	for _, rule := range st.haRulesOf(r.sid, "node-affinity") {
		prio := map[string]int{}
		for _, n := range splitList(rule.nodes) {
			name, p, _ := strings.Cut(n, ":")
			prio[name], _ = strconv.Atoi(p)
		}
		best := -1
		for _, n := range cands {
			if p, ok := prio[n]; ok && p > best {
				best = p
			}
		}
		if best < 0 {
			if rule.strict {
				return ""
			}
			continue
		}
		cands = slices.DeleteFunc(cands, func(n string) bool { p, ok := prio[n]; return !ok || p != best })
	}
	// positive affinity: where the rule's other resources already run
	for _, rule := range st.haRulesOf(r.sid, "resource-affinity") {
		if rule.affinity != "positive" {
			continue
		}
		for _, sid := range rule.resources {
			o := st.ha.res[sid]
			if o == nil || sid == r.sid {
				continue
			}
			if og := st.guests[o.vmid]; og != nil && slices.Contains(cands, og.node) {
				return og.node
			}
		}
	}
	load := map[string]int64{}
	for _, o := range st.guests {
		if o.running || (st.haManaged(o.vmid) != nil && st.haManaged(o.vmid).crm == "recovery") {
			load[o.node] += o.maxmem()
		}
	}
	sort.SliceStable(cands, func(i, j int) bool { return load[cands[i]] < load[cands[j]] })
	if len(cands) == 0 {
		return ""
	}
	return cands[0]
}

// haRulesAllow reports whether r's strict node-affinity rules allow node.
func (st *state) haRulesAllow(r *haResource, node string) bool {
	for _, rule := range st.haRulesOf(r.sid, "node-affinity") {
		if rule.strict && !slices.ContainsFunc(splitList(rule.nodes), func(n string) bool { name, _, _ := strings.Cut(n, ":"); return name == node }) {
			return false
		}
	}
	return true
}

// haRulesOf lists the enabled rules of type typ naming sid.
func (st *state) haRulesOf(sid, typ string) []*haRule {
	var out []*haRule
	for _, id := range sortedKeys(st.ha.rules) {
		rule := st.ha.rules[id]
		if rule.typ == typ && !rule.disable && slices.Contains(rule.resources, sid) {
			out = append(out, rule)
		}
	}
	return out
}

// haAffinityConflicts lists the resources that keep r off node: those of a negative rule
// with r already there.
func (st *state) haAffinityConflicts(r *haResource, node string) []string {
	var out []string
	for _, rule := range st.haRulesOf(r.sid, "resource-affinity") {
		if rule.affinity != "negative" {
			continue
		}
		for _, sid := range rule.resources {
			o := st.ha.res[sid]
			if o == nil || sid == r.sid {
				continue
			}
			if og := st.guests[o.vmid]; og != nil && og.node == node && !slices.Contains(out, sid) {
				out = append(out, sid)
			}
		}
	}
	return out
}

func hHARules(cl *call) (any, error) {
	typ := cl.p.strOr("type", "")
	res := normalizeSID(cl.p.strOr("resource", ""))
	out := []map[string]any{}
	for _, id := range sortedKeys(cl.c.st.ha.rules) {
		r := cl.c.st.ha.rules[id]
		if (typ != "" && r.typ != typ) || (res != "" && !slices.Contains(r.resources, res)) {
			continue
		}
		out = append(out, r.entry())
	}
	return out, nil
}

func (st *state) haRuleOf(id string) (*haRule, error) {
	r := st.ha.rules[id]
	if r == nil {
		return nil, errorf(http.StatusInternalServerError, "HA rule '%s' does not exist", id)
	}
	return r, nil
}

func hHARuleGet(cl *call) (any, error) {
	r, err := cl.c.st.haRuleOf(cl.vars["rule"])
	if err != nil {
		return nil, err
	}
	return r.entry(), nil
}

// set applies the request's settings to rule and checks it as PVE::HA::Rules does.
func (rule *haRule) set(st *state, p params) error {
	for _, k := range splitList(p.strOr("delete", "")) {
		switch k {
		case "comment":
			rule.comment = ""
		case "disable":
			rule.disable = false
		case "strict":
			rule.strict = false
		}
	}
	if s, ok := p.str("resources"); ok {
		rule.resources = nil
		for _, sid := range splitList(s) {
			sid = normalizeSID(sid)
			if !slices.Contains(rule.resources, sid) {
				rule.resources = append(rule.resources, sid)
			}
		}
		sort.Strings(rule.resources)
	}
	if s, ok := p.str("comment"); ok {
		rule.comment = s
	}
	if p.has("disable") {
		rule.disable = p.bool("disable")
	}
	switch rule.typ {
	case "resource-affinity":
		if p.has("nodes") || p.has("strict") {
			return paramError("nodes", "property is not defined in schema and the schema does not allow additional properties")
		}
		if s, ok := p.str("affinity"); ok {
			rule.affinity = s
		}
		if rule.affinity == "" {
			return paramError("affinity", "property is missing and it is not optional")
		}
		if len(rule.resources) < 2 {
			return paramError("resources", "rule must specify at least two resources for resource affinity")
		}
	case "node-affinity":
		if p.has("affinity") {
			return paramError("affinity", "property is not defined in schema and the schema does not allow additional properties")
		}
		if s, ok := p.str("nodes"); ok {
			for _, n := range splitList(s) {
				name, _, _ := strings.Cut(n, ":")
				if st.nodes[name] == nil {
					return paramError("nodes", fmt.Sprintf("no such cluster node '%s'", name))
				}
			}
			rule.nodes = s
		}
		if rule.nodes == "" {
			return paramError("nodes", "property is missing and it is not optional")
		}
		if p.has("strict") {
			rule.strict = p.bool("strict")
		}
	}
	for _, sid := range rule.resources {
		if st.ha.res[sid] == nil {
			return paramError("resources", fmt.Sprintf("HA resource '%s' does not exist", sid))
		}
	}
	return nil
}

func hHARuleCreate(cl *call) (any, error) {
	st := cl.c.st
	id, _ := cl.p.str("rule")
	if st.ha.rules[id] != nil {
		return nil, errorf(http.StatusInternalServerError, "HA rule '%s' already defined", id)
	}
	typ, _ := cl.p.str("type")
	rule := &haRule{id: id, typ: typ}
	if err := rule.set(st, cl.p); err != nil {
		return nil, err
	}
	st.ha.rules[id] = rule
	st.haKick()
	return nil, nil
}

func hHARuleUpdate(cl *call) (any, error) {
	st := cl.c.st
	rule, err := st.haRuleOf(cl.vars["rule"])
	if err != nil {
		return nil, err
	}
	if typ, _ := cl.p.str("type"); typ != rule.typ {
		return nil, paramError("type", fmt.Sprintf("rule type '%s' cannot be changed to '%s'", rule.typ, typ))
	}
	if d, ok := cl.p.str("digest"); ok && d != rule.digest() {
		return nil, errorf(http.StatusInternalServerError, "detected modified configuration - file changed by other user? Try again.")
	}
	next := *rule
	next.resources = slices.Clone(rule.resources)
	if err := next.set(st, cl.p); err != nil {
		return nil, err
	}
	*rule = next
	st.haKick()
	return nil, nil
}

// haEnforceNodeAffinity is the CRM's placement check of settled services: a guest on a
// node its strict node-affinity rule does not name is migrated (relocated when stopped)
// to the node haSelectNode picks, as Proxmox's manager does when a rule changes. Rule
// priorities are not weighed here (a guest on any named node stays). The caller holds mu.
func (st *state) haEnforceNodeAffinity() {
	for _, sid := range sortedKeys(st.ha.res) {
		r := st.ha.res[sid]
		g := st.guests[r.vmid]
		if g == nil || r.state == "ignored" || g.lock() != "" || r.target != "" || (r.lrm != nil && r.lrm.running) ||
			(r.crm != "started" && r.crm != "stopped") {
			continue
		}
		if st.haRulesAllow(r, g.node) {
			continue
		}
		if target := st.haSelectNode(r, g); target != "" && target != g.node {
			st.c.log.Info("ha: moving a service off a node its rule excludes", "sid", sid, "from", g.node, "to", target)
			st.haMigrate(r, g, target)
		}
	}
}

func hHARuleDelete(cl *call) (any, error) {
	if _, err := cl.c.st.haRuleOf(cl.vars["rule"]); err != nil {
		return nil, err
	}
	delete(cl.c.st.ha.rules, cl.vars["rule"])
	return nil, nil
}

// haNodeState is a node as the CRM sees it: online, unknown (offline, not yet fenced) or
// fence.
func (st *state) haNodeState(name string) string {
	switch {
	case st.nodes[name].online:
		return "online"
	case st.ha.fenced[name]:
		return "fence"
	}
	return "unknown"
}

// haMaster is the node the CRM master runs on: the first online node.
func (st *state) haMaster() string {
	for _, name := range st.c.nodes {
		if st.nodes[name].online {
			return name
		}
	}
	return ""
}

// hHAStatusCurrent lists quorum, the master, each node's LRM and each service, as
// ha-manager status does.
func hHAStatusCurrent(cl *call) (any, error) {
	st := cl.c.st
	now := time.Now()
	stamp := now.Format("Mon Jan _2 15:04:05 2006")
	online := 0
	for _, name := range st.c.nodes {
		if st.nodes[name].online {
			online++
		}
	}
	master := st.haMaster()
	quorate := online*2 > len(st.c.nodes)
	quorum := "OK"
	if !quorate {
		quorum = "No quorum on node '" + cl.local + "'!"
	}
	out := []map[string]any{{"id": "quorum", "type": "quorum", "node": cl.local, "status": quorum, "quorate": boolInt(quorate)}}
	if len(st.ha.res) == 0 {
		return out, nil
	}
	out = append(out, map[string]any{"id": "master", "type": "master", "node": master,
		"status": fmt.Sprintf("%s (active, %s)", master, stamp), "timestamp": now.Unix()})
	active := map[string]bool{}
	for _, r := range st.ha.res {
		if g := st.guests[r.vmid]; g != nil {
			active[g.node] = true
		}
	}
	for _, name := range st.c.nodes {
		status := fmt.Sprintf("%s (idle, %s)", name, stamp)
		switch {
		case !st.nodes[name].online:
			status = fmt.Sprintf("%s (old timestamp - dead?, %s)", name, stamp)
		case active[name]:
			status = fmt.Sprintf("%s (active, %s)", name, stamp)
		}
		out = append(out, map[string]any{"id": "lrm:" + name, "type": "lrm", "node": name, "status": status, "timestamp": now.Unix()})
	}
	for _, sid := range sortedKeys(st.ha.res) {
		r := st.ha.res[sid]
		node := ""
		if g := st.guests[r.vmid]; g != nil {
			node = g.node
		}
		crm := cmp.Or(r.crm, r.state)
		out = append(out, map[string]any{"id": "service:" + sid, "type": "service", "sid": sid, "node": node,
			"crm_state": crm, "request_state": r.state, "state": crm, "status": fmt.Sprintf("%s (%s, %s)", sid, node, crm),
			"max_restart": r.maxRestart, "max_relocate": r.maxRelocate, "failback": boolInt(r.failback)})
	}
	return out, nil
}

// hHAManagerStatus is the CRM's manager_status: the master, node states and the
// services' states and nodes, with each LRM's mode.
func hHAManagerStatus(cl *call) (any, error) {
	st := cl.c.st
	now := time.Now().Unix()
	nodeStatus := map[string]any{}
	lrm := map[string]any{}
	for _, name := range st.c.nodes {
		nodeStatus[name] = st.haNodeState(name)
		state := "wait_for_agent_lock"
		if !st.nodes[name].online {
			state = "lost_agent_lock"
		}
		for _, r := range st.ha.res {
			if g := st.guests[r.vmid]; g != nil && g.node == name && st.nodes[name].online {
				state = "active"
			}
		}
		lrm[name] = map[string]any{"mode": "active", "state": state, "timestamp": now}
	}
	services := map[string]any{}
	for _, sid := range sortedKeys(st.ha.res) {
		r := st.ha.res[sid]
		node := ""
		if g := st.guests[r.vmid]; g != nil {
			node = g.node
		}
		services[sid] = map[string]any{"node": node, "state": cmp.Or(r.crm, r.state), "uid": r.digest()[:22]}
	}
	return map[string]any{
		"manager_status": map[string]any{"master_node": st.haMaster(), "node_status": nodeStatus, "service_status": services, "timestamp": now},
		"lrm_status":     lrm,
		"quorum":         map[string]any{"node": cl.local, "quorate": "1"},
	}, nil
}

// haRecord is the HA configuration in the state file.
type haRecord struct {
	Resources []haResourceRecord `json:"resources,omitempty"`
	Rules     []haRuleRecord     `json:"rules,omitempty"`
}

type haResourceRecord struct {
	SID         string `json:"sid"`
	State       string `json:"state"`
	Comment     string `json:"comment,omitempty"`
	MaxRestart  int64  `json:"max_restart"`
	MaxRelocate int64  `json:"max_relocate"`
	Failback    bool   `json:"failback"`
}

type haRuleRecord struct {
	ID        string   `json:"id"`
	Type      string   `json:"type"`
	Resources []string `json:"resources"`
	Affinity  string   `json:"affinity,omitempty"`
	Nodes     string   `json:"nodes,omitempty"`
	Strict    bool     `json:"strict,omitempty"`
	Disable   bool     `json:"disable,omitempty"`
	Comment   string   `json:"comment,omitempty"`
}

// record copies the configuration into its file form (nil without any).
func (h *haState) record() *haRecord {
	if len(h.res) == 0 && len(h.rules) == 0 {
		return nil
	}
	out := &haRecord{}
	for _, sid := range sortedKeys(h.res) {
		r := h.res[sid]
		out.Resources = append(out.Resources, haResourceRecord{SID: sid, State: r.state, Comment: r.comment,
			MaxRestart: r.maxRestart, MaxRelocate: r.maxRelocate, Failback: r.failback})
	}
	for _, id := range sortedKeys(h.rules) {
		r := h.rules[id]
		out.Rules = append(out.Rules, haRuleRecord{ID: id, Type: r.typ, Resources: slices.Clone(r.resources),
			Affinity: r.affinity, Nodes: r.nodes, Strict: r.strict, Disable: r.disable, Comment: r.comment})
	}
	return out
}

// load replaces the configuration with the file's; services start settled.
func (h *haState) load(f *haRecord) {
	if f == nil {
		return
	}
	for _, r := range f.Resources {
		_, name, _ := strings.Cut(r.SID, ":")
		vmid, _ := strconv.Atoi(name)
		h.res[r.SID] = &haResource{sid: r.SID, vmid: vmid, state: r.State, comment: r.Comment,
			maxRestart: r.MaxRestart, maxRelocate: r.MaxRelocate, failback: r.Failback}
	}
	for _, r := range f.Rules {
		h.rules[r.ID] = &haRule{id: r.ID, typ: r.Type, resources: slices.Clone(r.Resources), affinity: r.Affinity,
			nodes: r.Nodes, strict: r.Strict, disable: r.Disable, comment: r.Comment}
	}
}
