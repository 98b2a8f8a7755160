package pvesim

import (
	"crypto/sha1"
	"encoding/hex"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"strings"

	"github.com/flexplane/flexplane/pkg/pvesim/pveschema"
)

// fwConf is one of pve-firewall's configuration files: the cluster's cluster.fw (options,
// rules, ipsets, security groups) or a guest's <vmid>.fw (options, rules, ipsets). It is
// kept in the state file as it is.
type fwConf struct {
	Options map[string]string   `json:"options,omitempty"`
	Rules   []fwRule            `json:"rules,omitempty"`
	IPSets  map[string]*fwIPSet `json:"ipsets,omitempty"`
	Groups  map[string]*fwGroup `json:"groups,omitempty"`
}

// fwRule is one rule: type in|out|group (forward is refused on a guest), the action
// (ACCEPT, DROP, REJECT or a group's name), enable, and the optional keys of fwRuleKeys.
type fwRule struct {
	Type   string            `json:"type"`
	Action string            `json:"action"`
	Enable int               `json:"enable"`
	Opts   map[string]string `json:"opts,omitempty"`
}

// fwRuleKeys are a rule's optional keys, as the API names them.
var fwRuleKeys = []string{"comment", "dest", "dport", "icmp-type", "iface", "log", "macro", "proto", "source", "sport"}

type fwIPSet struct {
	Comment string         `json:"comment,omitempty"`
	Entries []fwIPSetEntry `json:"entries,omitempty"`
}

type fwIPSetEntry struct {
	CIDR    string `json:"cidr"`
	NoMatch bool   `json:"nomatch,omitempty"`
	Comment string `json:"comment,omitempty"`
}

type fwGroup struct {
	Comment string   `json:"comment,omitempty"`
	Rules   []fwRule `json:"rules,omitempty"`
}

func newFWConf() *fwConf {
	return &fwConf{Options: map[string]string{}, IPSets: map[string]*fwIPSet{}, Groups: map[string]*fwGroup{}}
}

// normalize fills the maps a decoded file may lack.
func (f *fwConf) normalize() *fwConf {
	if f == nil {
		return newFWConf()
	}
	if f.Options == nil {
		f.Options = map[string]string{}
	}
	if f.IPSets == nil {
		f.IPSets = map[string]*fwIPSet{}
	}
	if f.Groups == nil {
		f.Groups = map[string]*fwGroup{}
	}
	return f
}

// clone deep-copies the file (a guest's clone copies its firewall, as qm clone does).
func (f *fwConf) clone() *fwConf {
	out := newFWConf()
	for k, v := range f.Options {
		out.Options[k] = v
	}
	out.Rules = cloneRules(f.Rules)
	for n, s := range f.IPSets {
		out.IPSets[n] = &fwIPSet{Comment: s.Comment, Entries: slices.Clone(s.Entries)}
	}
	for n, g := range f.Groups {
		out.Groups[n] = &fwGroup{Comment: g.Comment, Rules: cloneRules(g.Rules)}
	}
	return out
}

func cloneRules(rs []fwRule) []fwRule {
	out := make([]fwRule, len(rs))
	for i, r := range rs {
		out[i] = fwRule{Type: r.Type, Action: r.Action, Enable: r.Enable, Opts: map[string]string{}}
		for k, v := range r.Opts {
			out[i].Opts[k] = v
		}
	}
	return out
}

// guestFW is the guest's firewall file, made empty on first use.
func (g *guest) guestFW() *fwConf {
	if g.fw == nil {
		g.fw = newFWConf()
	}
	return g.fw
}

// listDigest is pve-firewall's copy_list_with_digest: a SHA-1 over every entry's keys,
// sorted, as "key:value\n".
func listDigest(entries []map[string]any) string {
	h := sha1.New()
	for _, e := range entries {
		for _, k := range sortedKeys(e) {
			fmt.Fprintf(h, "%s:%s\n", k, formatValue(e[k]))
		}
	}
	return hex.EncodeToString(h.Sum(nil))
}

// withDigest sets every entry's digest and returns it.
func withDigest(entries []map[string]any) (string, []map[string]any) {
	d := listDigest(entries)
	for _, e := range entries {
		e["digest"] = d
	}
	return d, entries
}

// checkDigest is PVE::Tools::assert_if_modified.
func checkDigest(p params, current string) error {
	if d, ok := p.str("digest"); ok && d != "" && !strings.EqualFold(d, current) {
		return errorf(http.StatusInternalServerError, "detected modified configuration - file changed by other user? Try again.")
	}
	return nil
}

// ruleEntry renders a rule as GET answers it (without pos and digest).
func ruleEntry(r fwRule) map[string]any {
	e := map[string]any{"type": r.Type, "action": r.Action, "enable": r.Enable}
	for k, v := range r.Opts {
		e[k] = v
	}
	if v := ruleIPVersion(r); v != 0 {
		e["ipversion"] = v
	}
	return e
}

// ruleIPVersion is the IP version the rule's literal addresses give it (0: any).
func ruleIPVersion(r fwRule) int {
	for _, k := range []string{"source", "dest"} {
		if v := r.Opts[k]; v != "" && !strings.HasPrefix(v, "+") {
			if _, ver, err := pveschema.ParseFirewallAddrList(v); err == nil {
				return ver
			}
		}
	}
	return 0
}

func rulesList(rs []fwRule) (string, []map[string]any) {
	out := make([]map[string]any, 0, len(rs))
	for _, r := range rs {
		out = append(out, ruleEntry(r))
	}
	d, out := withDigest(out)
	for i, e := range out {
		e["pos"] = i
	}
	return d, out
}

// ruleScope is a list of rules the API edits: a security group's or a guest's.
type ruleScope struct {
	rules *[]fwRule
	group bool    // a security group: group rules are not allowed in it
	g     *guest  // the guest whose ipsets rules may name; nil in a group
	cl    *fwConf // the cluster's file
}

func (cl *call) groupScope() (ruleScope, error) {
	fw := cl.c.st.fw
	name := cl.vars["group"]
	grp := fw.Groups[name]
	if grp == nil {
		return ruleScope{}, errorf(http.StatusInternalServerError, "no such security group '%s'", name)
	}
	return ruleScope{rules: &grp.Rules, group: true, cl: fw}, nil
}

func guestScope(cl *call, g *guest) ruleScope {
	fw := g.guestFW()
	return ruleScope{rules: &fw.Rules, g: g, cl: cl.c.st.fw}
}

// verify checks a rule as pve-firewall's verify_rule does, reporting every problem as a
// parameter error.
func (s ruleScope) verify(r fwRule) error {
	errs := map[string]string{}
	switch r.Type {
	case "group":
		if s.group {
			errs["type"] = "security groups not allowed"
		} else if s.cl.Groups[r.Action] == nil {
			errs["action"] = fmt.Sprintf("no such security group '%s'", r.Action)
		}
	case "in", "out":
		if r.Action != "ACCEPT" && r.Action != "DROP" && r.Action != "REJECT" {
			errs["action"] = fmt.Sprintf("unknown action '%s'", r.Action)
		}
	case "forward":
		errs["type"] = "forward rules are only allowed on the host and VNet level"
	}
	if m := r.Opts["macro"]; m != "" {
		errs["macro"] = fmt.Sprintf("unknown macro '%s'", m)
	}
	if i := r.Opts["iface"]; i != "" && s.g != nil {
		if _, ok := s.g.conf[i]; !ok || !netKeyR.MatchString(i) {
			errs["iface"] = fmt.Sprintf("invalid interface name '%s'", i)
		}
	}
	proto := r.Opts["proto"]
	for _, k := range []string{"dport", "sport"} {
		if r.Opts[k] == "" {
			continue
		}
		switch {
		case proto == "":
			errs["proto"] = fmt.Sprintf("missing property - '%s' requires this property", k)
		case !protoHasPorts(proto):
			errs[k] = fmt.Sprintf("protocol '%s' does not support ports", proto)
		}
	}
	if r.Opts["icmp-type"] != "" && proto != "icmp" && proto != "icmpv6" && proto != "ipv6-icmp" {
		errs["proto"] = "missing property - 'icmp-type' requires this property"
	}
	versions := map[string]int{}
	for _, k := range []string{"source", "dest"} {
		v := r.Opts[k]
		if v == "" {
			continue
		}
		if scope, name, ok := pveschema.FirewallSetRef(v); ok {
			if !s.hasSet(scope, name) {
				errs[k] = fmt.Sprintf("no such ipset '%s'", name)
			}
			continue
		}
		if strings.HasPrefix(v, "+") {
			errs[k] = fmt.Sprintf("invalid ipset name '%s'", v)
			continue
		}
		if _, name, ok := pveschema.FirewallAliasRef(v); ok {
			errs[k] = fmt.Sprintf("no such alias '%s'", name)
			continue
		}
		if _, ver, err := pveschema.ParseFirewallAddrList(v); err == nil {
			versions[k] = ver
		}
	}
	if versions["source"] != 0 && versions["dest"] != 0 && versions["source"] != versions["dest"] {
		errs["dest"] = "ipversion mismatch"
	}
	if len(errs) > 0 {
		return &apiError{status: http.StatusBadRequest, msg: "Parameter verification failed.", errors: errs}
	}
	return nil
}

// hasSet reports whether an ipset reference resolves: "dc/" names the cluster's sets,
// "guest/" the guest's own, no scope the guest's first and then the cluster's.
func (s ruleScope) hasSet(scope, name string) bool {
	if scope != "dc" && s.g != nil && s.g.fw != nil && s.g.fw.IPSets[name] != nil {
		return true
	}
	return scope != "guest" && scope != "sdn" && s.cl.IPSets[name] != nil
}

func protoHasPorts(p string) bool {
	switch p {
	case "tcp", "udp", "udplite", "dccp", "sctp", "6", "17", "33", "132", "136":
		return true
	}
	return false
}

// setRuleData copies the request's rule keys into r (copy_rule_data) and removes the
// keys of delete.
func setRuleData(r *fwRule, p params) {
	if r.Opts == nil {
		r.Opts = map[string]string{}
	}
	if v, ok := p.str("type"); ok {
		r.Type = v
	}
	if v, ok := p.str("action"); ok {
		r.Action = v
	}
	if p.has("enable") {
		n, _ := p.int("enable")
		r.Enable = int(n)
	}
	for _, k := range fwRuleKeys {
		if v, ok := p.str(k); ok {
			if v == "" {
				delete(r.Opts, k)
			} else {
				r.Opts[k] = v
			}
		}
	}
	if d, ok := p.str("delete"); ok {
		for _, k := range splitList(d) {
			delete(r.Opts, k)
		}
	}
}

func (s ruleScope) list() (any, error) {
	_, out := rulesList(*s.rules)
	return out, nil
}

func (s ruleScope) create(cl *call) (any, error) {
	d, _ := rulesList(*s.rules)
	if err := checkDigest(cl.p, d); err != nil {
		return nil, err
	}
	var r fwRule
	setRuleData(&r, cl.p)
	if err := s.verify(r); err != nil {
		return nil, err
	}
	rules := *s.rules
	pos := 0
	if n, ok := cl.p.int("pos"); ok {
		pos = min(int(n), len(rules))
	}
	*s.rules = slices.Insert(rules, pos, r)
	return nil, nil
}

func (s ruleScope) at(cl *call) (int, error) {
	n, _ := strconv.Atoi(cl.vars["pos"])
	if n >= len(*s.rules) {
		return 0, errorf(http.StatusInternalServerError, "no rule at position %d", n)
	}
	return n, nil
}

func (s ruleScope) get(cl *call) (any, error) {
	pos, err := s.at(cl)
	if err != nil {
		return nil, err
	}
	_, out := rulesList(*s.rules)
	return out[pos], nil
}

// change checks the request's digest and returns the position of the rule it changes.
func (s ruleScope) change(cl *call) (int, error) {
	d, _ := rulesList(*s.rules)
	if err := checkDigest(cl.p, d); err != nil {
		return 0, err
	}
	return s.at(cl)
}

func (s ruleScope) update(cl *call) (any, error) {
	pos, err := s.change(cl)
	if err != nil {
		return nil, err
	}
	rules := *s.rules
	if to, ok := cl.p.int("moveto"); ok {
		if int(to) != pos {
			moved := make([]fwRule, 0, len(rules))
			for i := range rules {
				if i == pos {
					continue
				}
				if i == int(to) {
					moved = append(moved, rules[pos])
				}
				moved = append(moved, rules[i])
			}
			if int(to) >= len(rules) {
				moved = append(moved, rules[pos])
			}
			*s.rules = moved
		}
		return nil, nil
	}
	r := cloneRules(rules[pos : pos+1])[0]
	setRuleData(&r, cl.p)
	if err := s.verify(r); err != nil {
		return nil, err
	}
	rules[pos] = r
	return nil, nil
}

func (s ruleScope) remove(cl *call) (any, error) {
	pos, err := s.change(cl)
	if err != nil {
		return nil, err
	}
	*s.rules = slices.Delete(*s.rules, pos, pos+1)
	return nil, nil
}

// groupRules and guestRules adapt a ruleScope method to a route.
func groupRules(m func(ruleScope, *call) (any, error)) handlerFunc {
	return func(cl *call) (any, error) {
		s, err := cl.groupScope()
		if err != nil {
			return nil, err
		}
		return m(s, cl)
	}
}

func guestRules(m func(ruleScope, *call) (any, error)) handlerFunc {
	return onGuest(func(cl *call, g *guest) (any, error) { return m(guestScope(cl, g), cl) })
}

func scopeList(s ruleScope, _ *call) (any, error) { return s.list() }

// Options.

// fwOptionKinds are the options whose values are numbers in answers; the others are
// strings.
var fwNumericOptions = map[string]bool{"enable": true, "ebtables": true, "dhcp": true, "ipfilter": true, "macfilter": true, "ndp": true, "radv": true}

func optionsDigest(o map[string]string) string {
	e := map[string]any{}
	for k, v := range o {
		e[k] = v
	}
	return listDigest([]map[string]any{e})
}

func optionsAnswer(o map[string]string) map[string]any {
	out := map[string]any{"digest": optionsDigest(o)}
	for k, v := range o {
		if fwNumericOptions[k] {
			n, _ := strconv.Atoi(v)
			out[k] = n
		} else {
			out[k] = v
		}
	}
	return out
}

func setOptions(cl *call, o map[string]string) error {
	if err := checkDigest(cl.p, optionsDigest(o)); err != nil {
		return err
	}
	if d, ok := cl.p.str("delete"); ok {
		for _, k := range splitList(d) {
			delete(o, k)
		}
	}
	for k, v := range cl.p {
		switch k {
		case "delete", "digest", "node", "vmid":
			continue
		}
		o[k] = formatValue(v)
	}
	return nil
}

func hFWClusterOptions(cl *call) (any, error) { return optionsAnswer(cl.c.st.fw.Options), nil }

func hFWClusterOptionsSet(cl *call) (any, error) { return nil, setOptions(cl, cl.c.st.fw.Options) }

func hFWGuestOptions(_ *call, g *guest) (any, error) { return optionsAnswer(g.guestFW().Options), nil }

func hFWGuestOptionsSet(cl *call, g *guest) (any, error) {
	return nil, setOptions(cl, g.guestFW().Options)
}

// Security groups.

// namedList lists security groups or ipsets by name (under key) with their comments.
func namedList[T any](m map[string]T, key string, comment func(T) string) (string, []map[string]any) {
	out := []map[string]any{}
	for _, n := range sortedKeys(m) {
		e := map[string]any{key: n}
		if c := comment(m[n]); c != "" {
			e["comment"] = c
		}
		out = append(out, e)
	}
	return withDigest(out)
}

func groupsList(fw *fwConf) (string, []map[string]any) {
	return namedList(fw.Groups, "group", func(g *fwGroup) string { return g.Comment })
}

func hFWGroups(cl *call) (any, error) {
	_, out := groupsList(cl.c.st.fw)
	return out, nil
}

func hFWGroupCreate(cl *call) (any, error) {
	fw := cl.c.st.fw
	name := cl.p.strOr("group", "")
	comment, hasComment := cl.p.str("comment")
	if old, ok := cl.p.str("rename"); ok {
		d, _ := groupsList(fw)
		if err := checkDigest(cl.p, d); err != nil {
			return nil, err
		}
		grp := fw.Groups[old]
		if grp == nil {
			return nil, paramError("group", fmt.Sprintf("Security group '%s' does not exist", old))
		}
		if fw.Groups[name] != nil && name != old {
			return nil, paramError("group", fmt.Sprintf("Security group '%s' does already exist", name))
		}
		if hasComment {
			grp.Comment = comment
		}
		if name != old {
			delete(fw.Groups, old)
			fw.Groups[name] = grp
			renameGroupRefs(fw.Rules, old, name)
			for _, g := range fw.Groups {
				renameGroupRefs(g.Rules, old, name)
			}
			for _, g := range cl.c.st.guests {
				if g.fw != nil {
					renameGroupRefs(g.fw.Rules, old, name)
				}
			}
		}
		return nil, nil
	}
	if fw.Groups[name] != nil {
		return nil, paramError("group", fmt.Sprintf("Security group '%s' already exists", name))
	}
	fw.Groups[name] = &fwGroup{Comment: comment}
	return nil, nil
}

func renameGroupRefs(rs []fwRule, old, name string) {
	for i := range rs {
		if rs[i].Type == "group" && rs[i].Action == old {
			rs[i].Action = name
		}
	}
}

// hFWGroupDelete deletes an empty security group that no rule names: pve-firewall dies
// "Security group 'X' is not empty" while it has rules; a group still referenced by a
// guest's or the cluster's rules is refused too, naming the first user.
func hFWGroupDelete(cl *call) (any, error) {
	fw := cl.c.st.fw
	name := cl.vars["group"]
	grp := fw.Groups[name]
	if grp == nil {
		return nil, nil
	}
	if len(grp.Rules) > 0 {
		return nil, errorf(http.StatusInternalServerError, "Security group '%s' is not empty", name)
	}
	vmids := slices.Sorted(maps.Keys(cl.c.st.guests))
	for _, vmid := range vmids {
		if g := cl.c.st.guests[vmid]; g.fw != nil && usesGroup(g.fw.Rules, name) {
			return nil, errorf(http.StatusInternalServerError, "security group '%s' is still used by VM %d", name, vmid)
		}
	}
	if usesGroup(fw.Rules, name) {
		return nil, errorf(http.StatusInternalServerError, "security group '%s' is still used by the cluster's rules", name)
	}
	delete(fw.Groups, name)
	return nil, nil
}

func usesGroup(rs []fwRule, name string) bool {
	for _, r := range rs {
		if r.Type == "group" && r.Action == name {
			return true
		}
	}
	return false
}

// IP sets.

// ipsetScope is the ipsets of one file: the cluster's or a guest's.
type ipsetScope struct {
	fw *fwConf
}

func ipsetsList(fw *fwConf) (string, []map[string]any) {
	return namedList(fw.IPSets, "name", func(s *fwIPSet) string { return s.Comment })
}

func entriesList(s *fwIPSet) (string, []map[string]any) {
	out := make([]map[string]any, 0, len(s.Entries))
	for _, e := range s.Entries {
		m := map[string]any{"cidr": e.CIDR}
		if e.NoMatch {
			m["nomatch"] = 1
		}
		if e.Comment != "" {
			m["comment"] = e.Comment
		}
		out = append(out, m)
	}
	return withDigest(out)
}

func (s ipsetScope) list(*call) (any, error) {
	_, out := ipsetsList(s.fw)
	return out, nil
}

func (s ipsetScope) create(cl *call) (any, error) {
	name := cl.p.strOr("name", "")
	comment, hasComment := cl.p.str("comment")
	if old, ok := cl.p.str("rename"); ok {
		d, _ := ipsetsList(s.fw)
		if err := checkDigest(cl.p, d); err != nil {
			return nil, err
		}
		set := s.fw.IPSets[old]
		if set == nil {
			return nil, errorf(http.StatusInternalServerError, "IPSet '%s' does not exist", old)
		}
		if s.fw.IPSets[name] != nil && name != old {
			return nil, errorf(http.StatusInternalServerError, "IPSet '%s' does already exist", name)
		}
		if hasComment {
			set.Comment = comment
		}
		delete(s.fw.IPSets, old)
		s.fw.IPSets[name] = set
		return nil, nil
	}
	if s.fw.IPSets[name] != nil {
		return nil, errorf(http.StatusInternalServerError, "IPSet '%s' already exists", name)
	}
	s.fw.IPSets[name] = &fwIPSet{Comment: comment}
	return nil, nil
}

func (s ipsetScope) set(cl *call) (*fwIPSet, error) {
	name := cl.vars["name"]
	set := s.fw.IPSets[name]
	if set == nil {
		return nil, errorf(http.StatusInternalServerError, "no such IPSet '%s'", name)
	}
	return set, nil
}

func (s ipsetScope) entries(cl *call) (any, error) {
	set, err := s.set(cl)
	if err != nil {
		return nil, err
	}
	_, out := entriesList(set)
	return out, nil
}

// remove deletes an ipset: refused while it has entries, unless force.
func (s ipsetScope) remove(cl *call) (any, error) {
	name := cl.vars["name"]
	set := s.fw.IPSets[name]
	if set == nil {
		return nil, nil
	}
	if len(set.Entries) > 0 && !cl.p.bool("force") {
		return nil, errorf(http.StatusInternalServerError, "IPSet '%s' is not empty", name)
	}
	delete(s.fw.IPSets, name)
	return nil, nil
}

// cleanCIDR normalises an entry as pve-firewall's clean_cidr: a lowercase address, and
// "/32" ("/128") dropped.
func cleanCIDR(v string) string {
	v = strings.ToLower(v)
	addr, bits, ok := strings.Cut(v, "/")
	if !ok {
		return v
	}
	if (strings.Contains(addr, ":") && bits == "128") || (!strings.Contains(addr, ":") && bits == "32") {
		return addr
	}
	return v
}

func (s ipsetScope) add(cl *call) (any, error) {
	set, err := s.set(cl)
	if err != nil {
		return nil, err
	}
	cidr := cleanCIDR(cl.p.strOr("cidr", ""))
	if _, _, ok := pveschema.FirewallAliasRef(cidr); ok {
		return nil, paramError("cidr", fmt.Sprintf("no such alias '%s'", cidr))
	}
	for _, e := range set.Entries {
		if e.CIDR == cidr {
			return nil, paramError("cidr", fmt.Sprintf("address '%s' already exists", cidr))
		}
	}
	set.Entries = append(set.Entries, fwIPSetEntry{CIDR: cidr, NoMatch: cl.p.bool("nomatch"), Comment: cl.p.strOr("comment", "")})
	return nil, nil
}

func (s ipsetScope) entry(cl *call) (*fwIPSet, int, error) {
	set, err := s.set(cl)
	if err != nil {
		return nil, 0, err
	}
	cidr := cleanCIDR(cl.vars["cidr"])
	for i, e := range set.Entries {
		if e.CIDR == cidr {
			return set, i, nil
		}
	}
	return nil, 0, paramError("cidr", "no such IP/Network")
}

func (s ipsetScope) getEntry(cl *call) (any, error) {
	set, i, err := s.entry(cl)
	if err != nil {
		return nil, err
	}
	_, out := entriesList(set)
	return out[i], nil
}

// changeEntry is entry for a change: the request's digest must be the set's.
func (s ipsetScope) changeEntry(cl *call) (*fwIPSet, int, error) {
	set, i, err := s.entry(cl)
	if err != nil {
		return nil, 0, err
	}
	d, _ := entriesList(set)
	return set, i, checkDigest(cl.p, d)
}

func (s ipsetScope) updateEntry(cl *call) (any, error) {
	set, i, err := s.changeEntry(cl)
	if err != nil {
		return nil, err
	}
	e := &set.Entries[i]
	if c, ok := cl.p.str("comment"); ok {
		e.Comment = c
	}
	if cl.p.has("nomatch") {
		e.NoMatch = cl.p.bool("nomatch")
	}
	return nil, nil
}

func (s ipsetScope) removeEntry(cl *call) (any, error) {
	set, i, err := s.changeEntry(cl)
	if err != nil {
		return nil, err
	}
	set.Entries = slices.Delete(set.Entries, i, i+1)
	return nil, nil
}

func clusterIPSets(m func(ipsetScope, *call) (any, error)) handlerFunc {
	return func(cl *call) (any, error) { return m(ipsetScope{fw: cl.c.st.fw}, cl) }
}

func guestIPSets(m func(ipsetScope, *call) (any, error)) handlerFunc {
	return onGuest(func(cl *call, g *guest) (any, error) { return m(ipsetScope{fw: g.guestFW()}, cl) })
}

// firewallRoutes are the firewall endpoints of the route table.
func firewallRoutes() map[string]handlerFunc {
	return map[string]handlerFunc{
		"GET /cluster/firewall":                         subdirs("name", "aliases", "groups", "ipset", "macros", "options", "refs", "rules"),
		"GET /cluster/firewall/options":                 hFWClusterOptions,
		"PUT /cluster/firewall/options":                 hFWClusterOptionsSet,
		"GET /cluster/firewall/groups":                  hFWGroups,
		"POST /cluster/firewall/groups":                 hFWGroupCreate,
		"GET /cluster/firewall/groups/{group}":          groupRules(scopeList),
		"POST /cluster/firewall/groups/{group}":         groupRules(ruleScope.create),
		"DELETE /cluster/firewall/groups/{group}":       hFWGroupDelete,
		"GET /cluster/firewall/groups/{group}/{pos}":    groupRules(ruleScope.get),
		"PUT /cluster/firewall/groups/{group}/{pos}":    groupRules(ruleScope.update),
		"DELETE /cluster/firewall/groups/{group}/{pos}": groupRules(ruleScope.remove),
		"GET /cluster/firewall/ipset":                   clusterIPSets(ipsetScope.list),
		"POST /cluster/firewall/ipset":                  clusterIPSets(ipsetScope.create),
		"GET /cluster/firewall/ipset/{name}":            clusterIPSets(ipsetScope.entries),
		"POST /cluster/firewall/ipset/{name}":           clusterIPSets(ipsetScope.add),
		"DELETE /cluster/firewall/ipset/{name}":         clusterIPSets(ipsetScope.remove),
		"GET /cluster/firewall/ipset/{name}/{cidr}":     clusterIPSets(ipsetScope.getEntry),
		"PUT /cluster/firewall/ipset/{name}/{cidr}":     clusterIPSets(ipsetScope.updateEntry),
		"DELETE /cluster/firewall/ipset/{name}/{cidr}":  clusterIPSets(ipsetScope.removeEntry),

		"GET /nodes/{node}/qemu/{vmid}/firewall":                        guestSubdirs("aliases", "ipset", "log", "options", "refs", "rules"),
		"GET /nodes/{node}/qemu/{vmid}/firewall/options":                onGuest(hFWGuestOptions),
		"PUT /nodes/{node}/qemu/{vmid}/firewall/options":                onGuest(hFWGuestOptionsSet),
		"GET /nodes/{node}/qemu/{vmid}/firewall/rules":                  guestRules(scopeList),
		"POST /nodes/{node}/qemu/{vmid}/firewall/rules":                 guestRules(ruleScope.create),
		"GET /nodes/{node}/qemu/{vmid}/firewall/rules/{pos}":            guestRules(ruleScope.get),
		"PUT /nodes/{node}/qemu/{vmid}/firewall/rules/{pos}":            guestRules(ruleScope.update),
		"DELETE /nodes/{node}/qemu/{vmid}/firewall/rules/{pos}":         guestRules(ruleScope.remove),
		"GET /nodes/{node}/qemu/{vmid}/firewall/ipset":                  guestIPSets(ipsetScope.list),
		"POST /nodes/{node}/qemu/{vmid}/firewall/ipset":                 guestIPSets(ipsetScope.create),
		"GET /nodes/{node}/qemu/{vmid}/firewall/ipset/{name}":           guestIPSets(ipsetScope.entries),
		"POST /nodes/{node}/qemu/{vmid}/firewall/ipset/{name}":          guestIPSets(ipsetScope.add),
		"DELETE /nodes/{node}/qemu/{vmid}/firewall/ipset/{name}":        guestIPSets(ipsetScope.remove),
		"GET /nodes/{node}/qemu/{vmid}/firewall/ipset/{name}/{cidr}":    guestIPSets(ipsetScope.getEntry),
		"PUT /nodes/{node}/qemu/{vmid}/firewall/ipset/{name}/{cidr}":    guestIPSets(ipsetScope.updateEntry),
		"DELETE /nodes/{node}/qemu/{vmid}/firewall/ipset/{name}/{cidr}": guestIPSets(ipsetScope.removeEntry),
	}
}
