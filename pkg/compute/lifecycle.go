package compute

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/flexplane/flexplane/pkg/catalog"
	"github.com/flexplane/flexplane/pkg/network/ipam"
	"github.com/flexplane/flexplane/pkg/proxmox/pveapi"
	"github.com/flexplane/flexplane/pkg/tenancy"
	"github.com/flexplane/flexplane/pkg/tenancy/quota"
)

var powerPaths = map[OpKind]string{OpStart: "start", OpStop: "stop", OpShutdown: "shutdown", OpReboot: "reboot"}

// StartVM starts VM id of vdc; the operation follows the Proxmox task.
func (s *Service) StartVM(ctx context.Context, vdc, id string) (*Operation, error) {
	return s.power(ctx, vdc, id, OpStart)
}

// StopVM stops VM id of vdc at once (power off).
func (s *Service) StopVM(ctx context.Context, vdc, id string) (*Operation, error) {
	return s.power(ctx, vdc, id, OpStop)
}

// ShutdownVM asks the guest OS of VM id of vdc to shut down.
func (s *Service) ShutdownVM(ctx context.Context, vdc, id string) (*Operation, error) {
	return s.power(ctx, vdc, id, OpShutdown)
}

// RebootVM reboots VM id of vdc.
func (s *Service) RebootVM(ctx context.Context, vdc, id string) (*Operation, error) {
	return s.power(ctx, vdc, id, OpReboot)
}

func (s *Service) power(ctx context.Context, vdc, id string, kind OpKind) (*Operation, error) {
	z, g, _, err := s.lookup(ctx, vdc, id)
	if err != nil {
		return nil, err
	}
	if isCreating(g) {
		return nil, newError(KindConflict, "the VM is still being created")
	}
	var upid string
	if err := z.Client.Post(ctx, fmt.Sprintf("/nodes/%s/qemu/%d/status/%s", g.Node, g.VMID, powerPaths[kind]), map[string]any{}, &upid); err != nil {
		return nil, conflict(err)
	}
	op := Operation{ID: taskOpID(z.ID, g.VMID, kind, upid), Kind: kind, State: OpRunning, Step: "qm" + powerPaths[kind],
		VMID: id, Started: time.Now()}
	return &op, nil
}

// DeleteVM stops VM id of vdc if it runs, destroys it with its disks and
// releases its IPAM addresses; it returns when that is done. A VM whose
// create this process is running answers CONFLICT.
func (s *Service) DeleteVM(ctx context.Context, vdc, id string) (*Operation, error) {
	z, g, in, err := s.lookup(ctx, vdc, id)
	if err != nil {
		return nil, err
	}
	if s.isLive(z, g.VMID) {
		return nil, newError(KindConflict, "the VM is still being created")
	}
	started := time.Now()
	upid, err := s.destroy(ctx, z, g, in)
	if err != nil {
		return nil, internal("deleting the VM failed", err)
	}
	op := Operation{ID: taskOpID(z.ID, g.VMID, OpDelete, upid), Kind: OpDelete, State: OpSucceeded, Step: "qmdestroy",
		VMID: id, Started: started, Updated: time.Now()}
	s.record(vdc, z.Name, op)
	return &op, nil
}

var macRE = regexp.MustCompile(`(?i)([0-9a-f]{2}:){5}[0-9a-f]{2}`)

// destroy stops, purges and releases the addresses of guest g.
func (s *Service) destroy(ctx context.Context, z Zone, g pveapi.Resource, in *Intent) (string, error) {
	var macs []string
	var cicustom string
	base := fmt.Sprintf("/nodes/%s/qemu/%d", g.Node, g.VMID)
	for range maxSteps {
		cur, ok, err := pveapi.FindGuest(ctx, z.Client, g.VMID)
		if err != nil {
			return "", err
		}
		if !ok {
			break
		}
		if cur.Lock != "" && cur.Lock != "destroyed" {
			sleep(ctx, pveapi.PollInterval)
			continue
		}
		if cfg, err := pveapi.GuestConfig(ctx, z.Client, g.Node, g.VMID); err == nil {
			cicustom = cfg.Str("cicustom")
			for i := range MaxNICs {
				if m := macRE.FindString(cfg.Str("net" + strconv.Itoa(i))); m != "" {
					macs = append(macs, m)
				}
			}
		}
		if cur.Status == "running" {
			if _, err := pveapi.Run(ctx, z.Client, "POST", base+"/status/stop", map[string]any{}); err != nil && !retryable(err) {
				return "", err
			}
			continue
		}
		upid, err := pveapi.Run(ctx, z.Client, "DELETE", base, map[string]any{"purge": 1, "destroy-unreferenced-disks": 1})
		if retryable(err) || (err != nil && strings.Contains(err.Error(), "running")) {
			continue
		}
		if err != nil && !pveapi.IsNotFound(err) {
			return "", err
		}
		if in != nil {
			for _, n := range in.NICs {
				macs = append(macs, n.MAC)
			}
		}
		if err := ipam.ReleaseMACs(ctx, z.Client, macs); err != nil {
			return upid, err
		}
		if err := s.deleteUserData(ctx, z, g.Node, g.VMID, cicustom); err != nil {
			return upid, err
		}
		if in != nil {
			if err := s.quota.Release(ctx, in.VDC, in.Op); err != nil {
				s.log.Warn("releasing quota", "op", in.Op, "err", err)
			}
		}
		s.log.Info("VM deleted", "zone", z.Name, "vmid", g.VMID)
		return upid, nil
	}
	return "", fmt.Errorf("compute: delete %d: gave up", g.VMID)
}

// cleanup deletes the guest of a create that cannot be finished and
// releases its addresses.
func (s *Service) cleanup(ctx context.Context, z Zone, vmid int, in *Intent) error {
	g, ok, err := pveapi.FindGuest(ctx, z.Client, vmid)
	if err != nil {
		return err
	}
	if ok {
		cfg, err := pveapi.GuestConfig(ctx, z.Client, g.Node, vmid)
		if err != nil && !pveapi.IsNotFound(err) {
			return err
		}
		if got, _ := ParseIntent(cfg.Str("description")); got != nil && got.Op == in.Op {
			if _, err := s.destroy(ctx, z, g, in); err != nil {
				return err
			}
			return nil
		}
	}
	s.release(ctx, z, in)
	return nil
}

// Recover looks at every zone once: each unfinished create that no
// runner of this process works on and whose intent is older than
// StaleAfter is finished from its intent (or, if that fails, its guest is
// deleted and its addresses released); flexplane IPAM mappings whose MAC
// no guest has are released once they have been seen so for OrphanGrace.
func (s *Service) Recover(ctx context.Context) error {
	var errs []error
	onGuests := map[string]bool{} // intent ops a guest carries
	listed := map[string]bool{}   // zone IDs whose guests were all read
	for _, z := range s.cfg.Zones.Zones(ctx) {
		if err := s.recoverZone(ctx, z, onGuests); err != nil {
			errs = append(errs, fmt.Errorf("zone %s: %w", z.Name, err))
			continue
		}
		listed[z.ID] = true
	}
	if err := s.releaseStale(ctx, onGuests, listed); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// releaseStale drops the quota reservations of creates that ended before
// their guest existed without releasing them (their process killed between
// the reservation and the clone): older than StaleAfter, of a zone whose
// guests were all read and none of which carries the create's intent, and
// of no create this process runs. Until then they count, as the create
// would, and expire after QuotaTTL at the latest.
func (s *Service) releaseStale(ctx context.Context, onGuests, listed map[string]bool) error {
	vdcs, err := catalog.List[*catalog.VDC](ctx, s.cfg.Catalog)
	if err != nil {
		return fmt.Errorf("stale reservations: %w", err)
	}
	ttl := cmp.Or(s.cfg.QuotaTTL, quota.DefaultTTL)
	var errs []error
	for _, v := range vdcs {
		for _, r := range v.Status.Reservations {
			created := r.Expires.Add(-ttl)
			if r.Snapshot != "" || !listed[r.Zone] || onGuests[r.ID] || time.Since(created) < s.cfg.StaleAfter || s.createLive(r.ID) {
				continue
			}
			s.log.Info("releasing the quota of a create that died before its guest existed", "vdc", v.Name, "op", r.ID, "reserved", created)
			if err := s.quota.Release(ctx, v.Name, r.ID); err != nil {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}

// indexMovedGuests refreshes the index of guests that moved across zones
// from every zone in reach, and nothing else.
func (s *Service) indexMovedGuests(ctx context.Context) error {
	var errs []error
	for _, z := range s.cfg.Zones.Zones(ctx) {
		guests, err := pveapi.Guests(ctx, z.Client)
		if err != nil {
			errs = append(errs, fmt.Errorf("zone %s: %w", z.Name, err))
			continue
		}
		s.indexMoved(z, guests)
	}
	return errors.Join(errs...)
}

func (s *Service) recoverZone(ctx context.Context, z Zone, onGuests map[string]bool) error {
	guests, err := pveapi.Guests(ctx, z.Client)
	if err != nil {
		return err
	}
	s.indexMoved(z, guests)
	used := map[string]bool{}
	for _, g := range guests {
		if !g.HasTag(tenancy.ManagedTag) || g.Template == 1 {
			continue
		}
		cfg, err := pveapi.GuestConfig(ctx, z.Client, g.Node, g.VMID)
		if err != nil {
			continue // gone meanwhile
		}
		for i := range MaxNICs {
			if m := macRE.FindString(cfg.Str("net" + strconv.Itoa(i))); m != "" {
				used[strings.ToUpper(m)] = true
			}
		}
		in, ok := ParseIntent(cfg.Str("description"))
		if !ok {
			continue
		}
		onGuests[in.Op] = true
		for _, n := range in.NICs {
			used[strings.ToUpper(n.MAC)] = true
		}
		if in.Move != nil && g.HasTag(incomingTag) {
			g.RawTags = cfg.Str("tags")
			s.recoverMove(ctx, z, g, in)
			continue
		}
		if !isCreating(g) || s.isLive(z, g.VMID) || time.Since(in.Created) < s.cfg.StaleAfter {
			continue
		}
		s.adopt(ctx, z, g.VMID, in)
	}
	return s.releaseOrphans(ctx, z, used)
}

// adopt finishes an unfinished create found on a guest, or cleans it up.
func (s *Service) adopt(ctx context.Context, z Zone, vmid int, in *Intent) {
	s.log.Info("recovering an unfinished create", "vm", in.Name, "vdc", in.VDC, "zone", z.Name, "vmid", vmid, "op", in.Op)
	id := createOpID(z.ID, vmid, in.Op)
	s.record(in.VDC, z.Name, Operation{ID: id, Kind: OpCreate, State: OpRunning, Step: "recover",
		VMID: tenancy.VMRef{ZoneID: z.ID, VMID: vmid}.ID(), Started: in.Created})
	s.setLive(z, vmid, in.Op)
	defer s.clearLive(z, vmid)
	// The guest exists: the phases from configure on finish it (they
	// wait for a clone still running).
	sc := &createScope{z: z, in: in, opID: id, vmid: vmid}
	phases := from(s.createPhases(), "configure")
	var err error
	for range 3 {
		sc.assigned = false
		if err = runPhases(ctx, s.engine, id, in.Op, phases, sc); err == nil || errors.Is(err, errGone) || ctx.Err() != nil {
			break
		}
	}
	if errors.Is(err, errGone) {
		// Someone else finished or removed it; nothing is ours to undo.
		s.finishOp(id, nil)
		return
	}
	s.conclude(ctx, z, vmid, in, id, err)
}

func (s *Service) releaseOrphans(ctx context.Context, z Zone, used map[string]bool) error {
	maps, err := ipam.Mappings(ctx, z.Client)
	if err != nil {
		return err
	}
	now := time.Now()
	var errs []error
	seen := map[string]bool{}
	for _, m := range maps {
		mac := strings.ToUpper(m.MAC)
		if m.Gateway != 0 || !ipam.IsFlexplaneMAC(mac) || used[mac] {
			continue
		}
		key := z.ID + "/" + m.Zone + "/" + m.IP + "/" + mac
		first, pending := s.addrs.seen(key, mac, now)
		if pending {
			continue
		}
		seen[key] = true
		if now.Sub(first) < s.cfg.OrphanGrace {
			continue
		}
		s.log.Info("releasing an orphaned address", "zone", z.Name, "ip", m.IP, "mac", mac)
		errs = append(errs, ipam.ReleaseMACs(ctx, z.Client, []string{mac}))
	}
	s.addrs.forget(z.ID, seen)
	return errors.Join(errs...)
}
