package pvesim

import (
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// snapshot is one snapshot section of a guest's config: the config as it was, with the
// snapshot's own metadata.
type snapshot struct {
	name        string
	description string
	snaptime    int64
	vmstate     bool   // taken of a running guest with its RAM
	parent      string // the snapshot it was taken on top of; "" for the first
	conf        map[string]any
}

// snapshotOf resolves the {snapname} of the path, failing like Proxmox when absent.
func (g *guest) snapshotOf(cl *call) (*snapshot, error) {
	name := cl.vars["snapname"]
	s := g.snaps[name]
	if s == nil {
		return nil, errorf(http.StatusInternalServerError, "snapshot '%s' does not exist", name)
	}
	return s, nil
}

func (g *guest) parentSnapshot() string {
	s, _ := g.conf["parent"].(string)
	return s
}

// snapshotsText renders the snapshot sections of the config file, for its digest.
func (g *guest) snapshotsText() string {
	var b strings.Builder
	for _, name := range sortedKeys(g.snaps) {
		s := g.snaps[name]
		fmt.Fprintf(&b, "\n[%s]\ndescription: %s\nparent: %s\nsnaptime: %d\nvmstate: %t\n", name, s.description, s.parent, s.snaptime, s.vmstate)
		for _, k := range sortedKeys(s.conf) {
			b.WriteString(k + ": " + formatValue(s.conf[k]) + "\n")
		}
	}
	return b.String()
}

// hSnapshotList lists the snapshots and "current", the running state on top of its parent.
func hSnapshotList(_ *call, g *guest) (any, error) {
	out := []map[string]any{}
	for _, name := range sortedKeys(g.snaps) {
		s := g.snaps[name]
		e := map[string]any{"name": s.name, "description": s.description, "snaptime": s.snaptime}
		if s.parent != "" {
			e["parent"] = s.parent
		}
		if s.vmstate {
			e["vmstate"] = 1
		}
		out = append(out, e)
	}
	cur := map[string]any{"name": "current", "description": "You are here!", "digest": g.digest(), "running": boolInt(g.running)}
	if p := g.parentSnapshot(); p != "" {
		cur["parent"] = p
	}
	return append(out, cur), nil
}

// hSnapshotCreate takes a snapshot in a qmsnapshot task; the guest is locked meanwhile.
func hSnapshotCreate(cl *call, g *guest) (any, error) {
	c := cl.c
	name, _ := cl.p.str("snapname")
	if name == "current" || name == "pending" {
		return nil, errorf(http.StatusInternalServerError, "unable to use snapshot name '%s' (reserved name)", name)
	}
	if err := g.checkLock(); err != nil {
		return nil, err
	}
	if g.isTemplate() {
		return nil, errorf(http.StatusInternalServerError, "you can't take a snapshot if it's a template")
	}
	if g.snaps[name] != nil {
		return nil, errorf(http.StatusInternalServerError, "snapshot name '%s' already used", name)
	}
	// A thin pool and qcow2 files snapshot; a raw file cannot.
	for _, k := range g.disks() {
		if v := c.st.findVolume(g.node, parseProperty(g.conf[k].(string)).first); v != nil && v.format == "raw" && c.st.storage(v.storage).typ != "lvmthin" {
			return nil, errorf(http.StatusInternalServerError, "snapshot feature is not available")
		}
	}
	s := &snapshot{name: name, description: cl.p.strOr("description", ""), vmstate: cl.p.bool("vmstate") && g.running, parent: g.parentSnapshot()}
	g.conf["lock"] = "snapshot"
	t := c.st.runTask(g.node, "qmsnapshot", strconv.Itoa(g.vmid), cl.user, c.taskDuration(0, 0), func(t *task) error {
		delete(g.conf, "lock")
		if g.snaps[name] != nil {
			return fmt.Errorf("snapshot name '%s' already used", name)
		}
		s.snaptime = time.Now().Unix()
		s.conf = make(map[string]any, len(g.conf))
		for k, v := range g.conf {
			if k != "parent" {
				s.conf[k] = v
			}
		}
		if g.snaps == nil {
			g.snaps = map[string]*snapshot{}
		}
		g.snaps[name] = s
		g.conf["parent"] = name
		t.log = append(t.log, fmt.Sprintf("snapshotting '%s' of VM %d", name, g.vmid))
		return nil
	})
	return t.upid, nil
}

// hSnapshotDelete removes a snapshot in a qmdelsnapshot task; its children take its parent.
func hSnapshotDelete(cl *call, g *guest) (any, error) {
	c := cl.c
	s, err := g.snapshotOf(cl)
	if err != nil {
		return nil, err
	}
	if !cl.p.bool("force") {
		if err := g.checkLock(); err != nil {
			return nil, err
		}
	}
	g.conf["lock"] = "snapshot-delete"
	t := c.st.runTask(g.node, "qmdelsnapshot", strconv.Itoa(g.vmid), cl.user, c.taskDuration(0, 0), func(*task) error {
		delete(g.conf, "lock")
		if g.snaps[s.name] != s {
			return fmt.Errorf("snapshot '%s' does not exist", s.name)
		}
		delete(g.snaps, s.name)
		for _, other := range g.snaps {
			if other.parent == s.name {
				other.parent = s.parent
			}
		}
		if g.parentSnapshot() == s.name {
			if s.parent == "" {
				delete(g.conf, "parent")
			} else {
				g.conf["parent"] = s.parent
			}
		}
		return nil
	})
	return t.upid, nil
}

// hSnapshotRollback puts the config back as the snapshot has it, in a qmrollback task: the
// guest stops, and runs afterwards if the snapshot holds its RAM or start=1 asks.
func hSnapshotRollback(cl *call, g *guest) (any, error) {
	c := cl.c
	s, err := g.snapshotOf(cl)
	if err != nil {
		return nil, err
	}
	if err := g.checkLock(); err != nil {
		return nil, err
	}
	start := cl.p.bool("start")
	g.conf["lock"] = "rollback"
	t := c.st.runTask(g.node, "qmrollback", strconv.Itoa(g.vmid), cl.user, c.taskDuration(0, 0), func(*task) error {
		if g.snaps[s.name] != s {
			delete(g.conf, "lock")
			return fmt.Errorf("snapshot '%s' does not exist", s.name)
		}
		g.stop()
		conf := make(map[string]any, len(s.conf)+1)
		for k, v := range s.conf {
			conf[k] = v
		}
		conf["parent"] = s.name
		g.conf, g.pending, g.pendDel = conf, nil, nil
		if s.vmstate || start {
			c.st.boot(g)
		}
		return nil
	})
	return t.upid, nil
}

// hSnapshotIndex is the directory index of one snapshot.
func hSnapshotIndex(cl *call, g *guest) (any, error) {
	if _, err := g.snapshotOf(cl); err != nil {
		return nil, err
	}
	return []map[string]any{{"cmd": "rollback"}, {"cmd": "config"}}, nil
}

// hSnapshotConfig is the config a snapshot holds, with its metadata.
func hSnapshotConfig(cl *call, g *guest) (any, error) {
	s, err := g.snapshotOf(cl)
	if err != nil {
		return nil, err
	}
	out := make(map[string]any, len(s.conf)+4)
	for k, v := range s.conf {
		out[k] = jsonValue(v)
	}
	out["description"], out["snaptime"] = s.description, s.snaptime
	if s.parent != "" {
		out["parent"] = s.parent
	}
	if s.vmstate {
		out["vmstate"] = 1
	}
	return out, nil
}

// hSnapshotUpdate changes a snapshot's description, the only thing Proxmox lets change.
func hSnapshotUpdate(cl *call, g *guest) (any, error) {
	s, err := g.snapshotOf(cl)
	if err != nil {
		return nil, err
	}
	if d, ok := cl.p.str("description"); ok {
		s.description = d
	}
	return nil, nil
}
