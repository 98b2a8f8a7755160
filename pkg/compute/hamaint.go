package compute

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/flexplane/flexplane/pkg/catalog"
	"github.com/flexplane/flexplane/pkg/proxmox/pveapi"
	"github.com/flexplane/flexplane/pkg/tenancy"
)

// Maintenance and HA: Proxmox's HA manager does not know flexplane's host
// maintenance, and Proxmox has no node maintenance mode on its API (only
// ha-manager's crm-command). So that the manager neither recovers nor
// moves an HA VM onto a host in maintenance, flexplane writes one strict
// node-affinity rule per zone (maintenanceRuleID) that allows the zone's
// hosts not in maintenance to flexplane's HA VMs, while a host of the zone
// is in maintenance; it is removed when none is. Proxmox lets an HA
// resource be in one node-affinity rule only: a VM an operator put in a
// node-affinity rule of their own is left out.

// maintenanceRuleID is the id of a zone's maintenance rule.
const maintenanceRuleID = "fp-maintenance"

// haRule is a rule as /cluster/ha/rules lists it.
type haRule struct {
	Rule      string `json:"rule"`
	Type      string `json:"type"`
	Resources string `json:"resources"`
	Nodes     string `json:"nodes"`
	Disable   int    `json:"disable"`
}

// syncMaintenanceRule writes zone z's maintenance rule for its hosts in
// maintenance, or removes it when there are none, no host is left to allow
// or no HA VM of flexplane's to name. It returns the HA resources the rule
// names.
func (d *deps) syncMaintenanceRule(ctx context.Context, z Zone, inMaintenance map[string]bool) (map[string]bool, error) {
	var rules []haRule
	if err := z.Client.Get(ctx, "/cluster/ha/rules", &rules); err != nil {
		return nil, fmt.Errorf("compute: read HA rules: %w", err)
	}
	var current *haRule
	taken := map[string]bool{} // resources in an operator's node-affinity rule
	for i, r := range rules {
		switch {
		case r.Rule == maintenanceRuleID:
			current = &rules[i]
		case r.Type == "node-affinity":
			for _, sid := range strings.Split(r.Resources, ",") {
				taken[sid] = true
			}
		}
	}
	var sids, nodes []string
	if len(inMaintenance) > 0 {
		rs, err := pveapi.Resources(ctx, z.Client, "")
		if err != nil {
			return nil, fmt.Errorf("compute: read the zone's resources: %w", err)
		}
		for _, r := range rs {
			switch {
			case r.Type == "node" && !inMaintenance[r.Node]:
				nodes = append(nodes, r.Node)
			case r.Type == "qemu" && r.HAState != "" && r.HasTag(tenancy.ManagedTag) && !taken[haSID(r.VMID)]:
				sids = append(sids, haSID(r.VMID))
			}
		}
	}
	slices.Sort(sids)
	slices.Sort(nodes)
	want := len(sids) > 0 && len(nodes) > 0
	params := map[string]any{"type": "node-affinity", "strict": 1, "resources": strings.Join(sids, ","), "nodes": strings.Join(nodes, ",")}
	named := map[string]bool{}
	if want {
		for _, sid := range sids {
			named[sid] = true
		}
	}
	var err error
	switch {
	case !want && current != nil:
		_, err = pveapi.Run(ctx, z.Client, "DELETE", "/cluster/ha/rules/"+maintenanceRuleID, nil)
	case !want:
		return named, nil
	case current == nil:
		params["rule"] = maintenanceRuleID
		params["comment"] = "flexplane: hosts in maintenance are excluded"
		_, err = pveapi.Run(ctx, z.Client, "POST", "/cluster/ha/rules", params)
	case current.Resources != params["resources"] || current.Nodes != params["nodes"] || current.Disable != 0:
		params["disable"] = 0
		_, err = pveapi.Run(ctx, z.Client, "PUT", "/cluster/ha/rules/"+maintenanceRuleID, params)
	default:
		return named, nil
	}
	if err != nil {
		return nil, fmt.Errorf("compute: write HA rule %s: %w", maintenanceRuleID, err)
	}
	d.log.Info("ha: maintenance rule written", "zone", z.Name, "allowed", nodes, "resources", len(sids))
	return named, nil
}

// maintenanceOf is the set of hosts in maintenance on policy p.
func maintenanceOf(p *catalog.ZonePolicy) map[string]bool {
	out := map[string]bool{}
	if p != nil {
		for _, m := range p.Maintenance {
			out[m.Host] = true
		}
	}
	return out
}
