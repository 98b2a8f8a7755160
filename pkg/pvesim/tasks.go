package pvesim

import (
	"fmt"
	"net/http"
	"sort"
	"strings"
	"time"
)

// task is one asynchronous Proxmox worker task.
type task struct {
	upid    string
	node    string
	typ     string
	id      string
	user    string
	pid     uint32
	pstart  uint32
	start   time.Time
	end     time.Time
	running bool
	exit    string
	log     []string
}

type taskTimer struct {
	t *time.Timer
}

// newTask registers a running task; the caller holds mu.
func (st *state) newTask(node, typ, id, user string) *task {
	st.nextPID++
	now := time.Now()
	n := st.nodes[node]
	pstart := uint32(now.Sub(n.booted) / (10 * time.Millisecond)) // jiffies since boot
	t := &task{
		node:    node,
		typ:     typ,
		id:      id,
		user:    user,
		pid:     st.nextPID,
		pstart:  pstart,
		start:   now,
		running: true,
	}
	t.upid = fmt.Sprintf("UPID:%s:%08X:%08X:%08X:%s:%s:%s:", node, t.pid, t.pstart, uint32(now.Unix()), typ, id, user)
	st.tasks[t.upid] = t
	st.taskList = append(st.taskList, t)
	// keep the task list bounded like Proxmox's index (active tasks are never dropped)
	if len(st.taskList) > 5000 {
		kept := st.taskList[:0]
		for i, old := range st.taskList {
			if old.running || i >= len(st.taskList)-4000 {
				kept = append(kept, old)
			} else {
				delete(st.tasks, old.upid)
			}
		}
		st.taskList = kept
	}
	return t
}

// finish ends a task with err's text (or OK); the caller holds mu.
func (t *task) finish(err error) {
	if !t.running {
		return
	}
	t.running = false
	t.end = time.Now()
	if err != nil {
		msg := strings.TrimSpace(err.Error())
		t.exit = msg
		t.log = append(t.log, "TASK ERROR: "+msg)
		return
	}
	t.exit = "OK"
	t.log = append(t.log, "TASK OK")
}

// runTask starts a task that runs fn under mu after d (the task's duration) and ends
// with fn's error. The caller holds mu.
func (st *state) runTask(node, typ, id, user string, d time.Duration, fn func(t *task) error) *task {
	t := st.newTask(node, typ, id, user)
	st.after(d, func() {
		if !t.running { // stopped through DELETE /nodes/{node}/tasks/{upid}
			return
		}
		t.finish(fn(t))
		st.c.log.Debug("task done", "upid", t.upid, "exit", t.exit)
	})
	return t
}

// after runs fn under mu after d, unless the cluster closes first. The caller holds mu.
func (st *state) after(d time.Duration, fn func()) {
	c := st.c
	tt := &taskTimer{}
	c.work.Add(1)
	tt.t = time.AfterFunc(d, func() {
		defer c.work.Done()
		c.mu.Lock()
		defer c.mu.Unlock()
		delete(st.timers, tt)
		fn()
		c.markDirty()
	})
	st.timers[tt] = struct{}{}
}

// runChecked is runTask for workers that check preconditions first, as qemu-server's
// workers do: a failing check ends the task at once with its error; otherwise the check
// runs again when the task's time is up, then apply.
func (st *state) runChecked(node, typ, id, user string, d time.Duration, check func() error, apply func(t *task) error) *task {
	if err := check(); err != nil {
		t := st.newTask(node, typ, id, user)
		t.finish(err)
		return t
	}
	return st.runTask(node, typ, id, user, d, func(t *task) error {
		if err := check(); err != nil {
			return err
		}
		return apply(t)
	})
}

// stopTimers cancels pending tasks at Close; the caller holds mu.
func (st *state) stopTimers() {
	for tt := range st.timers {
		if tt.t.Stop() {
			st.c.work.Done()
		}
		delete(st.timers, tt)
	}
}

func (c *Cluster) taskDuration(base time.Duration, gib float64) time.Duration {
	return c.cfg.Timing.Base + base + time.Duration(gib*float64(c.cfg.Timing.PerGiB))
}

func taskJSON(t *task) map[string]any {
	m := map[string]any{
		"upid":      t.upid,
		"node":      t.node,
		"pid":       t.pid,
		"pstart":    t.pstart,
		"starttime": t.start.Unix(),
		"type":      t.typ,
		"id":        t.id,
		"user":      t.user,
		"status":    "running",
	}
	if !t.running {
		m["status"] = "stopped"
		m["exitstatus"] = t.exit
		m["endtime"] = t.end.Unix()
	}
	return m
}

func (st *state) taskFor(node, upid string) (*task, error) {
	t := st.tasks[upid]
	if t == nil || t.node != node {
		if !strings.HasPrefix(upid, "UPID:") || strings.Count(upid, ":") < 8 {
			return nil, paramError("upid", "unable to parse worker upid '"+upid+"'")
		}
		return nil, errorf(http.StatusInternalServerError, "no such task")
	}
	return t, nil
}

func hTaskStatus(cl *call) (any, error) {
	t, err := cl.c.st.taskFor(cl.vars["node"], cl.vars["upid"])
	if err != nil {
		return nil, err
	}
	return taskJSON(t), nil
}

func hTaskLog(cl *call) (any, error) {
	t, err := cl.c.st.taskFor(cl.vars["node"], cl.vars["upid"])
	if err != nil {
		return nil, err
	}
	start, _ := cl.p.int("start")
	limit, ok := cl.p.int("limit")
	if !ok {
		limit = 50
	}
	out := []map[string]any{}
	for i := int(start); i < len(t.log) && int64(len(out)) < limit; i++ {
		out = append(out, map[string]any{"n": i + 1, "t": t.log[i]})
	}
	return out, nil
}

func hTaskStop(cl *call) (any, error) {
	t, err := cl.c.st.taskFor(cl.vars["node"], cl.vars["upid"])
	if err != nil {
		return nil, err
	}
	if t.running {
		t.log = append(t.log, "received interrupt")
		t.finish(fmt.Errorf("interrupted by signal"))
	}
	return nil, nil
}

// hNodeTasks lists a node's tasks, newest first.
func hNodeTasks(cl *call) (any, error) {
	node := cl.vars["node"]
	vmid, hasVMID := cl.p.int("vmid")
	typ, _ := cl.p.str("typefilter")
	source := cl.p.strOr("source", "archive")
	limit, ok := cl.p.int("limit")
	if !ok {
		limit = 50
	}
	start, _ := cl.p.int("start")
	var list []*task
	for _, t := range cl.c.st.taskList {
		if t.node != node || (hasVMID && t.id != fmt.Sprint(vmid)) || (typ != "" && t.typ != typ) {
			continue
		}
		if (source == "active" && !t.running) || (source == "archive" && t.running) {
			continue
		}
		list = append(list, t)
	}
	sort.SliceStable(list, func(i, j int) bool { return list[i].start.After(list[j].start) })
	out := []map[string]any{}
	for i := int(start); i < len(list) && int64(len(out)) < limit; i++ {
		m := taskJSON(list[i])
		if !list[i].running {
			m["status"] = list[i].exit
		}
		out = append(out, m)
	}
	return out, nil
}

func hClusterTasks(cl *call) (any, error) {
	out := []map[string]any{}
	for i := len(cl.c.st.taskList) - 1; i >= 0 && len(out) < 200; i-- {
		t := cl.c.st.taskList[i]
		m := taskJSON(t)
		if !t.running {
			m["status"] = t.exit
		}
		out = append(out, m)
	}
	return out, nil
}
