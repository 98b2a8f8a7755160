package compute

import (
	"context"
	"fmt"
	"regexp"
	"slices"
	"time"

	"github.com/flexplane/flexplane/pkg/proxmox/pveapi"
)

// HA requests: Proxmox answers a start, stop or shutdown of an HA guest
// with a hastart or hastop task, and its migration with a hamigrate task,
// that end as soon as the request is queued to the HA manager; the manager
// then starts, stops or migrates the guest on its own cycle (10 s on a real
// cluster), in a task of its own. flexplane reports such an action done
// only when the guest is where the request asked: running or stopped, on
// the migration's target node and unlocked. It fails when the guest's HA
// state is error, or when the guest is not there within
// Config.HARequestTimeout of the request.

// DefaultHARequestTimeout is Config.HARequestTimeout's default: a few of
// the HA manager's cycles plus a start, a shutdown or a migration.
const DefaultHARequestTimeout = 3 * time.Minute

// haWaitInterval is how often waitHARequest reads the guest.
const haWaitInterval = 500 * time.Millisecond

// haMigrationTarget reads the target node in a hamigrate task's log.
var haMigrationTarget = regexp.MustCompile(`^Requesting HA migration for VM \d+ to node (\S+)`)

// haRequest is what an HA request's task asked of its guest.
type haRequest struct {
	typ    string    // hastart, hastop or hamigrate
	status string    // the guest's status once done (start, stop)
	node   string    // the guest's node once done (migration)
	since  time.Time // when the request was made
}

// haRequestOf reads what task upid, which ended OK, asked; ok is false
// when it is no HA request.
func haRequestOf(ctx context.Context, z Zone, upid string) (haRequest, bool, error) {
	u, err := pveapi.ParseUPID(upid)
	if err != nil {
		return haRequest{}, false, err
	}
	r := haRequest{typ: u.Type, since: u.Started}
	switch u.Type {
	case "hastart":
		r.status = "running"
	case "hastop":
		r.status = "stopped"
	case "hamigrate":
		lines, err := pveapi.TaskLog(ctx, z.Client, upid)
		if err != nil {
			return r, true, err
		}
		for _, l := range lines {
			if m := haMigrationTarget.FindStringSubmatch(l); m != nil {
				r.node = m[1]
			}
		}
		if r.node == "" {
			return r, true, fmt.Errorf("compute: task %s names no target node", upid)
		}
	default:
		return r, false, nil
	}
	return r, true, nil
}

// done reports whether guest g is where r asked; an error when the HA
// manager failed it (HA state error) or the deadline, timeout after the
// request, has passed.
func (r haRequest) done(g pveapi.Resource, timeout time.Duration) (bool, error) {
	if (r.status == "" || g.Status == r.status) && (r.node == "" || g.Node == r.node) && g.Lock == "" && g.HAState != "migrate" {
		return true, nil
	}
	if g.HAState == "error" {
		return false, newError(KindConflict, "Proxmox's HA manager could not %s (HA state error)", r.action())
	}
	if !r.since.IsZero() && time.Since(r.since) > timeout {
		return false, newError(KindConflict, "Proxmox's HA manager did not %s within %s (the VM is %s on %s, HA state %s)",
			r.action(), timeout, g.Status, g.Node, g.HAState)
	}
	return false, nil
}

// action names what r asked.
func (r haRequest) action() string {
	switch r.typ {
	case "hastart":
		return "start the VM"
	case "hastop":
		return "stop the VM"
	}
	return "move the VM to " + r.node
}

// settleHA turns the state of op, which follows task upid of guest g,
// into the HA manager's: an HA request's task that ended OK is running
// until g is where it asked, failed when it cannot be. Other tasks'
// operations are left as they are.
func (d *deps) settleHA(ctx context.Context, z Zone, upid string, g pveapi.Resource, op *Operation) error {
	if op.State != OpSucceeded {
		return nil
	}
	r, ok, err := haRequestOf(ctx, z, upid)
	if err != nil || !ok {
		return err
	}
	done, err := r.done(g, d.cfg.HARequestTimeout)
	switch {
	case err != nil:
		op.State, op.Error = OpFailed, publicError(err)
	case !done:
		op.State = OpRunning
	}
	return nil
}

// waitHARequest waits, after task upid of guest vmid ended OK, until the
// guest is where the task asked if it was an HA request; at most
// Config.HARequestTimeout.
func (d *deps) waitHARequest(ctx context.Context, z Zone, upid string, vmid int) error {
	r, ok, err := haRequestOf(ctx, z, upid)
	if err != nil || !ok {
		return err
	}
	return waitGuest(ctx, z, vmid, func(g pveapi.Resource) (bool, error) { return r.done(g, d.cfg.HARequestTimeout) })
}

// waitHAStarted waits until the HA manager has started guest vmid, which
// became an HA resource with state started at since; at most
// Config.HARequestTimeout from then.
func (d *deps) waitHAStarted(ctx context.Context, z Zone, vmid int, since time.Time) error {
	r := haRequest{typ: "hastart", status: "running", since: since}
	return waitGuest(ctx, z, vmid, func(g pveapi.Resource) (bool, error) { return r.done(g, d.cfg.HARequestTimeout) })
}

// waitGuest reads guest vmid of zone z every haWaitInterval until done
// reports it done or fails, or the guest is gone.
func waitGuest(ctx context.Context, z Zone, vmid int, done func(pveapi.Resource) (bool, error)) error {
	t := time.NewTicker(haWaitInterval)
	defer t.Stop()
	for {
		guests, err := pveapi.Guests(ctx, z.Client)
		if err != nil {
			return err
		}
		i := slices.IndexFunc(guests, func(g pveapi.Resource) bool { return g.VMID == vmid })
		if i < 0 {
			return nil // gone: nothing left to wait for
		}
		if ok, err := done(guests[i]); err != nil || ok {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
}

// runHA runs a start, stop or migration of guest vmid as pveapi.Run does,
// then waits for the HA manager if Proxmox handed it over (waitHARequest).
func (d *deps) runHA(ctx context.Context, z Zone, path string, params map[string]any, vmid int) error {
	upid, err := pveapi.Run(ctx, z.Client, "POST", path, params)
	if err != nil || upid == "" {
		return err
	}
	return d.waitHARequest(ctx, z, upid, vmid)
}
