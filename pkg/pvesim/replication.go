package pvesim

import (
	"net/http"
	"strconv"
	"strings"
)

// replJob is a storage replication job (/cluster/replication), as
// replication.cfg keeps it. The simulator keeps the jobs' configuration
// only: it replicates nothing.
type replJob struct {
	id       string // <guest>-<jobnum>
	guest    int
	jobnum   int
	target   string
	schedule string
	rate     string
	comment  string
	disable  bool
}

func (j *replJob) entry() map[string]any {
	e := map[string]any{"id": j.id, "guest": j.guest, "jobnum": j.jobnum, "target": j.target, "type": "local"}
	if j.schedule != "" {
		e["schedule"] = j.schedule
	}
	if j.rate != "" {
		e["rate"], _ = strconv.ParseFloat(j.rate, 64)
	}
	if j.comment != "" {
		e["comment"] = j.comment
	}
	if j.disable {
		e["disable"] = 1
	}
	return e
}

func hReplicationList(cl *call) (any, error) {
	out := []map[string]any{}
	for _, id := range sortedKeys(cl.c.st.repl) {
		out = append(out, cl.c.st.repl[id].entry())
	}
	return out, nil
}

func hReplicationGet(cl *call) (any, error) {
	j := cl.c.st.repl[cl.vars["id"]]
	if j == nil {
		return nil, errorf(http.StatusInternalServerError, "replication job '%s' does not exist", cl.vars["id"])
	}
	return j.entry(), nil
}

// hReplicationCreate adds a job for an existing guest to another existing
// node of the cluster, as PVE::API2::ReplicationConfig does.
func hReplicationCreate(cl *call) (any, error) {
	st := cl.c.st
	id, _ := cl.p.str("id")
	if st.repl[id] != nil {
		return nil, errorf(http.StatusInternalServerError, "replication job '%s' already exists", id)
	}
	guestPart, numPart, _ := strings.Cut(id, "-")
	vmid, _ := strconv.Atoi(guestPart)
	num, _ := strconv.Atoi(numPart)
	g := st.guests[vmid]
	if g == nil {
		return nil, errorf(http.StatusInternalServerError, "guest '%d' does not exist", vmid)
	}
	target, _ := cl.p.str("target")
	if st.nodes[target] == nil {
		return nil, paramError("target", "no such cluster node '"+target+"'")
	}
	if target == g.node {
		return nil, errorf(http.StatusInternalServerError, "unable to replicate to the local node '%s'", target)
	}
	st.repl[id] = &replJob{id: id, guest: vmid, jobnum: num, target: target, schedule: cl.p.strOr("schedule", ""),
		rate: cl.p.strOr("rate", ""), comment: cl.p.strOr("comment", ""), disable: cl.p.bool("disable")}
	return nil, nil
}

// hReplicationDelete removes a job. Proxmox marks it for removal and its
// replication runner removes it with its replicated data; the simulator,
// which replicates nothing, removes it at once.
func hReplicationDelete(cl *call) (any, error) {
	id := cl.vars["id"]
	if cl.c.st.repl[id] == nil {
		return nil, errorf(http.StatusInternalServerError, "replication job '%s' does not exist", id)
	}
	delete(cl.c.st.repl, id)
	return nil, nil
}
