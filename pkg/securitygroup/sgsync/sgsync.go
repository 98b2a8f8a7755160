// Package sgsync writes the VDCs' security groups into each zone's Proxmox
// firewall and reads back where each stands. Each pass derives what every
// reachable zone's firewall should hold from the catalog's groups and the
// VDCs' VMs (their groups and addresses are in their intents, package
// compute), reads what it holds (nothing is cached as the truth), and
// writes the difference:
//
//   - a cluster IP set per (VDC, group) of its members' addresses in the
//     zone (what peers and "members of the same group" name), kept up to
//     date entry by entry;
//   - a Proxmox security group per (VDC, group) named after a hash of its
//     content, so a changed group is a new Proxmox group written whole
//     before any VM refers to it, and a VM switches from the old to the
//     new with one rule write: never half applied;
//   - a platform group per VDC allowing what comes through its edge
//     gateway (whatever does not come from the VDC's own networks, which
//     the gateway's rules decided) and the gateways' own traffic;
//   - on each VM in a group: its firewall on with ipfilter (no spoofing),
//     DHCP allowed, policy_in DROP, policy_out DROP only when one of its
//     groups has outbound rules (else ACCEPT), firewall=1 on every NIC,
//     and its rules exactly the platform group and its groups, in order;
//   - the datacenter's firewall (/cluster/firewall/options) is only read:
//     while it is off, the groups are reported failed;
//   - what is flexplane's (a name starting "fp", a comment starting with
//     the tenancy tags "flexplane fp-vdc-<vdc>") and no longer wanted is
//     removed, once no VM refers
//     to it. A VM in no group keeps its firewall off.
//
// A zone that cannot be reached is passed over and gets its state when it
// is back. Passes run every Config.Interval and at once after Kick, only
// while Config.Leads says this replica leads, so one replica writes at a
// time.
package sgsync

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	proxmox "github.com/luthermonson/go-proxmox"

	"github.com/flexplane/flexplane/pkg/catalog"
	"github.com/flexplane/flexplane/pkg/compute"
	"github.com/flexplane/flexplane/pkg/proxmox/pveapi"
	"github.com/flexplane/flexplane/pkg/securitygroup"
)

// VMs reads the VDCs' VMs with their groups (compute.Service implements
// it).
type VMs interface {
	Members(ctx context.Context, vdc string) ([]compute.Member, map[string]error)
}

// Config configures a Syncer.
type Config struct {
	// Store holds the security groups (required).
	Store catalog.Store
	// VMs reads the VMs' groups and addresses (required).
	VMs VMs
	// Zones are the zones the syncer can reach now (required).
	Zones compute.Zones
	// Leads says whether this replica writes now; nil: always.
	Leads func() bool
	// Interval is the time between passes; default 10s. A Kick starts one
	// at once.
	Interval time.Duration
	// ZoneTimeout bounds each zone's part of a pass; default 30s.
	ZoneTimeout time.Duration
	// Sweep is how often a pass reads every zone while the catalog has no
	// group (to remove what a VDC left); between sweeps such a pass reads
	// only the zones where the last pass found something of flexplane's.
	// Default 5m.
	Sweep time.Duration
	// Logger receives the passes' failures; nil discards them.
	Logger *slog.Logger
}

// Syncer writes the security groups into the zones' firewalls.
type Syncer struct {
	cfg  Config
	log  *slog.Logger
	kick chan struct{}
	// had are the zones where the last pass found or wanted something,
	// and swept when it last read every zone: Pass's own (one runs at a
	// time).
	had   map[string]bool
	swept time.Time

	mu       sync.Mutex
	failures map[string]string // by zone name and VDC ("zone/vdc"): the last pass's error; protected by mu
	// passed is closed when the pass running (or next) ends, and replaced
	// by a new one: WaitVM waits on it; protected by mu.
	passed chan struct{}
}

// New returns a Syncer; Run runs it.
func New(cfg Config) (*Syncer, error) {
	if cfg.Store == nil || cfg.VMs == nil || cfg.Zones == nil {
		return nil, errors.New("sgsync: Config.Store, Config.VMs and Config.Zones are required")
	}
	if cfg.Interval <= 0 {
		cfg.Interval = 10 * time.Second
	}
	if cfg.ZoneTimeout <= 0 {
		cfg.ZoneTimeout = 30 * time.Second
	}
	if cfg.Sweep <= 0 {
		cfg.Sweep = 5 * time.Minute
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Syncer{cfg: cfg, log: log, kick: make(chan struct{}, 1), failures: map[string]string{}, had: map[string]bool{},
		passed: make(chan struct{})}, nil
}

// Kick asks for a pass now (after a change of a group or a VM's groups).
func (s *Syncer) Kick() {
	select {
	case s.kick <- struct{}{}:
	default:
	}
}

// Run runs passes until ctx ends.
func (s *Syncer) Run(ctx context.Context) {
	t := time.NewTicker(s.cfg.Interval)
	defer t.Stop()
	for {
		if s.cfg.Leads == nil || s.cfg.Leads() {
			if err := s.Pass(ctx); err != nil && ctx.Err() == nil {
				s.log.Warn("sgsync: pass", "err", err)
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-s.kick:
		}
	}
}

// Pass makes every reachable zone's firewall hold the catalog's groups
// once. A zone that fails is recorded (securitygroup.StatusError) and
// passed over; the error returned is the catalog's, or every zone's
// joined. Passes must not run concurrently (Run runs one at a time).
func (s *Syncer) Pass(ctx context.Context) error {
	defer s.passEnded()
	all, err := catalog.List[*catalog.SecurityGroup](ctx, s.cfg.Store)
	if err != nil {
		return fmt.Errorf("sgsync: %w", err)
	}
	byVDC := map[string][]*catalog.SecurityGroup{}
	for _, g := range all {
		byVDC[g.VDC] = append(byVDC[g.VDC], g)
	}
	zones := s.cfg.Zones.Zones(ctx)
	applied := map[string]*zoneState{}
	// The VDCs flexplane has objects of in a zone are passed too, so
	// that what a VDC no longer wants is removed.
	vdcs := map[string]bool{}
	for v := range byVDC {
		vdcs[v] = true
	}
	sweep := time.Since(s.swept) >= s.cfg.Sweep
	if sweep {
		s.swept = time.Now()
	}
	for _, z := range zones {
		if len(all) == 0 && !sweep && !s.had[z.Name] {
			continue // nothing wanted anywhere, nothing of flexplane's seen there
		}
		st, err := readZone(ctx, z.Client)
		if err != nil {
			s.log.Info("sgsync: zone not read", "zone", z.Name, "err", err)
			continue
		}
		applied[z.Name] = st
		s.had[z.Name] = len(st.vdcs) > 0
		for v := range st.vdcs {
			vdcs[v] = true
		}
	}
	wants := map[string]*zoneWant{}
	vmsDown := map[string]bool{} // zones whose VMs of some VDC could not be read
	for _, v := range slices.Sorted(maps.Keys(vdcs)) {
		ms, errs := s.cfg.VMs.Members(ctx, v)
		for z := range errs {
			vmsDown[z] = true
		}
		byZone := map[string][]compute.Member{}
		for _, m := range ms {
			byZone[m.ZoneName] = append(byZone[m.ZoneName], m)
		}
		for zn := range applied {
			w := wants[zn]
			if w == nil {
				w = newZoneWant()
				wants[zn] = w
			}
			w.addVDC(v, byVDC[v], byZone[zn])
		}
	}
	var errs []error
	for _, z := range zones {
		st, ok := applied[z.Name]
		if !ok || vmsDown[z.Name] {
			continue // its VMs' groups unknown: changed nothing, it gets its state when it answers
		}
		zctx, cancel := context.WithTimeout(ctx, s.cfg.ZoneTimeout)
		err := apply(zctx, z.Client, st, wants[z.Name])
		cancel()
		s.record(z.Name, wants[z.Name], err)
		if err != nil {
			errs = append(errs, fmt.Errorf("zone %s: %w", z.Name, err))
		}
	}
	return errors.Join(errs...)
}

// passEnded tells WaitVM's waiters that a pass ended.
func (s *Syncer) passEnded() {
	s.mu.Lock()
	defer s.mu.Unlock()
	close(s.passed)
	s.passed = make(chan struct{})
}

// record keeps the outcome of a zone's pass for Zones.
func (s *Syncer) record(zone string, w *zoneWant, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for k := range s.failures {
		if strings.HasPrefix(k, zone+"/") {
			delete(s.failures, k)
		}
	}
	if err == nil || w == nil {
		return
	}
	for name := range w.groupOf {
		vdc, _, _ := strings.Cut(name, ".")
		s.failures[zone+"/"+vdc] = err.Error()
	}
}

// zoneState is what a zone's firewall holds of flexplane's.
type zoneState struct {
	groups map[string]string // flexplane's groups: name to VDC
	sets   map[string]string // flexplane's IP sets: name to VDC
	vdcs   map[string]bool
}

// readZone reads which groups and sets of the zone are flexplane's.
func readZone(ctx context.Context, c *proxmox.Client) (*zoneState, error) {
	gs, err := pveapi.FirewallGroups(ctx, c)
	if err != nil {
		return nil, err
	}
	sets, err := pveapi.IPSets(ctx, c)
	if err != nil {
		return nil, err
	}
	st := &zoneState{groups: map[string]string{}, sets: map[string]string{}, vdcs: map[string]bool{}}
	for _, g := range gs {
		if v, ok := owned(g.Name, g.Comment); ok {
			st.groups[g.Name], st.vdcs[v] = v, true
		}
	}
	for _, set := range sets {
		if v, ok := owned(set.Name, set.Comment); ok {
			st.sets[set.Name], st.vdcs[v] = v, true
		}
	}
	return st, nil
}

// apply writes w into a zone whose firewall holds st (every VDC's VMs
// of the zone were read).
func apply(ctx context.Context, c *proxmox.Client, st *zoneState, w *zoneWant) error {
	if w == nil {
		w = newZoneWant()
	}
	for _, name := range slices.Sorted(maps.Keys(w.sets)) {
		if err := applySet(ctx, c, name, w.sets[name], st.sets[name] != ""); err != nil {
			return err
		}
	}
	for _, name := range slices.Sorted(maps.Keys(w.groups)) {
		if err := applyGroup(ctx, c, name, w.groups[name], st.groups[name] != ""); err != nil {
			return err
		}
	}
	for _, v := range w.vms {
		if err := applyVM(ctx, c, v); err != nil {
			return fmt.Errorf("VM %d: %w", v.m.Ref.VMID, err)
		}
	}
	for _, m := range w.others {
		if err := releaseVM(ctx, c, m, st); err != nil {
			return fmt.Errorf("VM %d: %w", m.Ref.VMID, err)
		}
	}
	for _, name := range slices.Sorted(maps.Keys(st.groups)) {
		if _, ok := w.groups[name]; ok {
			continue
		}
		if err := removeGroup(ctx, c, name); err != nil {
			return err
		}
	}
	for _, name := range slices.Sorted(maps.Keys(st.sets)) {
		if _, ok := w.sets[name]; ok {
			continue
		}
		if _, err := pveapi.Run(ctx, c, "DELETE", "/cluster/firewall/ipset/"+name, map[string]any{"force": 1}); err != nil {
			return err
		}
	}
	if len(w.vms) == 0 {
		return nil
	}
	// A guest's firewall acts only while the datacenter's is on; turning
	// it on is the operator's (it sets the hosts' own policy too, which
	// flexplane never touches): until then the groups are written and
	// reported failed.
	on, err := pveapi.ClusterFirewallEnabled(ctx, c)
	if err != nil {
		return err
	}
	if !on {
		return errDatacenterOff
	}
	return nil
}

// errDatacenterOff: the cluster's firewall is off, so no guest's acts.
var errDatacenterOff = errors.New("the datacenter firewall is off (Datacenter, Firewall, Options: enable it): no VM's firewall acts until it is on")

// applySet makes the cluster IP set name hold exactly want's entries.
func applySet(ctx context.Context, c *proxmox.Client, name string, want set, exists bool) error {
	if !exists {
		if _, err := pveapi.Run(ctx, c, "POST", "/cluster/firewall/ipset", map[string]any{"name": name, "comment": want.comment}); err != nil {
			return err
		}
	}
	have, err := pveapi.IPSetEntries(ctx, c, name)
	if err != nil {
		return err
	}
	for _, e := range want.entries {
		if slices.Contains(have, e) {
			continue
		}
		p := map[string]any{"cidr": e.CIDR}
		if e.NoMatch != 0 {
			p["nomatch"] = 1
		}
		if _, err := pveapi.Run(ctx, c, "POST", "/cluster/firewall/ipset/"+name, p); err != nil {
			return err
		}
	}
	for _, e := range have {
		if slices.Contains(want.entries, e) {
			continue
		}
		if _, err := pveapi.Run(ctx, c, "DELETE", "/cluster/firewall/ipset/"+name+"/"+e.CIDR, nil); err != nil {
			return err
		}
	}
	return nil
}

// applyGroup makes the security group name hold exactly want's rules. A
// group is named after its content, so one that exists is normally
// right; one left half written (or changed by hand) is written again.
func applyGroup(ctx context.Context, c *proxmox.Client, name string, want group, exists bool) error {
	if exists {
		have, err := pveapi.FirewallGroupRules(ctx, c, name)
		if err != nil {
			return err
		}
		if slices.EqualFunc(have, want.rules, pveapi.FirewallRule.Same) {
			return nil
		}
		if err := clearGroup(ctx, c, name, len(have)); err != nil {
			return err
		}
	} else if _, err := pveapi.Run(ctx, c, "POST", "/cluster/firewall/groups", map[string]any{"group": name, "comment": want.comment}); err != nil {
		return err
	}
	for i, r := range want.rules {
		p := r.Params()
		p["pos"] = i
		if _, err := pveapi.Run(ctx, c, "POST", "/cluster/firewall/groups/"+name, p); err != nil {
			return err
		}
	}
	return nil
}

// clearGroup deletes the n rules of group name, the last first.
func clearGroup(ctx context.Context, c *proxmox.Client, name string, n int) error {
	for i := n - 1; i >= 0; i-- {
		if _, err := pveapi.Run(ctx, c, "DELETE", fmt.Sprintf("/cluster/firewall/groups/%s/%d", name, i), nil); err != nil {
			return err
		}
	}
	return nil
}

// removeGroup deletes flexplane's group name that nothing wants: its
// rules, then the group (Proxmox refuses while a VM refers to it: it is
// tried again next pass).
func removeGroup(ctx context.Context, c *proxmox.Client, name string) error {
	have, err := pveapi.FirewallGroupRules(ctx, c, name)
	if err != nil {
		return err
	}
	if err := clearGroup(ctx, c, name, len(have)); err != nil {
		return err
	}
	_, err = pveapi.Run(ctx, c, "DELETE", "/cluster/firewall/groups/"+name, nil)
	return err
}

// applyVM makes a member VM's firewall what v wants: its NICs' firewall
// on, its options, and its rules exactly its groups, in order.
func applyVM(ctx context.Context, c *proxmox.Client, v vmWant) error {
	m := v.m
	base := fmt.Sprintf("/nodes/%s/qemu/%d", m.Node, m.Ref.VMID)
	nets := map[string]any{}
	for k, val := range m.Nets {
		if !strings.Contains(","+val+",", ",firewall=1,") {
			nets[k] = setOption(val, "firewall", "1")
		}
	}
	if len(nets) > 0 {
		nets["digest"] = m.Digest
		if _, err := pveapi.Run(ctx, c, "POST", base+"/config", nets); err != nil {
			return err
		}
	}
	opts, err := pveapi.GuestFirewallOptions(ctx, c, m.Node, m.Ref.VMID)
	if err != nil {
		return err
	}
	if opts != v.options {
		o := v.options
		if _, err := pveapi.Run(ctx, c, "PUT", base+"/firewall/options", map[string]any{"enable": o.Enable, "ipfilter": o.IPFilter,
			"dhcp": o.DHCP, "policy_in": o.PolicyIn, "policy_out": o.PolicyOut}); err != nil {
			return err
		}
	}
	have, err := pveapi.GuestFirewallRules(ctx, c, m.Node, m.Ref.VMID)
	if err != nil {
		return err
	}
	for i, g := range v.groups {
		want := attached(g)
		want.Pos = i
		switch {
		case i < len(have) && have[i].Same(want):
		case i < len(have):
			if _, err := pveapi.Run(ctx, c, "PUT", fmt.Sprintf("%s/firewall/rules/%d", base, i), want.Params()); err != nil {
				return err
			}
		default:
			p := want.Params()
			p["pos"] = i
			if _, err := pveapi.Run(ctx, c, "POST", base+"/firewall/rules", p); err != nil {
				return err
			}
		}
	}
	for i := len(have) - 1; i >= len(v.groups); i-- {
		if _, err := pveapi.Run(ctx, c, "DELETE", fmt.Sprintf("%s/firewall/rules/%d", base, i), nil); err != nil {
			return err
		}
	}
	return nil
}

// releaseVM removes flexplane's groups from a VM in no group, and turns
// its firewall off when no rule is left (as before it was in a group).
func releaseVM(ctx context.Context, c *proxmox.Client, m compute.Member, st *zoneState) error {
	base := fmt.Sprintf("/nodes/%s/qemu/%d", m.Node, m.Ref.VMID)
	have, err := pveapi.GuestFirewallRules(ctx, c, m.Node, m.Ref.VMID)
	if err != nil {
		return err
	}
	left := len(have)
	for i := len(have) - 1; i >= 0; i-- {
		if have[i].Type != "group" || st.groups[have[i].Action] == "" {
			continue
		}
		if _, err := pveapi.Run(ctx, c, "DELETE", fmt.Sprintf("%s/firewall/rules/%d", base, i), nil); err != nil {
			return err
		}
		left--
	}
	if left > 0 || left == len(have) {
		return nil
	}
	_, err = pveapi.Run(ctx, c, "PUT", base+"/firewall/options", map[string]any{"enable": 0})
	return err
}

// setOption sets key=value in a Proxmox property string.
func setOption(prop, key, value string) string {
	parts := strings.Split(prop, ",")
	for i, p := range parts {
		if k, _, _ := strings.Cut(p, "="); k == key {
			parts[i] = key + "=" + value
			return strings.Join(parts, ",")
		}
	}
	return prop + "," + key + "=" + value
}

// Zones reports where g stands in each zone where its VDC has VMs: read
// from the zone's firewall (its Proxmox group, named after its content,
// exists, its members' set holds their addresses and every member VM
// there has it attached), or the last pass's failure there.
func (s *Syncer) Zones(ctx context.Context, g *catalog.SecurityGroup) []securitygroup.ZoneState {
	ms, errs := s.cfg.VMs.Members(ctx, g.VDC)
	byZone := map[string][]compute.Member{}
	for _, m := range ms {
		byZone[m.ZoneName] = append(byZone[m.ZoneName], m)
	}
	var out []securitygroup.ZoneState
	for _, zn := range slices.Sorted(maps.Keys(errs)) {
		out = append(out, securitygroup.ZoneState{Zone: zn, Status: securitygroup.StatusUnavailable, Message: "the zone cannot be reached"})
	}
	peers, err := catalog.List[*catalog.SecurityGroup](ctx, s.cfg.Store)
	if err != nil {
		return out
	}
	peers = slices.DeleteFunc(peers, func(o *catalog.SecurityGroup) bool { return o.VDC != g.VDC })
	for _, z := range s.cfg.Zones.Zones(ctx) {
		vms, ok := byZone[z.Name]
		if !ok {
			continue
		}
		w := newZoneWant()
		w.addVDC(g.VDC, peers, vms)
		if len(w.vms) == 0 {
			continue // the VDC's VMs there are in no group: nothing to hold
		}
		out = append(out, s.zoneState(ctx, z, g, w))
	}
	slices.SortFunc(out, func(a, b securitygroup.ZoneState) int { return strings.Compare(a.Zone, b.Zone) })
	return out
}

// zoneState compares what zone z holds of g with what w wants.
func (s *Syncer) zoneState(ctx context.Context, z compute.Zone, g *catalog.SecurityGroup, w *zoneWant) securitygroup.ZoneState {
	st := securitygroup.ZoneState{Zone: z.Name, Status: securitygroup.StatusPending}
	s.mu.Lock()
	failure := s.failures[z.Name+"/"+g.VDC]
	s.mu.Unlock()
	if failure != "" {
		st.Status, st.Message = securitygroup.StatusError, failure
		return st
	}
	applied, err := readZone(ctx, z.Client)
	if err != nil {
		st.Status, st.Message = securitygroup.StatusUnavailable, "the zone's firewall cannot be read"
		return st
	}
	pg := w.groupOf[g.Name]
	set := MemberSet(g.VDC, g.ShortName())
	if applied.groups[pg] == "" || applied.sets[set] == "" {
		st.Message = "not written yet"
		return st
	}
	have, err := pveapi.IPSetEntries(ctx, z.Client, set)
	if err != nil {
		st.Status, st.Message = securitygroup.StatusUnavailable, "the zone's firewall cannot be read"
		return st
	}
	if !sameEntries(have, w.sets[set].entries) {
		st.Message = "its members are being written"
		return st
	}
	for _, v := range w.vms {
		if !slices.Contains(v.groups, pg) {
			continue
		}
		rules, err := pveapi.GuestFirewallRules(ctx, z.Client, v.m.Node, v.m.Ref.VMID)
		if err != nil {
			st.Status, st.Message = securitygroup.StatusUnavailable, "the zone's firewall cannot be read"
			return st
		}
		if !slices.ContainsFunc(rules, func(r pveapi.FirewallRule) bool { return r.Type == "group" && r.Action == pg }) {
			st.Message = "its members' VMs are being switched to it"
			return st
		}
	}
	st.Status = securitygroup.StatusApplied
	return st
}

func sameEntries(a, b []pveapi.IPSetEntry) bool {
	if len(a) != len(b) {
		return false
	}
	for _, e := range a {
		if !slices.Contains(b, e) {
			return false
		}
	}
	return true
}
