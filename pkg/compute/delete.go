package compute

import (
	"context"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/flexplane/flexplane/pkg/network/ipam"
	"github.com/flexplane/flexplane/pkg/proxmox/pveapi"
)

// DeleteVM stops VM id of vdc if it runs, destroys it with its disks and
// releases its IPAM addresses; it returns when that is done. A VM whose
// create this process is running answers CONFLICT.
func (s *Service) DeleteVM(ctx context.Context, vdc, id string) (*Operation, error) {
	return deleteVM(ctx, s.d, vdc, id)
}

// deleteVM is DeleteVM.
func deleteVM(ctx context.Context, d *deps, vdc, id string) (*Operation, error) {
	z, g, in, err := d.find.lookup(ctx, vdc, id)
	if err != nil {
		return nil, err
	}
	if d.eng.isLive(z, g.VMID) {
		return nil, newError(KindConflict, "the VM is still being created")
	}
	started := time.Now()
	upid, err := d.destroy(ctx, z, g, in)
	if err != nil {
		return nil, internal("deleting the VM failed", err)
	}
	op := Operation{ID: taskOpID(z.ID, g.VMID, OpDelete, upid), Kind: OpDelete, State: OpSucceeded, Step: "qmdestroy",
		VMID: id, Started: started, Updated: time.Now()}
	d.eng.record(vdc, z.Name, op)
	return &op, nil
}

var macRE = regexp.MustCompile(`(?i)([0-9a-f]{2}:){5}[0-9a-f]{2}`)

// deleteScope is what the phases of a delete work on.
type deleteScope struct {
	*deps
	z Zone
	g pveapi.Resource // the guest (its node and VMID)
	// in is the intent of the VM's create (nil for a guest without
	// one, such as a move's other copy: no quota is released for it).
	in   *Intent
	base string // the guest's API path
	// macs and cicustom are read off the guest's config before it goes.
	macs     []string
	cicustom string
	upid     string // the destroy task
}

// deletePhases are the phases of a delete, in order: stop (the guest
// powered off, once no other task holds its lock), destroy (purged with
// its disks), release (its IPAM addresses, its user-data snippet, its
// backup schedule and the quota its create may still hold).
func deletePhases() []phase[deleteScope] {
	return []phase[deleteScope]{
		step("stop", (*deleteScope).stop),
		step("destroy", (*deleteScope).destroy),
		step("release", (*deleteScope).release),
	}
}

// destroy stops, purges and releases the addresses of guest g (the
// delete phases); it returns the destroy task. Deletes, failed creates
// and moves (a move's other copy) destroy guests so.
func (d *deps) destroy(ctx context.Context, z Zone, g pveapi.Resource, in *Intent) (string, error) {
	sc := &deleteScope{deps: d, z: z, g: g, in: in, base: fmt.Sprintf("/nodes/%s/qemu/%d", g.Node, g.VMID)}
	err := runPhases(ctx, d.eng, "", "", deletePhases(), sc)
	return sc.upid, err
}

// settle waits until no task but its destroy holds the guest's lock, and
// reads what release needs off its config; a guest that is gone fails
// the delete.
func (sc *deleteScope) settle(ctx context.Context) (pveapi.Resource, error) {
	for range maxSteps {
		cur, ok, err := pveapi.FindGuest(ctx, sc.z.Client, sc.g.VMID)
		if err != nil {
			return pveapi.Resource{}, err
		}
		if !ok {
			break
		}
		if cur.Lock != "" && cur.Lock != "destroyed" {
			sleep(ctx, pveapi.PollInterval)
			continue
		}
		if cfg, err := pveapi.GuestConfig(ctx, sc.z.Client, sc.g.Node, sc.g.VMID); err == nil {
			sc.cicustom = cfg.Str("cicustom")
			if sc.cicustom == "" && sc.in != nil && sc.in.UserDataSum != "" {
				// A create that failed between writing its snippet and
				// naming it: the snippet is the one it would have named.
				if st, err := snippetStorage(ctx, sc.z, sc.g.Node, !sc.in.NoHA); err == nil {
					sc.cicustom = "user=" + SnippetRef{Storage: st, Name: userDataName(sc.g.VMID)}.Volume()
				}
			}
			for i := range MaxNICs {
				if m := macRE.FindString(cfg.Str("net" + strconv.Itoa(i))); m != "" {
					sc.macs = append(sc.macs, m)
				}
			}
		}
		return cur, nil
	}
	return pveapi.Resource{}, fmt.Errorf("compute: delete %d: gave up", sc.g.VMID)
}

// stop powers the guest off.
func (sc *deleteScope) stop(ctx context.Context) error {
	for range maxSteps {
		cur, err := sc.settle(ctx)
		if err != nil {
			return err
		}
		if cur.Status != "running" {
			return nil
		}
		if err := sc.powerOff(ctx); err != nil {
			return err
		}
	}
	return fmt.Errorf("compute: delete %d: gave up", sc.g.VMID)
}

// powerOff stops the guest at once (an HA guest: once the HA manager has
// stopped it); a guest that changed meanwhile is tried again by the
// caller.
func (sc *deleteScope) powerOff(ctx context.Context) error {
	if err := sc.runHA(ctx, sc.z, sc.base+"/status/stop", map[string]any{}, sc.g.VMID); err != nil && !retryable(err) {
		return err
	}
	return nil
}

// destroy purges the stopped guest with its disks (one started again
// meanwhile is stopped first).
func (sc *deleteScope) destroy(ctx context.Context) error {
	for range maxSteps {
		cur, err := sc.settle(ctx)
		if err != nil {
			return err
		}
		if cur.Status == "running" {
			if err := sc.powerOff(ctx); err != nil {
				return err
			}
			continue
		}
		upid, err := pveapi.Run(ctx, sc.z.Client, "DELETE", sc.base, map[string]any{"purge": 1, "destroy-unreferenced-disks": 1})
		if retryable(err) || (err != nil && strings.Contains(err.Error(), "running")) {
			continue
		}
		if err != nil && !pveapi.IsNotFound(err) {
			return err
		}
		sc.upid = upid
		return nil
	}
	return fmt.Errorf("compute: delete %d: gave up", sc.g.VMID)
}

// release releases what the destroyed guest held.
func (sc *deleteScope) release(ctx context.Context) error {
	macs := sc.macs
	if sc.in != nil {
		for _, n := range sc.in.NICs {
			macs = append(macs, n.MAC)
		}
	}
	if err := ipam.ReleaseMACs(ctx, sc.z.Client, macs); err != nil {
		return err
	}
	if err := sc.snips.deleteUserData(ctx, sc.z, sc.g.Node, sc.g.VMID, sc.cicustom, sc.log); err != nil {
		return err
	}
	// Its backup schedule goes with it (a move recreated it in the new
	// zone before it destroys the source).
	if err := dropJob(ctx, sc.z, sc.g.VMID); err != nil {
		return err
	}
	if sc.in != nil {
		if err := sc.quota.Release(ctx, sc.in.VDC, sc.in.Op); err != nil {
			sc.log.Warn("releasing quota", "op", sc.in.Op, "err", err)
		}
	}
	sc.log.Info("VM deleted", "zone", sc.z.Name, "vmid", sc.g.VMID)
	return nil
}
