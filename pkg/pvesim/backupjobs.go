package pvesim

import (
	"cmp"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/flexplane/flexplane/pkg/support/calendar"
)

// Backup jobs (/cluster/backup), as jobs.cfg keeps them and pvescheduler
// runs them: each job has a calendar-event schedule, a list of guests and
// the options of the vzdump it runs. The simulator's scheduler looks at
// the jobs every schedulerTick of its clock (Cluster.now, which
// AdvanceClockForTest moves forward) and on every advance; a job whose
// next time (after its last run, or its creation) has come runs once on
// each online node that has guests of its list (or only on its `node`),
// as a vzdump task of root@pam, then prunes each guest's archives by its
// prune-backups as vzdump does with remove=1. A job runs at most once for
// one scheduled time: times missed while the scheduler was stopped or the
// clock jumped run as one. A disabled job (enabled=0) does not run.

// schedulerTick is how often, in real time, the simulator's scheduler
// looks for jobs that are due (pvescheduler looks every minute).
const schedulerTick = 5 * time.Second

// backupJob is a backup job: its options as validated (typed, as
// jobs.cfg keeps them) and when it last ran.
type backupJob struct {
	id   string
	opts params
	// last is when it last ran (its creation before): its next run is
	// the schedule's first time after it.
	last time.Time
}

// entry is the job as GET /cluster/backup lists it.
func (j *backupJob) entry(now time.Time) map[string]any {
	e := map[string]any{"id": j.id, "type": "vzdump"}
	for k, v := range j.opts {
		if k == "prune-backups" {
			e[k] = pruneObject(formatValue(v))
			continue
		}
		e[k] = v
	}
	if next, ok := j.next(); ok && j.enabled() {
		if next.Before(now) {
			next = now // due: it runs at the scheduler's next look
		}
		e["next-run"] = next.Unix()
	}
	return e
}

// pruneObject is a prune-backups property string as the API returns it:
// an object of its keys.
func pruneObject(s string) map[string]any {
	out := map[string]any{}
	pr := parseProperty(s)
	for _, k := range pr.keys {
		n, err := strconv.ParseInt(pr.vals[k], 10, 64)
		if err != nil {
			continue
		}
		if k == "keep-all" {
			out[k] = n != 0
			continue
		}
		out[k] = n
	}
	return out
}

func (j *backupJob) enabled() bool { return !j.opts.has("enabled") || j.opts.bool("enabled") }

// next is the job's next scheduled time after its last run.
func (j *backupJob) next() (time.Time, bool) {
	ev, err := calendar.Parse(j.opts.strOr("schedule", ""))
	if err != nil {
		return time.Time{}, false
	}
	return ev.Next(j.last)
}

// checkBackupJob checks a job's options as PVE::API2::Backup does.
func (st *state) checkBackupJob(p params) error {
	sched, ok := p.str("schedule")
	if !ok {
		return paramError("schedule", "property is missing and it is not optional")
	}
	if _, err := calendar.Parse(sched); err != nil {
		return paramError("schedule", fmt.Sprintf("value does not look like a valid calendar event: %v", err))
	}
	if !p.has("vmid") && !p.bool("all") && !p.has("pool") {
		return errorf(http.StatusInternalServerError, "one of 'vmid', 'all' or 'pool' must be set")
	}
	if list, ok := p.str("vmid"); ok {
		if _, err := parseVMIDList(list); err != nil {
			return err
		}
	}
	if id, ok := p.str("storage"); ok {
		if _, err := st.backupStorage(id); err != nil {
			return err
		}
	}
	if n, ok := p.str("node"); ok && st.nodes[n] == nil {
		return paramError("node", "no such cluster node '"+n+"'")
	}
	return nil
}

func hBackupJobList(cl *call) (any, error) {
	st := cl.c.st
	now := cl.c.now()
	out := []map[string]any{}
	for _, id := range sortedKeys(st.backupJobs) {
		out = append(out, st.backupJobs[id].entry(now))
	}
	return out, nil
}

func hBackupJobGet(cl *call) (any, error) {
	j := cl.c.st.backupJobs[cl.vars["id"]]
	if j == nil {
		return nil, errorf(http.StatusInternalServerError, "job '%s' does not exist", cl.vars["id"])
	}
	return j.entry(cl.c.now()), nil
}

// hBackupJobCreate adds a job; without an id it gets one, as Proxmox
// makes them ("backup-" and random hex).
func hBackupJobCreate(cl *call) (any, error) {
	st := cl.c.st
	p := maps.Clone(cl.p)
	id, ok := p.str("id")
	delete(p, "id")
	if !ok {
		var b [6]byte
		_, _ = rand.Read(b[:])
		h := hex.EncodeToString(b[:])
		id = "backup-" + h[:8] + "-" + h[8:]
	}
	if st.backupJobs[id] != nil {
		return nil, errorf(http.StatusInternalServerError, "Job '%s' already exists", id)
	}
	if err := st.checkBackupJob(p); err != nil {
		return nil, err
	}
	st.backupJobs[id] = &backupJob{id: id, opts: p, last: cl.c.now()}
	return nil, nil
}

// hBackupJobUpdate changes a job's options: those given are set, those
// `delete` lists removed; nothing changes on error. A changed schedule,
// and a job enabled again, count from now: the times it passed over while
// disabled do not run.
func hBackupJobUpdate(cl *call) (any, error) {
	st := cl.c.st
	j := st.backupJobs[cl.vars["id"]]
	if j == nil {
		return nil, errorf(http.StatusInternalServerError, "job '%s' does not exist", cl.vars["id"])
	}
	p := maps.Clone(j.opts)
	for _, k := range splitList(cl.p.strOr("delete", "")) {
		if k == "schedule" || k == "id" {
			return nil, paramError("delete", fmt.Sprintf("unable to delete required option '%s'", k))
		}
		delete(p, k)
	}
	for k, v := range cl.p {
		if k != "id" && k != "delete" {
			p[k] = v
		}
	}
	if err := st.checkBackupJob(p); err != nil {
		return nil, err
	}
	restart := p.strOr("schedule", "") != j.opts.strOr("schedule", "") || !j.enabled()
	j.opts = p
	if restart {
		j.last = cl.c.now()
	}
	return nil, nil
}

func hBackupJobDelete(cl *call) (any, error) {
	id := cl.vars["id"]
	if cl.c.st.backupJobs[id] == nil {
		return nil, errorf(http.StatusInternalServerError, "job '%s' does not exist", id)
	}
	delete(cl.c.st.backupJobs, id)
	return nil, nil
}

// runDueJobs runs every enabled job whose next time has come by now, once;
// the caller holds mu.
func (st *state) runDueJobs(now time.Time) {
	for _, id := range sortedKeys(st.backupJobs) {
		j := st.backupJobs[id]
		next, ok := j.next()
		if !ok || next.After(now) || !j.enabled() {
			continue
		}
		j.last = now
		st.runBackupJob(j)
	}
}

// runBackupJob starts the vzdump of job j on each online node that has
// guests of its list, as pvescheduler starts it on every node.
func (st *state) runBackupJob(j *backupJob) {
	vmids, _ := parseVMIDList(j.opts.strOr("vmid", ""))
	s, err := st.backupStorage(j.opts.strOr("storage", "local"))
	if err != nil {
		st.c.log.Warn("backup job: storage", "job", j.id, "err", err)
		return
	}
	o := dumpOpts{storage: s, ext: dumpExt[j.opts.strOr("compress", "0")], mode: j.opts.strOr("mode", "snapshot"),
		protected: j.opts.bool("protected"), notes: j.opts.strOr("notes-template", "")}
	if !j.opts.has("remove") || j.opts.bool("remove") {
		o.prune = j.opts.strOr("prune-backups", "")
	}
	only, _ := j.opts.str("node")
	for _, name := range sortedKeys(st.nodes) {
		if n := st.nodes[name]; !n.online || (only != "" && name != only) {
			continue
		}
		var here []int
		for _, vmid := range vmids {
			if g := st.guests[vmid]; g != nil && g.node == name {
				here = append(here, vmid)
			}
		}
		if len(here) == 0 {
			continue
		}
		o.vmids = here
		st.startVzdump(name, "root@pam", o)
	}
}

// pruneGroup removes the archives of guest vmid on storage s that
// retention prune (a prune-backups value) does not keep, logging as
// vzdump does; protected archives are kept and not counted. The caller
// holds mu.
func (st *state) pruneGroup(t *task, node string, s *storageDef, vmid int, prune string) {
	keep := parseProperty(prune)
	if keep.get("keep-all") == "1" || len(keep.keys) == 0 {
		return
	}
	var group []*volume
	for _, v := range st.volumesOn(node, s.id) {
		if v.content == "backup" && v.vmid == vmid {
			group = append(group, v)
		}
	}
	removed := 0
	for _, v := range pruneMarks(group, keep) {
		st.removeVolume(node, v.volid)
		removed++
	}
	t.log = append(t.log, "INFO: prune older backups with retention: "+prune,
		fmt.Sprintf("INFO: pruned %d backup(s) not covered by keep-retention policy", removed))
}

// pruneMarks returns the archives of one guest that retention keep does
// not keep, as Proxmox's prune marks them: newest first, keep-last keeps
// the newest N; then keep-hourly, -daily, -weekly, -monthly and -yearly
// each keep the newest archive of each of the N newest periods that no
// archive kept so far falls in; what no option keeps is removed.
func pruneMarks(group []*volume, keep *property) []*volume {
	slices.SortFunc(group, func(a, b *volume) int {
		if c := cmp.Compare(b.ctime, a.ctime); c != 0 {
			return c
		}
		return strings.Compare(b.volid, a.volid)
	})
	kept := map[*volume]bool{}
	marked := map[*volume]bool{}
	for _, v := range group {
		if v.protected {
			marked[v] = true
		}
	}
	// The period an archive falls in, for each option; keep-last's is the
	// archive itself.
	periods := []struct {
		key    string
		period func(time.Time) string
	}{
		{"keep-last", nil},
		{"keep-hourly", func(t time.Time) string { return t.Format("2006-01-02 15") }},
		{"keep-daily", func(t time.Time) string { return t.Format("2006-01-02") }},
		{"keep-weekly", func(t time.Time) string { y, w := t.ISOWeek(); return fmt.Sprintf("%d/%d", y, w) }},
		{"keep-monthly", func(t time.Time) string { return t.Format("2006-01") }},
		{"keep-yearly", func(t time.Time) string { return t.Format("2006") }},
	}
	for _, p := range periods {
		n, _ := strconv.Atoi(keep.get(p.key))
		if n <= 0 {
			continue
		}
		at := func(v *volume) string {
			if p.period == nil {
				return v.volid
			}
			return p.period(time.Unix(v.ctime, 0))
		}
		covered := map[string]bool{}
		for _, v := range group {
			if kept[v] {
				covered[at(v)] = true
			}
		}
		fresh := map[string]bool{}
		for _, v := range group {
			if kept[v] || marked[v] || covered[at(v)] {
				continue
			}
			if fresh[at(v)] {
				marked[v] = true // an older archive of a period kept already
				continue
			}
			if len(fresh) >= n {
				break
			}
			fresh[at(v)] = true
			kept[v] = true
		}
	}
	var out []*volume
	for _, v := range group {
		if !kept[v] && !v.protected {
			out = append(out, v)
		}
	}
	return out
}

// scheduleLoop runs the backup jobs that are due every schedulerTick
// until the cluster closes.
func (c *Cluster) scheduleLoop() {
	defer c.work.Done()
	tick := time.NewTicker(schedulerTick)
	defer tick.Stop()
	for {
		select {
		case <-c.ctx.Done():
			return
		case <-tick.C:
		}
		c.mu.Lock()
		c.st.runDueJobs(c.now())
		c.mu.Unlock()
	}
}

// now is the simulator's clock: real time plus what AdvanceClockForTest
// added. Backup jobs run by it and archives are stamped with it.
func (c *Cluster) now() time.Time {
	return time.Now().Add(time.Duration(c.skew.Load()))
}

// AdvanceClockForTest moves the simulator's clock forward by d (backup
// jobs' schedules and archives' times) and runs the jobs that are due at
// the new time at once, each once, however many of its times d passed
// over. Task times stay real.
func (c *Cluster) AdvanceClockForTest(d time.Duration) {
	if d < 0 {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.skew.Add(int64(d))
	c.st.runDueJobs(c.now())
	c.markDirty()
}

// ClockForTest is the simulator's clock now (see AdvanceClockForTest).
func (c *Cluster) ClockForTest() time.Time { return c.now() }
