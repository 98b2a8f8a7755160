package pveapi

import (
	"context"
	"fmt"
	"net/url"

	proxmox "github.com/luthermonson/go-proxmox"
)

// FirewallGroup is a security group of a cluster's firewall
// (/cluster/firewall/groups).
type FirewallGroup struct {
	Name    string `json:"group"`
	Comment string `json:"comment"`
}

// FirewallRule is a rule of a security group or a guest's firewall. Type
// is in, out or group; Action ACCEPT, DROP, REJECT or a group's name.
type FirewallRule struct {
	Pos     int    `json:"pos"`
	Type    string `json:"type"`
	Action  string `json:"action"`
	Enable  int    `json:"enable"`
	Proto   string `json:"proto,omitempty"`
	DPort   string `json:"dport,omitempty"`
	Source  string `json:"source,omitempty"`
	Dest    string `json:"dest,omitempty"`
	Comment string `json:"comment,omitempty"`
}

// Params are the rule's parameters for a create (without its position).
func (r FirewallRule) Params() map[string]any {
	p := map[string]any{"type": r.Type, "action": r.Action, "enable": r.Enable}
	for k, v := range map[string]string{"proto": r.Proto, "dport": r.DPort, "source": r.Source, "dest": r.Dest, "comment": r.Comment} {
		if v != "" {
			p[k] = v
		}
	}
	return p
}

// Same reports whether r and o are the same rule, wherever they stand.
func (r FirewallRule) Same(o FirewallRule) bool {
	r.Pos, o.Pos = 0, 0
	return r == o
}

// IPSet is an IP set of a cluster's firewall (/cluster/firewall/ipset).
type IPSet struct {
	Name    string `json:"name"`
	Comment string `json:"comment"`
}

// IPSetEntry is an entry of an IP set: an address or network, NoMatch
// excluding it.
type IPSetEntry struct {
	CIDR    string `json:"cidr"`
	NoMatch Bool   `json:"nomatch,omitempty"`
}

// Bool is a Proxmox boolean, sent as 0 or 1.
type Bool int

// FirewallOptions are a guest's firewall options as flexplane sets them.
type FirewallOptions struct {
	Enable    int    `json:"enable"`
	IPFilter  int    `json:"ipfilter"`
	DHCP      int    `json:"dhcp"`
	PolicyIn  string `json:"policy_in"`
	PolicyOut string `json:"policy_out"`
}

// FirewallGroups lists the cluster's security groups.
func FirewallGroups(ctx context.Context, c *proxmox.Client) ([]FirewallGroup, error) {
	var out []FirewallGroup
	if err := c.Get(ctx, "/cluster/firewall/groups", &out); err != nil {
		return nil, fmt.Errorf("pveapi: security groups: %w", err)
	}
	return out, nil
}

// FirewallGroupRules lists the rules of security group name.
func FirewallGroupRules(ctx context.Context, c *proxmox.Client, name string) ([]FirewallRule, error) {
	var out []FirewallRule
	if err := c.Get(ctx, "/cluster/firewall/groups/"+url.PathEscape(name), &out); err != nil {
		return nil, fmt.Errorf("pveapi: rules of security group %s: %w", name, err)
	}
	return out, nil
}

// IPSets lists the cluster's IP sets.
func IPSets(ctx context.Context, c *proxmox.Client) ([]IPSet, error) {
	var out []IPSet
	if err := c.Get(ctx, "/cluster/firewall/ipset", &out); err != nil {
		return nil, fmt.Errorf("pveapi: ip sets: %w", err)
	}
	return out, nil
}

// IPSetEntries lists the entries of the cluster's IP set name.
func IPSetEntries(ctx context.Context, c *proxmox.Client, name string) ([]IPSetEntry, error) {
	var out []IPSetEntry
	if err := c.Get(ctx, "/cluster/firewall/ipset/"+url.PathEscape(name), &out); err != nil {
		return nil, fmt.Errorf("pveapi: ip set %s: %w", name, err)
	}
	return out, nil
}

// GuestFirewallOptions reads the firewall options of guest vmid on node.
func GuestFirewallOptions(ctx context.Context, c *proxmox.Client, node string, vmid int) (FirewallOptions, error) {
	var out FirewallOptions
	if err := c.Get(ctx, fmt.Sprintf("/nodes/%s/qemu/%d/firewall/options", node, vmid), &out); err != nil {
		return out, fmt.Errorf("pveapi: firewall options of %d: %w", vmid, err)
	}
	return out, nil
}

// GuestFirewallRules lists the firewall rules of guest vmid on node.
func GuestFirewallRules(ctx context.Context, c *proxmox.Client, node string, vmid int) ([]FirewallRule, error) {
	var out []FirewallRule
	if err := c.Get(ctx, fmt.Sprintf("/nodes/%s/qemu/%d/firewall/rules", node, vmid), &out); err != nil {
		return nil, fmt.Errorf("pveapi: firewall rules of %d: %w", vmid, err)
	}
	return out, nil
}

// ClusterFirewallEnabled reports whether the cluster's firewall is on
// (/cluster/firewall/options enable).
func ClusterFirewallEnabled(ctx context.Context, c *proxmox.Client) (bool, error) {
	var out struct {
		Enable int `json:"enable"`
	}
	if err := c.Get(ctx, "/cluster/firewall/options", &out); err != nil {
		return false, fmt.Errorf("pveapi: cluster firewall options: %w", err)
	}
	return out.Enable == 1, nil
}
