package compute

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"time"

	"github.com/flexplane/flexplane/pkg/catalog"
	"github.com/flexplane/flexplane/pkg/proxmox/pveapi"
	"github.com/flexplane/flexplane/pkg/tenancy"
)

// Host maintenance: a platform admin puts a host in maintenance; placement
// then takes it for no new VM, and the drain (drain.go) live-migrates its
// VMs to the hosts placement chooses.
//
// Where it lives: the list of a zone's hosts in maintenance is on the
// zone's catalog.ZonePolicy (Maintenance), written conditionally (its
// resourceVersion) like every catalog write. Proxmox has a node
// maintenance mode of its own, but only the HA manager's (ha-manager
// crm-command), with no API path the agent could allow, and a node's
// description is free text others edit; the zone policy is already what
// the platform admin decides about a zone's hosts. The HA manager learns
// of it through an HA rule (hamaint.go). What the drain has done
// is read from Proxmox: where each VM is, its lock while it migrates, and
// the host's migration tasks since maintenance began, so any replica
// (and a restarted one) sees the same progress and resumes the drain.

// HostMaintenanceState is a host's maintenance state.
type HostMaintenanceState string

// The states of a host's maintenance.
const (
	// MaintenanceNone: the host takes placements.
	MaintenanceNone HostMaintenanceState = "NONE"
	// MaintenanceDraining: in maintenance, VMs still to move.
	MaintenanceDraining HostMaintenanceState = "DRAINING"
	// MaintenanceDone: in maintenance, no VM left on it.
	MaintenanceDone HostMaintenanceState = "MAINTENANCE"
	// MaintenanceFailed: in maintenance, a VM could not move (named in
	// the drain's items); the drain is over until maintenance is disabled.
	MaintenanceFailed HostMaintenanceState = "FAILED"
)

// DrainStatus is how far the drain has come with one VM.
type DrainStatus string

// The statuses of a VM in a drain.
const (
	DrainPending   DrainStatus = "PENDING"
	DrainMigrating DrainStatus = "MIGRATING"
	DrainDone      DrainStatus = "DONE"
	DrainFailed    DrainStatus = "FAILED"
)

// DrainItem is one VM of a host's drain.
type DrainItem struct {
	// VM is the VM's id; VMName its name.
	VM     string
	VMName string
	Status DrainStatus
	// Message says why it failed ("" otherwise).
	Message string
}

// HostMaintenance is a host's maintenance and its drain's progress.
type HostMaintenance struct {
	State HostMaintenanceState
	// Drain lists the VMs of the drain: those still on the host and those
	// its migrations since maintenance began moved, by VMID.
	Drain []DrainItem
}

// DefaultDrainParallel is Config.DrainParallel's default.
const DefaultDrainParallel = 4

// errMaintenance is the cause of the conflicts of Hosts.SetMaintenance.
var errMaintenance = errors.New("compute: host already in maintenance")

// hostZone resolves a host id to its zone and node: an id that names no
// host of a reachable zone is KindBadInput on field host, as migrateVM's.
func (d *deps) hostZone(ctx context.Context, host string) (Zone, string, error) {
	ref, err := tenancy.ParseHostID(host)
	if err != nil {
		return Zone{}, "", badInput("host", "%q is not a host id", host)
	}
	z, ok := d.find.zoneByID(ctx, ref.ZoneID)
	if !ok {
		return Zone{}, "", badInput("host", "there is no host %q", host)
	}
	zctx, cancel := context.WithTimeout(ctx, d.find.timeout)
	defer cancel()
	nodes, err := pveapi.Resources(zctx, z.Client, "node")
	if err != nil {
		return Zone{}, "", zoneDown(z.Name, err)
	}
	if !slices.ContainsFunc(nodes, func(n pveapi.Resource) bool { return n.Type == "node" && n.Node == ref.Node }) {
		return Zone{}, "", badInput("host", "zone %s has no host %q", z.Name, ref.Node)
	}
	return z, ref.Node, nil
}

// Hosts is the maintenance of a Service's hosts (Service.Hosts).
type Hosts struct{ d *deps }

// Hosts returns the maintenance of the service's hosts.
func (s *Service) Hosts() *Hosts { return &Hosts{d: s.d} }

// SetMaintenance puts host (a host id) in maintenance or takes it out.
// Enabling records it on the zone's policy: placement takes the host for
// no new VM at once, and the drain moves its VMs away (Run). Enabling a
// host already in maintenance is KindConflict. Disabling returns the host
// to placement and ends its drain: no new migration starts, those under
// way finish. An unknown host is KindBadInput on "host".
func (s *Hosts) SetMaintenance(ctx context.Context, host string, enabled bool) (HostMaintenance, error) {
	d := s.d
	z, node, err := d.hostZone(ctx, host)
	if err != nil {
		return HostMaintenance{}, err
	}
	err = updatePolicy(ctx, d.cfg.Catalog, z.Name, func(p *catalog.ZonePolicy) (bool, error) {
		_, in := p.InMaintenance(node)
		switch {
		case enabled && in:
			return false, &Error{Kind: KindConflict, Field: "host", Message: fmt.Sprintf("host %s is already in maintenance", node), Cause: errMaintenance}
		case enabled:
			p.Maintenance = append(p.Maintenance, catalog.HostInMaintenance{Host: node, Since: time.Now().UTC().Format(time.RFC3339)})
			return true, nil
		case in:
			p.Maintenance = slices.DeleteFunc(p.Maintenance, func(m catalog.HostInMaintenance) bool { return m.Host == node })
			return true, nil
		}
		return false, nil
	})
	if err != nil {
		return HostMaintenance{}, err
	}
	d.log.Info("host maintenance", "zone", z.Name, "host", node, "enabled", enabled)
	// The HA manager excludes the host at once (the drain's passes keep
	// the rule current).
	if p, err := catalog.Get[*catalog.ZonePolicy](ctx, d.cfg.Catalog, z.Name); err == nil {
		if _, err := d.syncMaintenanceRule(ctx, z, maintenanceOf(p)); err != nil {
			d.log.Warn("ha: writing the maintenance rule failed", "zone", z.Name, "err", err)
		}
	}
	return s.Maintenance(ctx, host)
}

// updatePolicy applies change to zone's policy (a new one when it has
// none) and writes it if change says so, again on a write conflict.
func updatePolicy(ctx context.Context, store catalog.Store, zone string, change func(*catalog.ZonePolicy) (bool, error)) error {
	for range 10 {
		p, err := catalog.Get[*catalog.ZonePolicy](ctx, store, zone)
		create := errors.Is(err, catalog.ErrNotFound)
		if create {
			p, err = &catalog.ZonePolicy{ObjectMeta: catalog.ObjectMeta{Name: zone}}, nil
		}
		if err != nil {
			return internal("reading the zone's policy failed", err)
		}
		write, err := change(p)
		if err != nil || !write {
			return err
		}
		if create {
			_, err = catalog.Create(ctx, store, p)
		} else {
			_, err = catalog.Update(ctx, store, p)
		}
		if errors.Is(err, catalog.ErrConflict) || errors.Is(err, catalog.ErrAlreadyExists) {
			continue
		}
		if err != nil {
			return internal("writing the zone's policy failed", err)
		}
		return nil
	}
	return newError(KindConflict, "the zone's policy changed too often; try again")
}

// maintenanceHosts is placement's default Config.Maintenance: the hosts
// of zone in maintenance on its policy.
func (d *deps) maintenanceHosts(ctx context.Context, zone string) (map[string]bool, error) {
	p, err := catalog.Get[*catalog.ZonePolicy](ctx, d.cfg.Catalog, zone)
	if errors.Is(err, catalog.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("compute: hosts in maintenance: %w", err)
	}
	out := map[string]bool{}
	for _, m := range p.Maintenance {
		out[m.Host] = true
	}
	return out, nil
}

// InMaintenance returns the hosts (node names) of zone (by name) in
// maintenance, as placement sees them.
func (s *Hosts) InMaintenance(ctx context.Context, zone string) (map[string]bool, error) {
	return s.d.cfg.Maintenance(ctx, zone)
}

// Maintenance reads the maintenance of host (a host id) and its drain's
// progress from the zone's policy and Proxmox.
//
// It reads the zone's policy first: a host not in maintenance costs no
// Proxmox call (a list of hosts asks it of each). When the zone does not
// answer, a host in maintenance is answered from the policy alone (FAILED
// with the VMs that could not move, else MAINTENANCE), so that a zone
// that is down never fails a list of hosts.
func (s *Hosts) Maintenance(ctx context.Context, host string) (HostMaintenance, error) {
	d := s.d
	ref, err := tenancy.ParseHostID(host)
	if err != nil {
		return HostMaintenance{}, badInput("host", "%q is not a host id", host)
	}
	z, ok := d.find.zoneByID(ctx, ref.ZoneID)
	if !ok {
		// A zone without a reachable agent: answered from its policy.
		if z, ok = d.find.unreachableZone(ctx, ref.ZoneID); !ok {
			return HostMaintenance{}, badInput("host", "there is no host %q", host)
		}
	}
	p, err := catalog.Get[*catalog.ZonePolicy](ctx, d.cfg.Catalog, z.Name)
	if err != nil && !errors.Is(err, catalog.ErrNotFound) {
		return HostMaintenance{}, internal("reading the zone's policy failed", err)
	}
	m, in := p.InMaintenance(ref.Node)
	if !in {
		return HostMaintenance{State: MaintenanceNone, Drain: []DrainItem{}}, nil
	}
	if z.Client == nil {
		return policyState(z, m), nil
	}
	zctx, cancel := context.WithTimeout(ctx, d.find.timeout)
	defer cancel()
	rs, err := pveapi.Resources(zctx, z.Client, "vm")
	if err != nil {
		return policyState(z, m), nil
	}
	tasks, err := pveapi.NodeTasksOfType(zctx, z.Client, ref.Node, "qmigrate", 1000)
	if err != nil {
		return policyState(z, m), nil
	}
	return drainState(z, ref.Node, m, rs, tasks), nil
}

// policyState is the maintenance of a host whose zone does not answer, as
// its policy entry m records it.
func policyState(z Zone, m catalog.HostInMaintenance) HostMaintenance {
	hm := HostMaintenance{State: MaintenanceDone, Drain: []DrainItem{}}
	for _, f := range m.Failed {
		hm.State = MaintenanceFailed
		hm.Drain = append(hm.Drain, DrainItem{VM: tenancy.VMRef{ZoneID: z.ID, VMID: f.VMID}.ID(), Status: DrainFailed, Message: f.Message})
	}
	return hm
}

// drainState is the maintenance of node from its policy entry m, the
// zone's guests rs and node's migration tasks.
func drainState(z Zone, node string, m catalog.HostInMaintenance, rs []pveapi.Resource, tasks []pveapi.TaskEntry) HostMaintenance {
	since, _ := time.Parse(time.RFC3339, m.Since)
	failed := map[int]string{}
	for _, f := range m.Failed {
		failed[f.VMID] = f.Message
	}
	byID := map[int]pveapi.Resource{}
	items := map[int]DrainItem{}
	left := 0
	for _, g := range rs {
		if g.Type != "qemu" || g.Template == 1 {
			continue
		}
		byID[g.VMID] = g
		if g.Node != node {
			continue
		}
		it := DrainItem{VM: tenancy.VMRef{ZoneID: z.ID, VMID: g.VMID}.ID(), VMName: g.Name, Status: DrainPending}
		switch msg, ok := failed[g.VMID]; {
		case ok:
			it.Status, it.Message = DrainFailed, msg
		case g.Lock == "migrate":
			it.Status = DrainMigrating
			left++
		default:
			left++
		}
		items[g.VMID] = it
	}
	for _, t := range tasks {
		vmid, err := strconv.Atoi(t.ID)
		if err != nil || t.Started.Before(since.Truncate(time.Second)) {
			continue
		}
		if _, seen := items[vmid]; seen {
			continue // still on the host: as above
		}
		g, ok := byID[vmid]
		if !ok {
			continue // deleted since
		}
		it := DrainItem{VM: tenancy.VMRef{ZoneID: z.ID, VMID: vmid}.ID(), VMName: g.Name, Status: DrainDone}
		if t.Running {
			it.Status = DrainMigrating
		}
		items[vmid] = it
	}
	hm := HostMaintenance{State: MaintenanceDone, Drain: make([]DrainItem, 0, len(items))}
	for _, id := range slices.Sorted(maps.Keys(items)) {
		hm.Drain = append(hm.Drain, items[id])
	}
	switch {
	case len(m.Failed) > 0:
		hm.State = MaintenanceFailed
	case left > 0:
		hm.State = MaintenanceDraining
	}
	return hm
}
