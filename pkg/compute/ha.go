package compute

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/flexplane/flexplane/pkg/catalog"
	"github.com/flexplane/flexplane/pkg/proxmox/pveapi"
	"github.com/flexplane/flexplane/pkg/tenancy"
)

// High availability (docs/operate/placement.md): a VM whose disk is on
// shared storage is a Proxmox HA resource (/cluster/ha/resources, state
// started) unless it was created with highAvailability false. When its
// host fails, Proxmox's HA manager fences the host and starts the VM on
// another; flexplane shows the VM UNKNOWN meanwhile (pveapi's State) and
// then RUNNING on its new host. A VM on local storage cannot be recovered
// (its disk is on the failed host), so it is never made one.
//
// Placement groups of HA VMs are written as HA resource-affinity rules
// (SPREAD: negative, PACK: positive), so that the HA manager keeps the
// group's policy when it recovers them; a best-effort SPREAD group (a node
// pool's) has no rule, since Proxmox's rules are strict and would leave
// workers unrecovered when the zone has fewer hosts than the pool.

// haSID is guest vmid's HA resource id.
func haSID(vmid int) string { return "vm:" + strconv.Itoa(vmid) }

// sharedStorage reports whether storage is shared in zone z (as node sees
// it in /cluster/resources).
func sharedStorage(ctx context.Context, z Zone, node, storage string) (bool, error) {
	rs, err := pveapi.Resources(ctx, z.Client, "storage")
	if err != nil {
		return false, err
	}
	for _, r := range rs {
		if r.Storage == storage && (r.Node == node || r.Shared == 1) {
			return r.Shared == 1, nil
		}
	}
	return false, nil
}

// enrollHA makes guest g of intent in an HA resource with the requested
// state (started or stopped) when its disk is on shared storage, then
// writes its placement group's rule. It reports whether it changed
// anything.
func (d *deps) enrollHA(ctx context.Context, z Zone, g pveapi.Resource, in *Intent, state string) (bool, error) {
	shared, err := sharedStorage(ctx, z, g.Node, in.Storage)
	if err != nil || !shared {
		return false, err
	}
	_, err = pveapi.Run(ctx, z.Client, "POST", "/cluster/ha/resources", map[string]any{
		"sid": haSID(g.VMID), "state": state, "comment": "flexplane VM " + in.Name})
	if err != nil && !strings.Contains(err.Error(), "already defined") {
		return true, fmt.Errorf("compute: add guest %d to HA: %w", g.VMID, err)
	}
	d.log.Info("ha: VM is an HA resource", "zone", z.Name, "vmid", g.VMID)
	if in.PlacementGroup != "" {
		if err := d.syncGroupRule(ctx, z, in.VDC, in.PlacementGroup); err != nil {
			d.log.Warn("ha: writing the placement group's rule failed", "zone", z.Name, "group", in.PlacementGroup, "err", err)
		}
	}
	return true, nil
}

// groupRuleID is the id of the HA rule of placement group name (its
// catalog name, <vdc>.<name>): a Proxmox config id, unique per group.
func groupRuleID(name string) string {
	sum := sha256.Sum256([]byte(name))
	_, short, _ := strings.Cut(name, ".")
	var b strings.Builder
	for _, r := range short {
		if r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '-' {
			b.WriteRune(r)
		}
	}
	return "fp-pg-" + b.String() + "-" + hex.EncodeToString(sum[:4])
}

// syncGroupRule writes the HA rule of vdc's placement group short in z:
// its HA VMs in the zone, apart (SPREAD) or together (PACK); no rule for a
// best-effort group or while fewer than two of its VMs are HA resources.
func (d *deps) syncGroupRule(ctx context.Context, z Zone, vdc, short string) error {
	name := catalog.PlacementGroupName(vdc, short)
	g, err := catalog.Get[*catalog.PlacementGroup](ctx, d.cfg.Catalog, name)
	if errors.Is(err, catalog.ErrNotFound) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("compute: read placement group %s: %w", name, err)
	}
	members, err := zoneGroupMembers(ctx, z, vdc)
	if err != nil {
		return err
	}
	guests, err := pveapi.Guests(ctx, z.Client)
	if err != nil {
		return err
	}
	ha := map[int]bool{}
	for _, r := range guests {
		ha[r.VMID] = r.HAState != ""
	}
	var sids []string
	for _, m := range members[short] {
		if ha[m.VMID] {
			sids = append(sids, haSID(m.VMID))
		}
	}
	slices.Sort(sids)
	id := groupRuleID(name)
	affinity := "negative"
	if PlacementPolicy(g.Policy) == PolicyPack {
		affinity = "positive"
	}
	var rules []struct {
		Rule string `json:"rule"`
	}
	if err := z.Client.Get(ctx, "/cluster/ha/rules", &rules); err != nil {
		return fmt.Errorf("compute: read HA rules: %w", err)
	}
	exists := slices.ContainsFunc(rules, func(r struct {
		Rule string `json:"rule"`
	}) bool {
		return r.Rule == id
	})
	want := len(sids) >= 2 && !g.BestEffort
	switch {
	case !want && exists:
		_, err = pveapi.Run(ctx, z.Client, "DELETE", "/cluster/ha/rules/"+id, nil)
	case want && exists:
		_, err = pveapi.Run(ctx, z.Client, "PUT", "/cluster/ha/rules/"+id, map[string]any{
			"type": "resource-affinity", "affinity": affinity, "resources": strings.Join(sids, ",")})
	case want:
		_, err = pveapi.Run(ctx, z.Client, "POST", "/cluster/ha/rules", map[string]any{
			"rule": id, "type": "resource-affinity", "affinity": affinity, "resources": strings.Join(sids, ","),
			"comment": "flexplane placement group " + name})
	}
	if err != nil {
		return fmt.Errorf("compute: write HA rule %s: %w", id, err)
	}
	return nil
}

// HARecovery is a VM Proxmox's HA manager started on another host after
// its host failed.
type HARecovery struct {
	// VM is the VM's id, VDC its VDC, Zone the zone's name.
	VM, VDC, Zone string
	// From is the failed host, To the host it runs on now.
	From, To string
}

// haWatch remembers where Recover last saw each HA VM and in which HA
// state, to tell a recovery: a VM whose host changed while it was on a
// failed host (HA state fence or recovery, or its status unknown) was
// recovered, not migrated. It is this process's memory only: a replica
// that takes over the passes starts afresh (a recovery under way then is
// not told).
type haWatch struct {
	mu   sync.Mutex
	last map[tenancy.VMRef]haSeen // what the last pass saw of each HA VM; protected by mu
}

type haSeen struct {
	node string
	lost bool // on a failed host: HA state fence or recovery, or status unknown
}

// observe notes zone z's guests and tells d's HARecovered of each HA VM
// that left a failed host since the last pass.
func (w *haWatch) observe(ctx context.Context, d *deps, z Zone, guests []pveapi.Resource) {
	var told []HARecovery
	w.mu.Lock()
	seen := map[tenancy.VMRef]bool{}
	for _, g := range guests {
		if g.HAState == "" || !g.HasTag(tenancy.ManagedTag) || g.Template == 1 {
			continue
		}
		key := tenancy.VMRef{ZoneID: z.ID, VMID: g.VMID}
		seen[key] = true
		lost := g.HAState == "fence" || g.HAState == "recovery" || g.Status == "unknown"
		if prev, ok := w.last[key]; ok && prev.lost && prev.node != g.Node && !lost {
			vdc, _ := tenancy.VDCOf(g.Tags())
			id := key.ID()
			if was, ok := wasOf(g.Tags()); ok {
				id = was.ID()
			}
			told = append(told, HARecovery{VM: id, VDC: vdc, Zone: z.Name, From: prev.node, To: g.Node})
		}
		now := haSeen{node: g.Node, lost: lost}
		if prev, ok := w.last[key]; ok && prev.lost && lost {
			now.node = prev.node // still the failed host while it is recovered elsewhere
		}
		w.last[key] = now
	}
	for key := range w.last {
		if key.ZoneID == z.ID && !seen[key] {
			delete(w.last, key)
		}
	}
	w.mu.Unlock()
	for _, r := range told {
		d.log.Info("ha: VM recovered on another host", "vm", r.VM, "vdc", r.VDC, "zone", r.Zone, "from", r.From, "to", r.To)
		if d.cfg.HARecovered != nil {
			d.cfg.HARecovered(ctx, r)
		}
	}
}
