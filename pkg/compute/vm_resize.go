package compute

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/flexplane/flexplane/pkg/catalog"
	"github.com/flexplane/flexplane/pkg/proxmox/pveapi"
	"github.com/flexplane/flexplane/pkg/tenancy/quota"
)

// OpResize is the kind of a resizeVM operation.
const OpResize OpKind = "RESIZE_VM"

// resizeTasks are the Proxmox task types a resize's operation follows: the
// config write that hot-plugs the change (or changes a stopped VM), or the
// reboot that applies it.
var resizeTasks = map[string]bool{"qmconfig": true, "qmreboot": true}

// ResizeVMInput is what resizeVM asks for.
type ResizeVMInput struct {
	// ID is the VM's id.
	ID string
	// ComputeProfile names the VM's new size.
	ComputeProfile string
	// Reboot allows the reboot a running VM needs when its configuration
	// cannot take the change live.
	Reboot bool
}

// ResizeIntent records, in the VM's intent, a resize that reboots the VM
// until the reboot has applied it, so that whoever finds it unfinished
// (Recover) reboots the VM and clears it.
type ResizeIntent struct {
	// Op is the resize's id (its quota reservation's too).
	Op      string    `json:"op"`
	Started time.Time `json:"started"`
}

// ResizeVM gives VM in.ID of vdc the vCPUs and memory of compute profile
// in.ComputeProfile: a stopped VM takes them at once; a running one takes
// them live where its configuration allows hotplug (vCPUs: hotplug
// includes cpu and the vCPUs fit its cores × sockets; memory: hotplug
// includes memory and NUMA is on), else on a reboot, which in.Reboot
// must allow (CONFLICT saying why otherwise). What it grows by is reserved
// against the VDC's quota first; the VM's intent records the new size.
// The operation follows the config write, or the reboot.
func (s *Service) ResizeVM(ctx context.Context, vdc string, in ResizeVMInput) (*Operation, error) {
	d := s.d
	sc := &resizeScope{deps: d, ch: diskChange{d: d, vdc: vdc}, vdc: vdc, in: in, op: newOpID()}
	err := runPhases(ctx, d.eng, "", sc.op, resizePhases(), sc)
	if err != nil || sc.reason == "" {
		sc.ch.release()
	}
	if err != nil {
		return nil, cause(err)
	}
	z, g := sc.vm.z, sc.vm.g
	if sc.reason != "" {
		d.eng.setLive(z, g.VMID, sc.op)
		d.eng.spawn(func(ctx context.Context) {
			defer d.eng.clearLive(z, g.VMID)
			if err := pveapi.Wait(ctx, z.Client, sc.upid); err != nil && ctx.Err() != nil {
				return // shutting down: the marker stays for Recover
			}
			finishResize(ctx, d, z, g.Node, g.VMID, vdc, sc.op)
		})
	}
	return taskOp(z, g, in.ID, OpResize, sc.upid), nil
}

// resizeScope is what the phases of a resize work on.
type resizeScope struct {
	*deps
	ch  diskChange // the quota reservation of the growth
	vdc string
	in  ResizeVMInput
	op  string // the resize's id
	// vm, intent and profile: the VM, its intent and the new profile
	// (check).
	vm      diskVM
	intent  *Intent
	profile *catalog.ComputeProfile
	// changes, del and grow: the config change, the keys it deletes and
	// what the VM grows by (plan); reason says why it needs a reboot (""
	// when it needs none).
	changes map[string]any
	del     []string
	grow    quota.Usage
	reason  string
	// upid is the task the operation follows (apply, reboot).
	upid string
}

// resizePhases are the phases of a resize, in order: check (the VM:
// created, not locked, with its intent; the profile), plan (the config
// change, and whether it needs a reboot: refused unless allowed), reserve
// (the growth against the VDC's quota), apply (the change with the new
// size in the intent, and the marker if it reboots, conditional on the
// digest check read), reboot (the reboot, if needed). Once the reboot has
// ended, the marker is cleared and the reservation released (finishResize;
// Recover does it for a resize whose process died).
func resizePhases() []phase[resizeScope] {
	return []phase[resizeScope]{
		step("check", (*resizeScope).check),
		step("plan", (*resizeScope).plan),
		step("reserve", (*resizeScope).reserve),
		step("apply", (*resizeScope).apply),
		step("reboot", (*resizeScope).reboot),
	}
}

// check finds the VM and the profile.
func (sc *resizeScope) check(ctx context.Context) error {
	vm, err := findDiskVM(ctx, sc.deps, sc.vdc, sc.in.ID)
	if err != nil {
		return err
	}
	sc.vm = vm
	in, ok := ParseIntent(vm.cfg.Str("description"))
	if !ok {
		return newError(KindConflict, "the VM carries no flexplane intent to record its size in")
	}
	if in.Resize != nil {
		return newError(KindConflict, "the VM is being resized")
	}
	sc.intent = in
	if sc.profile, err = catalog.Get[*catalog.ComputeProfile](ctx, sc.cfg.Catalog, sc.in.ComputeProfile); err != nil {
		return catalogInput("computeProfile", "compute profile", sc.in.ComputeProfile, err)
	}
	return nil
}

// vmSize is a VM's CPU topology and memory as its configuration says.
type vmSize struct {
	cores, sockets, vcpus, memoryMiB int
}

// sizeOf reads a VM's size off its configuration (Proxmox's defaults
// for what it leaves out: 1 core, 1 socket, vCPUs = cores × sockets,
// 512 MiB).
func sizeOf(cfg pveapi.Config) vmSize {
	s := vmSize{cores: max(cfg.Int("cores"), 1), sockets: max(cfg.Int("sockets"), 1), vcpus: cfg.Int("vcpus")}
	if s.vcpus <= 0 {
		s.vcpus = s.cores * s.sockets
	}
	mem := cfg.Str("memory")
	if strings.Contains(mem, "=") {
		mem = propOf(mem, "current")
	}
	s.memoryMiB, _ = strconv.Atoi(mem)
	if s.memoryMiB <= 0 {
		s.memoryMiB = 512
	}
	return s
}

// hotplugs reports whether the configuration's hotplug option names
// feature (network, disk, cpu, memory, usb): "0" names none, "1" (and
// the default) network, disk and usb.
func hotplugs(cfg pveapi.Config, feature string) bool {
	v := cfg.Str("hotplug")
	if _, set := cfg["hotplug"]; !set || v == "1" {
		v = "network,disk,usb"
	}
	for f := range strings.SplitSeq(v, ",") {
		if strings.TrimSpace(f) == feature {
			return true
		}
	}
	return false
}

// plan decides the config change and whether it needs a reboot.
func (sc *resizeScope) plan(context.Context) error {
	cur, cfg := sizeOf(sc.vm.cfg), sc.vm.cfg
	vcpus, mem := sc.profile.VCPUs, sc.profile.MemoryMiB
	running := sc.vm.g.Status == "running"
	sc.changes = map[string]any{}
	var why []string
	if vcpus != cur.vcpus {
		switch {
		case running && hotplugs(cfg, "cpu") && vcpus <= cur.cores*cur.sockets:
			sc.changes["vcpus"] = vcpus
		default:
			sc.changes["cores"] = vcpus
			for _, k := range []string{"sockets", "vcpus"} {
				if _, set := cfg[k]; set {
					sc.del = append(sc.del, k)
				}
			}
			if running {
				switch {
				case !hotplugs(cfg, "cpu"):
					why = append(why, "its configuration does not allow CPU hotplug")
				default:
					why = append(why, fmt.Sprintf("%d vCPUs exceed its %d cores × %d sockets", vcpus, cur.cores, cur.sockets))
				}
			}
		}
	}
	if mem != cur.memoryMiB {
		sc.changes["memory"] = mem
		if running && !(hotplugs(cfg, "memory") && cfg.Int("numa") == 1) {
			why = append(why, "its configuration does not allow memory hotplug (hotplug memory with NUMA on)")
		}
	}
	if len(why) > 0 {
		sc.reason = "the running VM must be rebooted to take the new size: " + strings.Join(why, "; ")
		if !sc.in.Reboot {
			return &Error{Kind: KindConflict, Field: "reboot", Message: sc.reason + "; allow it with reboot: true"}
		}
	}
	sc.grow = quota.Usage{VCPUs: max(vcpus-cur.vcpus, 0), MemoryMiB: max(mem-cur.memoryMiB, 0)}
	return nil
}

// reserve reserves the growth against the VDC's quota.
func (sc *resizeScope) reserve(ctx context.Context) error {
	if sc.grow == (quota.Usage{}) {
		return nil
	}
	sc.ch.resID = "resize-" + sc.op
	if err := sc.quota.ReserveResources(ctx, sc.vdc, sc.ch.resID, sc.vm.z.ID, "resize", sc.grow); err != nil {
		sc.ch.resID = ""
		return quotaError(sc.vdc, err)
	}
	return nil
}

// apply writes the change, the intent's new size and, when it reboots,
// the marker, in one conditional config write.
func (sc *resizeScope) apply(ctx context.Context) error {
	in := *sc.intent
	in.VCPUs, in.MemoryMiB, in.ComputeProfile = sc.profile.VCPUs, sc.profile.MemoryMiB, sc.profile.Name
	if sc.reason != "" {
		in.Resize = &ResizeIntent{Op: sc.op, Started: time.Now().UTC()}
	}
	params := map[string]any{"description": in.Description(), "digest": sc.vm.cfg.Digest()}
	for k, v := range sc.changes {
		params[k] = v
	}
	if len(sc.del) > 0 {
		params["delete"] = strings.Join(sc.del, ",")
	}
	upid, err := pveapi.Run(ctx, sc.vm.z.Client, "POST", sc.vm.path()+"/config", params)
	if err != nil {
		if retryable(err) {
			return &Error{Kind: KindConflict, Message: "the VM's configuration changed meanwhile; try again", Cause: err}
		}
		return internal("Proxmox refused the VM's new size", err)
	}
	sc.upid = upid
	return nil
}

// reboot reboots the VM when the change needs it.
func (sc *resizeScope) reboot(ctx context.Context) error {
	if sc.reason == "" {
		return nil
	}
	if err := sc.vm.z.Client.Post(ctx, sc.vm.path()+"/status/reboot", map[string]any{}, &sc.upid); err != nil {
		return conflict(err)
	}
	return nil
}

// finishResize ends resize op of guest vmid of vdc on node of zone z once
// its reboot has ended: the marker is cleared from the intent
// (conditionally: a concurrent writer makes it read again) and the quota
// reservation released (the pool counts the new size).
func finishResize(ctx context.Context, d *deps, z Zone, node string, vmid int, vdc, op string) {
	path := fmt.Sprintf("/nodes/%s/qemu/%d", node, vmid)
	for range maxSteps {
		cfg, err := pveapi.GuestConfig(ctx, z.Client, node, vmid)
		if err != nil {
			d.log.Warn("finishing a resize", "vmid", vmid, "op", op, "err", err)
			return
		}
		in, ok := ParseIntent(cfg.Str("description"))
		if !ok || in.Resize == nil || in.Resize.Op != op {
			break
		}
		in.Resize = nil
		_, err = pveapi.Run(ctx, z.Client, "POST", path+"/config", map[string]any{"description": in.Description(), "digest": cfg.Digest()})
		if err == nil {
			break
		}
		if !retryable(err) {
			d.log.Warn("finishing a resize", "vmid", vmid, "op", op, "err", err)
			return
		}
	}
	if err := d.quota.Release(ctx, vdc, "resize-"+op); err != nil {
		d.log.Warn("releasing quota", "vdc", vdc, "op", op, "err", err)
	}
}

// pendingSize reports whether guest vmid on node has a change of its size
// waiting for a reboot (Proxmox's pending section).
func pendingSize(ctx context.Context, z Zone, node string, vmid int) (bool, error) {
	var entries []struct {
		Key     string `json:"key"`
		Pending any    `json:"pending"`
		Delete  int    `json:"delete"`
	}
	if err := z.Client.Get(ctx, fmt.Sprintf("/nodes/%s/qemu/%d/pending", node, vmid), &entries); err != nil {
		return false, err
	}
	for _, e := range entries {
		switch e.Key {
		case "cores", "sockets", "vcpus", "memory":
			if e.Pending != nil || e.Delete != 0 {
				return true, nil
			}
		}
	}
	return false, nil
}

// recoverResize is the resize's recovery hook: a resize whose process died
// before its reboot ended is rebooted if its change still waits for it,
// then finished.
func recoverResize(ctx context.Context, d *deps, z Zone, g pveapi.Resource, in *Intent) {
	op := in.Resize.Op
	d.log.Info("recovering an unfinished resize", "vm", in.Name, "vdc", in.VDC, "zone", z.Name, "vmid", g.VMID, "op", op)
	d.eng.setLive(z, g.VMID, op)
	defer d.eng.clearLive(z, g.VMID)
	pending, err := pendingSize(ctx, z, g.Node, g.VMID)
	if err != nil {
		d.log.Warn("recovering a resize", "vmid", g.VMID, "err", err)
		return
	}
	if pending && g.Status == "running" && g.Lock == "" {
		if _, err := pveapi.Run(ctx, z.Client, "POST", fmt.Sprintf("/nodes/%s/qemu/%d/status/reboot", g.Node, g.VMID), map[string]any{}); err != nil {
			d.log.Warn("recovering a resize: reboot", "vmid", g.VMID, "err", err)
			return
		}
	}
	finishResize(ctx, d, z, g.Node, g.VMID, in.VDC, op)
}

// resizeHook is Recover's hook for resizes: it takes a guest whose intent
// carries a resize's marker older than StaleAfter that no runner of this
// process works on.
func resizeHook(d *deps) recoveryHook {
	return recoveryHook{
		name: "resize",
		takes: func(z Zone, g pveapi.Resource, in *Intent) bool {
			return in.Resize != nil && !isCreating(g) && !d.eng.isLive(z, g.VMID) && time.Since(in.Resize.Started) >= d.cfg.StaleAfter
		},
		watch: func(_ pveapi.Resource, in *Intent) bool { return in != nil && in.Resize != nil },
		run: func(ctx context.Context, z Zone, g pveapi.Resource, _ pveapi.Config, in *Intent) {
			recoverResize(ctx, d, z, g, in)
		},
	}
}
