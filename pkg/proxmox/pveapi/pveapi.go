// Package pveapi holds the few Proxmox VE API calls flexplane's VM packages
// share and that go-proxmox either lacks or wraps with more than is needed:
// waiting for a task by UPID, the cluster-wide guest list, a guest's config
// with its digest, and classifying Proxmox's error answers. Every function
// takes the zone's *proxmox.Client and issues plain API requests through it.
package pveapi

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"time"

	proxmox "github.com/luthermonson/go-proxmox"
)

// TaskError is a Proxmox task that ended with an exit status other than OK.
type TaskError struct {
	UPID       string
	ExitStatus string
}

func (e *TaskError) Error() string { return fmt.Sprintf("task %s failed: %s", e.UPID, e.ExitStatus) }

// TaskStatus is the state of a task.
type TaskStatus struct {
	UPID string
	// Type is the task type, e.g. qmclone, qmstart, download.
	Type    string
	Running bool
	// ExitStatus is "OK" or the failure once the task stopped.
	ExitStatus string
}

// NodeOfUPID returns the node a UPID names ("UPID:node:...").
func NodeOfUPID(upid string) (string, error) {
	parts := strings.Split(upid, ":")
	if len(parts) < 3 || parts[0] != "UPID" || parts[1] == "" {
		return "", fmt.Errorf("pveapi: malformed UPID %q", upid)
	}
	return parts[1], nil
}

// UPID is what a task id says of its task
// ("UPID:node:pid:pstart:starttime:type:id:user:").
type UPID struct {
	// Node is the node the task runs on.
	Node string
	// Type is the task type (qmstart, qmclone, ...).
	Type string
	// ID is the object the task works on: a guest's VMID for guest tasks,
	// "" for some.
	ID string
	// Started is when the task started, in whole seconds (zero if the
	// UPID does not say).
	Started time.Time
}

// ParseUPID splits a task id into its fields.
func ParseUPID(upid string) (UPID, error) {
	parts := strings.Split(upid, ":")
	if len(parts) < 8 || parts[0] != "UPID" || parts[1] == "" || parts[5] == "" {
		return UPID{}, fmt.Errorf("pveapi: malformed UPID %q", upid)
	}
	u := UPID{Node: parts[1], Type: parts[5], ID: parts[6]}
	if sec, err := strconv.ParseUint(parts[4], 16, 32); err == nil {
		u.Started = time.Unix(int64(sec), 0)
	}
	return u, nil
}

// TypeOfUPID returns the task type a UPID names, or "" if it names none.
func TypeOfUPID(upid string) string {
	u, _ := ParseUPID(upid)
	return u.Type
}

// Task reads the status of the task upid.
func Task(ctx context.Context, c *proxmox.Client, upid string) (TaskStatus, error) {
	node, err := NodeOfUPID(upid)
	if err != nil {
		return TaskStatus{}, err
	}
	var raw struct {
		Type       string `json:"type"`
		Status     string `json:"status"`
		ExitStatus string `json:"exitstatus"`
	}
	if err := c.Get(ctx, "/nodes/"+node+"/tasks/"+url.PathEscape(upid)+"/status", &raw); err != nil {
		return TaskStatus{}, fmt.Errorf("pveapi: task status: %w", err)
	}
	return TaskStatus{UPID: upid, Type: raw.Type, Running: raw.Status == "running", ExitStatus: raw.ExitStatus}, nil
}

// TaskEntry is a task of a node's task history.
type TaskEntry struct {
	TaskStatus
	// ID is the task's object: a guest task's VMID.
	ID string
	// Started and Ended are when it began and stopped (Ended zero while it
	// runs).
	Started, Ended time.Time
}

// NodeTasks lists the tasks of node that worked on guest vmid, running and
// finished, newest first, at most limit (GET /nodes/{node}/tasks).
func NodeTasks(ctx context.Context, c *proxmox.Client, node string, vmid, limit int) ([]TaskEntry, error) {
	q := url.Values{"vmid": {strconv.Itoa(vmid)}, "source": {"all"}, "limit": {strconv.Itoa(limit)}}
	out, err := nodeTasks(ctx, c, node, q)
	if err != nil {
		return nil, fmt.Errorf("pveapi: tasks of %d on %s: %w", vmid, node, err)
	}
	return out, nil
}

// NodeTasksOfType lists the tasks of type typ (e.g. qmigrate) that node
// ran, running and finished, newest first, at most limit.
func NodeTasksOfType(ctx context.Context, c *proxmox.Client, node, typ string, limit int) ([]TaskEntry, error) {
	q := url.Values{"typefilter": {typ}, "source": {"all"}, "limit": {strconv.Itoa(limit)}}
	out, err := nodeTasks(ctx, c, node, q)
	if err != nil {
		return nil, fmt.Errorf("pveapi: %s tasks of %s: %w", typ, node, err)
	}
	return out, nil
}

// ClusterTasks lists the cluster's recent tasks of every node, running
// and finished (GET /cluster/tasks).
func ClusterTasks(ctx context.Context, c *proxmox.Client) ([]TaskEntry, error) {
	out, err := readTasks(ctx, c, "/cluster/tasks")
	if err != nil {
		return nil, fmt.Errorf("pveapi: cluster tasks: %w", err)
	}
	return out, nil
}

// nodeTasks reads GET /nodes/{node}/tasks with the query q.
func nodeTasks(ctx context.Context, c *proxmox.Client, node string, q url.Values) ([]TaskEntry, error) {
	return readTasks(ctx, c, "/nodes/"+url.PathEscape(node)+"/tasks?"+q.Encode())
}

// readTasks reads a list of tasks at path.
func readTasks(ctx context.Context, c *proxmox.Client, path string) ([]TaskEntry, error) {
	var raw []struct {
		UPID      string `json:"upid"`
		Type      string `json:"type"`
		ID        string `json:"id"`
		Status    string `json:"status"`
		StartTime int64  `json:"starttime"`
		EndTime   int64  `json:"endtime"`
	}
	if err := c.Get(ctx, path, &raw); err != nil {
		return nil, err
	}
	out := make([]TaskEntry, 0, len(raw))
	for _, t := range raw {
		e := TaskEntry{TaskStatus: TaskStatus{UPID: t.UPID, Type: t.Type}, ID: t.ID, Started: time.Unix(t.StartTime, 0)}
		// A running task has no end yet (and its status is absent or
		// "running"); a finished one's status is its exit status.
		if t.EndTime == 0 {
			e.Running = true
		} else {
			e.ExitStatus, e.Ended = t.Status, time.Unix(t.EndTime, 0)
		}
		out = append(out, e)
	}
	return out, nil
}

// PollInterval is how often Wait reads a running task's status.
const PollInterval = 25 * time.Millisecond

// Wait waits until the task upid stops; it returns a *TaskError unless the
// task ended OK.
func Wait(ctx context.Context, c *proxmox.Client, upid string) error {
	t := time.NewTicker(PollInterval)
	defer t.Stop()
	for {
		st, err := Task(ctx, c, upid)
		if err != nil {
			return err
		}
		if !st.Running {
			if st.ExitStatus != "OK" {
				return &TaskError{UPID: upid, ExitStatus: st.ExitStatus}
			}
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("pveapi: wait for %s: %w", upid, ctx.Err())
		case <-t.C:
		}
	}
}

// Run sends a request that starts a task (method POST, PUT or DELETE) and
// waits for the task to end.
func Run(ctx context.Context, c *proxmox.Client, method, path string, params map[string]any) (string, error) {
	var upid string
	var err error
	switch method {
	case "POST":
		err = c.Post(ctx, path, params, &upid)
	case "PUT":
		err = c.Put(ctx, path, params, &upid)
	case "DELETE":
		err = c.DeleteWithParams(ctx, path, params, &upid)
	default:
		return "", fmt.Errorf("pveapi: run %s %s: unsupported method", method, path)
	}
	if err != nil {
		return "", fmt.Errorf("pveapi: %s %s: %w", method, path, err)
	}
	if upid == "" {
		return "", nil
	}
	return upid, Wait(ctx, c, upid)
}

// Config is a guest's configuration; values are as Proxmox returns them
// (strings and numbers).
type Config map[string]any

// Str returns key as a string ("" when absent).
func (c Config) Str(key string) string {
	switch v := c[key].(type) {
	case nil:
		return ""
	case string:
		return v
	case float64:
		return strconv.FormatFloat(v, 'f', -1, 64)
	default:
		return fmt.Sprint(v)
	}
}

// Int returns key as an int (0 when absent or not a whole number that
// fits).
func (c Config) Int(key string) int {
	n, err := strconv.Atoi(c.Str(key))
	if err != nil {
		return 0 // Atoi's result is the largest int on overflow
	}
	return n
}

// Digest is the config digest to pass back on a conditional write.
func (c Config) Digest() string { return c.Str("digest") }

// GuestConfig reads the config of guest vmid on node.
func GuestConfig(ctx context.Context, c *proxmox.Client, node string, vmid int) (Config, error) {
	var cfg Config
	if err := c.Get(ctx, fmt.Sprintf("/nodes/%s/qemu/%d/config", node, vmid), &cfg); err != nil {
		return nil, fmt.Errorf("pveapi: config of %d: %w", vmid, err)
	}
	return cfg, nil
}

// IsAlreadyExists reports whether err is Proxmox refusing to create
// something that exists (an IP mapping, a VMID, a file).
func IsAlreadyExists(err error) bool {
	return err != nil && (strings.Contains(err.Error(), "already exist") ||
		strings.Contains(err.Error(), "refusing to override"))
}

// IsNotFound reports whether err is Proxmox answering that the object does
// not exist.
func IsNotFound(err error) bool {
	return err != nil && (strings.Contains(err.Error(), "does not exist") ||
		strings.Contains(err.Error(), "not exist"))
}

// IsDigestMismatch reports whether err is a config write refused because
// the config changed since it was read.
func IsDigestMismatch(err error) bool {
	return err != nil && strings.Contains(err.Error(), "detected modified configuration")
}

// IsLockTimeout reports whether err is Proxmox giving up on a guest's config
// lock ("can't lock file '/var/lock/qemu-server/lock-100.conf' - got
// timeout"): another request or task held it for longer than the request
// waits (parallel clones of one template hit it). Nothing was done; the
// same request may be sent again.
func IsLockTimeout(err error) bool {
	return err != nil && strings.Contains(err.Error(), "can't lock file") && strings.Contains(err.Error(), "got timeout")
}

// IsLocked reports whether err is Proxmox refusing because the guest is locked.
func IsLocked(err error) bool {
	return err != nil && strings.Contains(err.Error(), "locked")
}

// AsTaskError returns the *TaskError in err's chain.
func AsTaskError(err error) (*TaskError, bool) {
	var te *TaskError
	ok := errors.As(err, &te)
	return te, ok
}

// NextID asks Proxmox for a free VMID. It is only a guess: a create with it
// may still find it taken and must then ask again.
func NextID(ctx context.Context, c *proxmox.Client) (int, error) {
	var s string
	if err := c.Get(ctx, "/cluster/nextid", &s); err != nil {
		return 0, fmt.Errorf("pveapi: next vmid: %w", err)
	}
	n, err := strconv.Atoi(s)
	if err != nil {
		return 0, fmt.Errorf("pveapi: next vmid %q: %w", s, err)
	}
	return n, nil
}

// Snapshot is one snapshot of a guest, as GET
// /nodes/{node}/qemu/{vmid}/snapshot lists it.
type Snapshot struct {
	Name        string
	Description string
	// Parent is the snapshot it was taken on top of ("" for a first one).
	Parent string
	// Taken is when it was taken (zero while its task runs).
	Taken time.Time
	// VMState reports whether it holds the guest's RAM.
	VMState bool
}

// Snapshots lists the snapshots of guest vmid on node, in Proxmox's order,
// without the "current" entry; current is the snapshot the guest now runs
// on top of ("" for none).
func Snapshots(ctx context.Context, c *proxmox.Client, node string, vmid int) (snaps []Snapshot, current string, err error) {
	var raw []struct {
		Name        string            `json:"name"`
		Description string            `json:"description"`
		Parent      string            `json:"parent"`
		SnapTime    int64             `json:"snaptime"`
		VMState     proxmox.IntOrBool `json:"vmstate"`
	}
	if err := c.Get(ctx, fmt.Sprintf("/nodes/%s/qemu/%d/snapshot", url.PathEscape(node), vmid), &raw); err != nil {
		return nil, "", fmt.Errorf("pveapi: snapshots of %d: %w", vmid, err)
	}
	for _, r := range raw {
		if r.Name == "current" {
			current = r.Parent
			continue
		}
		s := Snapshot{Name: r.Name, Description: r.Description, Parent: r.Parent, VMState: bool(r.VMState)}
		if r.SnapTime > 0 {
			s.Taken = time.Unix(r.SnapTime, 0)
		}
		snaps = append(snaps, s)
	}
	return snaps, current, nil
}
