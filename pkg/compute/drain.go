package compute

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/flexplane/flexplane/pkg/catalog"
	"github.com/flexplane/flexplane/pkg/proxmox/pveapi"
)

// The drain: on the replica that recovers creates (Config.Recovers, the
// mesh control leader; always when alone), every pass of Run looks at the
// hosts in maintenance of each zone and starts a live migration for each
// VM still on one, to the host placement chooses, at most
// Config.DrainParallel at a time per zone. It keeps no state of its own:
// a VM locked by a migration is under way (its own or another replica's),
// a VM recorded as failed on the zone's policy is left where it is, and
// every other VM on the host is moved; so a replica that takes over, or
// one restarted, goes on where the last stopped, and two never start
// the move of one VM (Proxmox refuses a second migration of a locked VM).

// drainer tracks the migrations this process started.
type drainer struct {
	mu       sync.Mutex
	inflight map[string]map[int]bool // zone id -> VMIDs moving; protected by mu
	wg       sync.WaitGroup
}

func newDrainer() *drainer { return &drainer{inflight: map[string]map[int]bool{}} }

// drainPass starts the migrations the hosts in maintenance need.
func (d *deps) drainPass(ctx context.Context) {
	for _, z := range d.cfg.Zones.Zones(ctx) {
		if err := d.drainZone(ctx, z); err != nil && ctx.Err() == nil {
			d.log.Warn("drain", "zone", z.Name, "err", err)
		}
	}
}

// drainZone starts the migrations of zone z's hosts in maintenance.
func (d *deps) drainZone(ctx context.Context, z Zone) error {
	p, err := catalog.Get[*catalog.ZonePolicy](ctx, d.cfg.Catalog, z.Name)
	if errors.Is(err, catalog.ErrNotFound) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("reading the zone's policy: %w", err)
	}
	byHA, err := d.syncMaintenanceRule(ctx, z, maintenanceOf(p))
	if err != nil {
		d.log.Warn("ha: writing the maintenance rule failed", "zone", z.Name, "err", err)
	}
	if len(p.Maintenance) == 0 {
		return nil
	}
	zctx, cancel := context.WithTimeout(ctx, d.find.timeout)
	rs, err := pveapi.Resources(zctx, z.Client, "vm")
	cancel()
	if err != nil {
		return fmt.Errorf("reading the zone's guests: %w", err)
	}
	dr := d.drainer
	dr.mu.Lock()
	defer dr.mu.Unlock()
	moving := dr.inflight[z.ID]
	if moving == nil {
		moving = map[int]bool{}
		dr.inflight[z.ID] = moving
	}
	for _, m := range p.Maintenance {
		failed := map[int]bool{}
		for _, f := range m.Failed {
			failed[f.VMID] = true
		}
		for _, g := range rs {
			if len(moving) >= d.cfg.DrainParallel {
				return nil
			}
			if g.Type != "qemu" || g.Template == 1 || g.Node != m.Host || failed[g.VMID] || moving[g.VMID] ||
				g.Lock != "" || isCreating(g) {
				continue
			}
			moving[g.VMID] = true
			dr.wg.Add(1)
			go func() {
				defer dr.wg.Done()
				if byHA[haSID(g.VMID)] {
					d.drainByHA(ctx, z, m, g)
				} else {
					d.drainVM(ctx, z, m, g)
				}
				dr.mu.Lock()
				delete(moving, g.VMID)
				dr.mu.Unlock()
			}()
		}
	}
	return nil
}

// drainVM moves guest g off host m.Host: placement chooses the target (a
// host not in maintenance with room for it), Proxmox migrates it (online
// when it runs, with its local disks). What cannot move is recorded as
// failed on the zone's policy; a zone that does not answer is tried again
// on the next pass.
func (d *deps) drainVM(ctx context.Context, z Zone, m catalog.HostInMaintenance, g pveapi.Resource) {
	log := d.log.With("zone", z.Name, "host", m.Host, "vmid", g.VMID, "vm", g.Name)
	cfg, err := pveapi.GuestConfig(ctx, z.Client, g.Node, g.VMID)
	if err != nil {
		log.Warn("drain: reading the VM's configuration", "err", err)
		return
	}
	var storage string
	if boot := cfg.BootDisk(); boot != "" {
		for _, v := range cfg.Volumes() {
			if v.Slot == boot {
				storage = v.Storage
			}
		}
	}
	dem := demand{MemBytes: g.MaxMem, VCPUs: g.MaxCPU, Storage: storage}
	// Disks on shared storage do not move; local ones need room there.
	if st, err := pveapi.Resources(ctx, z.Client, "storage"); err == nil {
		for _, r := range st {
			if r.Storage == storage && r.Node == g.Node && r.Shared == 0 {
				dem.DiskBytes = g.MaxDisk
			}
		}
	}
	s, err := d.place(ctx, placeRequest{Zone: z, Demand: dem, VM: g.Name, Group: d.groupOfGuest(ctx, cfg)})
	if err != nil {
		d.drainFailed(ctx, z, m, g, err)
		return
	}
	defer s.release()
	sc := &migrateScope{deps: d, in: MigrateInput{Host: s.node}, z: z, g: g}
	if err := runPhases(ctx, d.eng, "", "", migratePhases(), sc); err != nil {
		d.drainFailed(ctx, z, m, g, cause(err))
		return
	}
	s.bind(g.VMID)
	log.Info("drain: migrating", "to", s.node, "upid", sc.upid)
	if err := pveapi.Wait(ctx, z.Client, sc.upid); err != nil {
		d.drainFailed(ctx, z, m, g, err)
		return
	}
	if err := d.waitHARequest(ctx, z, sc.upid, g.VMID); err != nil {
		d.drainFailed(ctx, z, m, g, err)
		return
	}
	log.Info("drain: migrated", "to", s.node)
}

// drainByHA waits until Proxmox's HA manager has moved HA guest g off
// m.Host, which the zone's maintenance rule (hamaint.go) leaves out: the
// manager moves it to the host its rules allow with the least load, and a
// migration of flexplane's would race its own. It has not moved within
// Config.HARequestTimeout: recorded as failed.
func (d *deps) drainByHA(ctx context.Context, z Zone, m catalog.HostInMaintenance, g pveapi.Resource) {
	log := d.log.With("zone", z.Name, "host", m.Host, "vmid", g.VMID, "vm", g.Name)
	log.Info("drain: the HA manager moves the VM")
	deadline := time.Now().Add(d.cfg.HARequestTimeout)
	err := waitGuest(ctx, z, g.VMID, func(g pveapi.Resource) (bool, error) {
		if g.Node != m.Host && g.Lock == "" {
			return true, nil
		}
		if time.Now().After(deadline) {
			return false, newError(KindConflict, "Proxmox's HA manager did not move the VM off the host within %s (HA state %s)", d.cfg.HARequestTimeout, g.HAState)
		}
		return false, nil
	})
	if err != nil {
		d.drainFailed(ctx, z, m, g, err)
		return
	}
	log.Info("drain: moved by the HA manager")
}

// drainFailed records that g could not move off m.Host (unless err is
// only the zone or this process going away: the next pass tries again).
func (d *deps) drainFailed(ctx context.Context, z Zone, m catalog.HostInMaintenance, g pveapi.Resource, err error) {
	var e *Error
	if ctx.Err() != nil || errors.As(err, &e) && (e.Kind == KindZoneUnavailable || e.Kind == KindInternal) {
		d.log.Warn("drain: the VM did not move; trying again", "zone", z.Name, "vmid", g.VMID, "err", err)
		return
	}
	msg := err.Error()
	if e != nil {
		msg = e.Message
	}
	msg = fmt.Sprintf("VM %s (%d) cannot move: %s", g.Name, g.VMID, msg)
	d.log.Warn("drain: a VM cannot move", "zone", z.Name, "host", m.Host, "vmid", g.VMID, "err", msg)
	werr := updatePolicy(ctx, d.cfg.Catalog, z.Name, func(p *catalog.ZonePolicy) (bool, error) {
		for i := range p.Maintenance {
			cur := &p.Maintenance[i]
			if cur.Host != m.Host || cur.Since != m.Since {
				continue // disabled (or enabled again) since: not this drain's
			}
			for _, f := range cur.Failed {
				if f.VMID == g.VMID {
					return false, nil
				}
			}
			cur.Failed = append(cur.Failed, catalog.DrainFailure{VMID: g.VMID, Message: msg})
			return true, nil
		}
		return false, nil
	})
	if werr != nil {
		d.log.Warn("drain: recording a VM that cannot move", "zone", z.Name, "vmid", g.VMID, "err", werr)
	}
}

// groupOfGuest is the placement group of the guest whose configuration is
// cfg (its intent names it), so that the drain keeps to its policy as a
// create does; nil for none, or when it cannot be read (logged).
func (d *deps) groupOfGuest(ctx context.Context, cfg pveapi.Config) *catalog.PlacementGroup {
	in, ok := ParseIntent(cfg.Str("description"))
	if !ok || in.PlacementGroup == "" {
		return nil
	}
	name := catalog.PlacementGroupName(in.VDC, in.PlacementGroup)
	g, err := catalog.Get[*catalog.PlacementGroup](ctx, d.cfg.Catalog, name)
	if err != nil {
		if !errors.Is(err, catalog.ErrNotFound) {
			d.log.Warn("drain: reading the VM's placement group", "group", name, "err", err)
		}
		return nil
	}
	return g
}
