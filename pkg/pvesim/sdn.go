package pvesim

import (
	"fmt"
	"net/http"
	"net/netip"
	"sort"
	"strings"
)

// sdnConfig is one version of the SDN configuration (zones, vnets, subnets by id).
type sdnConfig struct {
	zones   map[string]map[string]any
	vnets   map[string]map[string]any
	subnets map[string]map[string]any // id "<zone>-<network>-<mask>"
}

// sdnState holds the pending configuration (what the API edits), the running one (what
// `PUT /cluster/sdn` applied) and the PVE IPAM's address mappings.
type sdnState struct {
	current *sdnConfig
	running *sdnConfig
	ips     map[string]*ipMapping // "<zone>/<ip>" -> mapping
}

type ipMapping struct {
	zone, vnet, subnet, ip, mac, hostname string
	vmid                                  int
	gateway                               bool
}

func newSDNConfig() *sdnConfig {
	return &sdnConfig{zones: map[string]map[string]any{}, vnets: map[string]map[string]any{}, subnets: map[string]map[string]any{}}
}

func newSDNState() *sdnState {
	return &sdnState{current: newSDNConfig(), running: newSDNConfig(), ips: map[string]*ipMapping{}}
}

func copyObjects(m map[string]map[string]any) map[string]map[string]any {
	out := make(map[string]map[string]any, len(m))
	for id, obj := range m {
		o := make(map[string]any, len(obj))
		for k, v := range obj {
			o[k] = v
		}
		out[id] = o
	}
	return out
}

func (s *sdnConfig) clone() *sdnConfig {
	return &sdnConfig{zones: copyObjects(s.zones), vnets: copyObjects(s.vnets), subnets: copyObjects(s.subnets)}
}

// sdnList renders one object kind as GET answers it, with pending=1 marking what
// differs from the running configuration ("state": new/changed/deleted, "pending": {...}).
func sdnList(cur, run map[string]map[string]any, idKey string, pending, running bool, keep func(map[string]any) bool) []map[string]any {
	out := []map[string]any{}
	if running {
		for _, id := range sortedKeys(run) {
			if keep(run[id]) {
				out = append(out, sdnEntry(run[id]))
			}
		}
		return out
	}
	ids := map[string]bool{}
	for id := range cur {
		ids[id] = true
	}
	if pending {
		for id := range run {
			ids[id] = true
		}
	}
	for _, id := range sortedKeys(ids) {
		c, r := cur[id], run[id]
		switch {
		case !pending:
			if keep(c) {
				out = append(out, sdnEntry(c))
			}
		case c == nil:
			if keep(r) {
				e := sdnEntry(r)
				e["state"] = "deleted"
				out = append(out, e)
			}
		case r == nil:
			if !keep(c) {
				continue
			}
			e := map[string]any{idKey: id, "type": c["type"], "state": "new"}
			pend := map[string]any{}
			for k, v := range c {
				if k != idKey && k != "type" {
					pend[k] = jsonValue(v)
				}
			}
			e["pending"] = pend
			out = append(out, e)
		default:
			if !keep(c) {
				continue
			}
			e := map[string]any{}
			pend := map[string]any{}
			for k, v := range c {
				if rv, ok := r[k]; ok && formatValue(rv) == formatValue(v) {
					e[k] = jsonValue(v)
				} else {
					pend[k] = jsonValue(v)
				}
			}
			for k := range r {
				if _, ok := c[k]; !ok {
					e[k] = jsonValue(r[k])
					pend[k] = nil
				}
			}
			if len(pend) > 0 {
				e["state"] = "changed"
				e["pending"] = pend
			}
			out = append(out, e)
		}
	}
	return out
}

func sdnEntry(obj map[string]any) map[string]any {
	e := make(map[string]any, len(obj))
	for k, v := range obj {
		e[k] = jsonValue(v)
	}
	return e
}

func all(map[string]any) bool { return true }

// hSDNApply applies the pending SDN configuration (a reloadnetworkall task).
func hSDNApply(cl *call) (any, error) {
	c := cl.c
	c.st.sdn.running = c.st.sdn.current.clone()
	t := c.st.runTask(c.nodes[0], "reloadnetworkall", "", cl.user, c.taskDuration(0, 0), func(t *task) error {
		for _, n := range c.nodes {
			if !c.st.nodes[n].online {
				t.log = append(t.log, n+": reloading network config failed: node is not online")
				continue
			}
			t.log = append(t.log, n+": reloading network config")
		}
		return nil
	})
	return t.upid, nil
}

func hSDNZones(cl *call) (any, error) {
	c := cl.c
	typ, _ := cl.p.str("type")
	keep := func(o map[string]any) bool { return typ == "" || o["type"] == typ }
	return sdnList(c.st.sdn.current.zones, c.st.sdn.running.zones, "zone", cl.p.bool("pending"), cl.p.bool("running"), keep), nil
}

func sdnGet(cur, run map[string]map[string]any, idKey, id, kind string, pending, running bool) (any, error) {
	list := sdnList(cur, run, idKey, pending, running, func(o map[string]any) bool { return o[idKey] == id })
	if len(list) == 0 {
		return nil, errorf(http.StatusInternalServerError, "sdn %s '%s' does not exist", kind, id)
	}
	return list[0], nil
}

func hSDNZoneGet(cl *call) (any, error) {
	c := cl.c
	return sdnGet(c.st.sdn.current.zones, c.st.sdn.running.zones, "zone", cl.vars["zone"], "zone", cl.p.bool("pending"), cl.p.bool("running"))
}

var zoneKeys = []string{"bridge", "peers", "tag", "mtu", "ipam", "dhcp", "dns", "dnszone", "reversedns", "nodes", "vlan-protocol", "vxlan-port", "bridge-disable-mac-learning", "isolate-ports", "vrf-vxlan", "controller", "mac", "exitnodes", "advertise-subnets", "disable-arp-nd-suppression", "exitnodes-local-routing", "exitnodes-primary", "rt-import", "fabric"}

func setKeys(obj map[string]any, p params, keys []string) {
	for _, k := range keys {
		if v, ok := p[k]; ok {
			obj[k] = v
		}
	}
	if d, ok := p.str("delete"); ok {
		for _, k := range splitList(d) {
			delete(obj, k)
		}
	}
}

func validateZone(z map[string]any) error {
	switch z["type"] {
	case "vlan", "qinq":
		if _, ok := z["bridge"]; !ok {
			return paramError("bridge", "missing bridge")
		}
	case "vxlan":
		if _, ok := z["peers"]; !ok {
			return paramError("peers", "missing peers")
		}
	case "simple", "evpn":
	default:
		return paramError("type", fmt.Sprintf("unsupported zone type '%v'", z["type"]))
	}
	return nil
}

// sdnKind is one kind of SDN object (zones, vnets) in the pending configuration.
type sdnKind struct {
	name     string // "zone", "vnet"
	objs     func(*sdnConfig) map[string]map[string]any
	keys     []string                      // settable keys
	initial  func(p params) map[string]any // a new object before keys
	validate func(cur *sdnConfig, obj map[string]any) error
}

var (
	zoneKind = sdnKind{
		name: "zone",
		objs: func(s *sdnConfig) map[string]map[string]any { return s.zones },
		keys: zoneKeys,
		initial: func(p params) map[string]any {
			return map[string]any{"zone": p.strOr("zone", ""), "type": p.strOr("type", ""), "ipam": "pve"}
		},
		validate: func(_ *sdnConfig, z map[string]any) error { return validateZone(z) },
	}
	vnetKind = sdnKind{
		name:     "vnet",
		objs:     func(s *sdnConfig) map[string]map[string]any { return s.vnets },
		keys:     vnetKeys,
		initial:  func(p params) map[string]any { return map[string]any{"vnet": p.strOr("vnet", ""), "type": "vnet"} },
		validate: (*sdnConfig).validateVnet,
	}
)

func (k sdnKind) create(cl *call) (any, error) {
	cur := cl.c.st.sdn.current
	obj := k.initial(cl.p)
	id := obj[k.name].(string)
	if k.objs(cur)[id] != nil {
		return nil, errorf(http.StatusInternalServerError, "sdn %s object ID '%s' already defined", k.name, id)
	}
	setKeys(obj, cl.p, k.keys)
	if err := k.validate(cur, obj); err != nil {
		return nil, err
	}
	k.objs(cur)[id] = obj
	return nil, nil
}

func (k sdnKind) update(cl *call) (any, error) {
	cur := cl.c.st.sdn.current
	id := cl.vars[k.name]
	old := k.objs(cur)[id]
	if old == nil {
		return nil, errorf(http.StatusInternalServerError, "sdn %s '%s' does not exist", k.name, id)
	}
	obj := copyObjects(map[string]map[string]any{id: old})[id]
	setKeys(obj, cl.p, k.keys)
	if err := k.validate(cur, obj); err != nil {
		return nil, err
	}
	k.objs(cur)[id] = obj
	return nil, nil
}

func hSDNZoneDelete(cl *call) (any, error) {
	c := cl.c
	id := cl.vars["zone"]
	if c.st.sdn.current.zones[id] == nil {
		return nil, errorf(http.StatusInternalServerError, "sdn zone '%s' does not exist", id)
	}
	for _, vn := range sortedKeys(c.st.sdn.current.vnets) {
		if c.st.sdn.current.vnets[vn]["zone"] == id {
			return nil, errorf(http.StatusInternalServerError, "Can't delete zone '%s' - vnet '%s' is using it", id, vn)
		}
	}
	delete(c.st.sdn.current.zones, id)
	return nil, nil
}

func hSDNVnets(cl *call) (any, error) {
	c := cl.c
	return sdnList(c.st.sdn.current.vnets, c.st.sdn.running.vnets, "vnet", cl.p.bool("pending"), cl.p.bool("running"), all), nil
}

func hSDNVnetGet(cl *call) (any, error) {
	c := cl.c
	return sdnGet(c.st.sdn.current.vnets, c.st.sdn.running.vnets, "vnet", cl.vars["vnet"], "vnet", cl.p.bool("pending"), cl.p.bool("running"))
}

var vnetKeys = []string{"zone", "tag", "alias", "vlanaware", "isolate-ports"}

func (s *sdnConfig) validateVnet(v map[string]any) error {
	zid, _ := v["zone"].(string)
	z := s.zones[zid]
	if z == nil {
		return paramError("zone", fmt.Sprintf("zone '%s' does not exist", zid))
	}
	_, hasTag := v["tag"]
	switch z["type"] {
	case "simple":
		if hasTag {
			return paramError("tag", "vlan tag is not allowed on simple zone")
		}
	case "vlan", "qinq":
		if !hasTag {
			return paramError("tag", "missing vlan tag")
		}
	case "vxlan", "evpn":
		if !hasTag {
			return paramError("tag", "missing vxlan tag")
		}
		// A VNI is unique in the cluster, whatever zone holds it.
		for _, id := range sortedKeys(s.vnets) {
			o := s.vnets[id]
			if id == v["vnet"] || o["tag"] == nil {
				continue
			}
			if ozone := s.zones[fmt.Sprint(o["zone"])]; ozone != nil && (ozone["type"] == "vxlan" || ozone["type"] == "evpn") && formatValue(o["tag"]) == formatValue(v["tag"]) {
				return paramError("tag", fmt.Sprintf("tag %s already exist in vnet %s", formatValue(v["tag"]), id))
			}
		}
	}
	return nil
}

func hSDNVnetDelete(cl *call) (any, error) {
	c := cl.c
	id := cl.vars["vnet"]
	cur := c.st.sdn.current
	if cur.vnets[id] == nil {
		return nil, errorf(http.StatusInternalServerError, "sdn vnet '%s' does not exist", id)
	}
	for _, sid := range sortedKeys(cur.subnets) {
		if cur.subnets[sid]["vnet"] == id {
			return nil, errorf(http.StatusInternalServerError, "Can't delete vnet '%s' - subnet '%s' exists", id, sid)
		}
	}
	delete(cur.vnets, id)
	return nil, nil
}

func subnetID(zone string, pfx netip.Prefix) string {
	return fmt.Sprintf("%s-%s-%d", zone, pfx.Addr(), pfx.Bits())
}

// subnetJSON renders a subnet as Proxmox answers it: network and mask split out, DHCP
// ranges parsed into {start-address, end-address} objects.
func subnetJSON(s map[string]any) map[string]any {
	e := sdnEntry(s)
	if pfx, err := netip.ParsePrefix(fmt.Sprint(s["cidr"])); err == nil {
		e["network"] = pfx.Addr().String()
		e["mask"] = fmt.Sprint(pfx.Bits())
	}
	for _, obj := range []map[string]any{e, mapOf(e["pending"])} {
		ranges, ok := obj["dhcp-range"].([]string)
		if !ok {
			continue
		}
		out := make([]map[string]any, 0, len(ranges))
		for _, r := range ranges {
			pr := parseProperty(r)
			out = append(out, map[string]any{"start-address": pr.get("start-address"), "end-address": pr.get("end-address")})
		}
		obj["dhcp-range"] = out
	}
	return e
}

func mapOf(v any) map[string]any {
	m, _ := v.(map[string]any)
	return m
}

func hSDNSubnets(cl *call) (any, error) {
	c := cl.c
	vnet := cl.vars["vnet"]
	keep := func(o map[string]any) bool { return o["vnet"] == vnet }
	list := sdnList(c.st.sdn.current.subnets, c.st.sdn.running.subnets, "subnet", cl.p.bool("pending"), cl.p.bool("running"), keep)
	for i, e := range list {
		list[i] = subnetJSON(e)
	}
	return list, nil
}

func hSDNSubnetGet(cl *call) (any, error) {
	c := cl.c
	e, err := sdnGet(c.st.sdn.current.subnets, c.st.sdn.running.subnets, "subnet", cl.vars["subnet"], "subnet", cl.p.bool("pending"), cl.p.bool("running"))
	if err != nil {
		return nil, err
	}
	return subnetJSON(e.(map[string]any)), nil
}

// parseRanges parses dhcp-range values "start-address=A,end-address=B".
func parseRanges(pfx netip.Prefix, v any) ([]string, error) {
	var raw []string
	switch v := v.(type) {
	case string:
		raw = []string{v}
	case []string:
		raw = v
	case []any:
		for _, e := range v {
			raw = append(raw, fmt.Sprint(e))
		}
	}
	for _, r := range raw {
		pr := parseProperty(r)
		a, err1 := netip.ParseAddr(pr.get("start-address"))
		b, err2 := netip.ParseAddr(pr.get("end-address"))
		if err1 != nil || err2 != nil {
			return nil, paramError("dhcp-range", "invalid format - missing start-address or end-address")
		}
		if !pfx.Contains(a) || !pfx.Contains(b) || b.Less(a) {
			return nil, paramError("dhcp-range", fmt.Sprintf("range %s-%s is not inside subnet %s", a, b, pfx))
		}
	}
	return raw, nil
}

func hSDNSubnetCreate(cl *call) (any, error) {
	c := cl.c
	vnet := cl.vars["vnet"]
	cur := c.st.sdn.current
	vn := cur.vnets[vnet]
	if vn == nil {
		return nil, errorf(http.StatusInternalServerError, "sdn vnet '%s' does not exist", vnet)
	}
	cidr, _ := cl.p.str("subnet")
	pfx, err := netip.ParsePrefix(cidr)
	if err != nil {
		return nil, paramError("subnet", "invalid format - invalid IP subnet '"+cidr+"'")
	}
	pfx = pfx.Masked()
	zone := vn["zone"].(string)
	id := subnetID(zone, pfx)
	if cur.subnets[id] != nil {
		return nil, errorf(http.StatusInternalServerError, "sdn subnet object ID '%s' already defined", id)
	}
	for _, sid := range sortedKeys(cur.subnets) {
		s := cur.subnets[sid]
		if s["zone"] != zone {
			continue
		}
		if other, err := netip.ParsePrefix(fmt.Sprint(s["cidr"])); err == nil && other.Overlaps(pfx) {
			return nil, errorf(http.StatusInternalServerError, "subnet %s overlaps with subnet %s in zone %s", pfx, other, zone)
		}
	}
	s := map[string]any{"subnet": id, "id": id, "type": "subnet", "cidr": pfx.String(), "vnet": vnet, "zone": zone}
	if err := c.st.sdn.fillSubnet(s, pfx, cl.p); err != nil {
		return nil, err
	}
	cur.subnets[id] = s
	if gw, ok := s["gateway"].(string); ok {
		c.st.sdn.ips[zone+"/"+gw] = &ipMapping{zone: zone, vnet: vnet, subnet: id, ip: gw, gateway: true}
	}
	return nil, nil
}

func (sd *sdnState) fillSubnet(s map[string]any, pfx netip.Prefix, p params) error {
	if gw, ok := p.str("gateway"); ok {
		a, err := netip.ParseAddr(gw)
		if err != nil || !pfx.Contains(a) {
			return paramError("gateway", fmt.Sprintf("gateway %s is not inside subnet %s", gw, pfx))
		}
		s["gateway"] = a.String()
	}
	if v, ok := p["dhcp-range"]; ok {
		ranges, err := parseRanges(pfx, v)
		if err != nil {
			return err
		}
		s["dhcp-range"] = ranges
	}
	for _, k := range []string{"snat", "dnszoneprefix", "dhcp-dns-server"} {
		if v, ok := p[k]; ok {
			s[k] = v
		}
	}
	if d, ok := p.str("delete"); ok {
		for _, k := range splitList(d) {
			delete(s, k)
		}
	}
	return nil
}

func hSDNSubnetUpdate(cl *call) (any, error) {
	c := cl.c
	cur := c.st.sdn.current
	id, s, err := cl.subnet()
	if err != nil {
		return nil, err
	}
	pfx, _ := netip.ParsePrefix(fmt.Sprint(s["cidr"]))
	ns := copyObjects(map[string]map[string]any{id: s})[id]
	if err := c.st.sdn.fillSubnet(ns, pfx, cl.p); err != nil {
		return nil, err
	}
	cur.subnets[id] = ns
	return nil, nil
}

// subnet is the {subnet} of {vnet} in the pending configuration.
func (cl *call) subnet() (string, map[string]any, error) {
	id := cl.vars["subnet"]
	s := cl.c.st.sdn.current.subnets[id]
	if s == nil || s["vnet"] != cl.vars["vnet"] {
		return "", nil, errorf(http.StatusInternalServerError, "sdn subnet '%s' does not exist", id)
	}
	return id, s, nil
}

func hSDNSubnetDelete(cl *call) (any, error) {
	c := cl.c
	cur := c.st.sdn.current
	id, _, err := cl.subnet()
	if err != nil {
		return nil, err
	}
	for _, m := range c.st.sdn.ips {
		if m.subnet == id && !m.gateway {
			return nil, errorf(http.StatusInternalServerError, "cannot delete subnet '%s', not empty", id)
		}
	}
	for k, m := range c.st.sdn.ips {
		if m.subnet == id {
			delete(c.st.sdn.ips, k)
		}
	}
	delete(cur.subnets, id)
	return nil, nil
}

// findSubnet finds the subnet of vnet containing ip.
func (sd *sdnState) findSubnet(zone, vnet string, ip netip.Addr) (map[string]any, error) {
	for _, id := range sortedKeys(sd.current.subnets) {
		s := sd.current.subnets[id]
		if s["vnet"] != vnet || s["zone"] != zone {
			continue
		}
		if pfx, err := netip.ParsePrefix(fmt.Sprint(s["cidr"])); err == nil && pfx.Contains(ip) {
			return s, nil
		}
	}
	return nil, errorf(http.StatusInternalServerError, "can't find any subnet for ip %s", ip)
}

func (cl *call) ipamTarget() (zone, vnet string, ip netip.Addr, err error) {
	zone, _ = cl.p.str("zone")
	vnet = cl.vars["vnet"]
	ipStr, _ := cl.p.str("ip")
	ip, perr := netip.ParseAddr(ipStr)
	if perr != nil {
		return "", "", ip, paramError("ip", "value does not look like a valid IP address")
	}
	vn := cl.c.st.sdn.current.vnets[vnet]
	if vn == nil {
		return "", "", ip, errorf(http.StatusInternalServerError, "sdn vnet '%s' does not exist", vnet)
	}
	if vn["zone"] != zone {
		return "", "", ip, paramError("zone", fmt.Sprintf("vnet '%s' is not in zone '%s'", vnet, zone))
	}
	return zone, vnet, ip, nil
}

// hIPCreate creates an IP mapping in the PVE IPAM. Claiming an address that is already
// mapped fails: the check and the insert happen under one lock, so concurrent claims of
// one address have exactly one winner.
func hIPCreate(cl *call) (any, error) {
	c := cl.c
	zone, vnet, ip, err := cl.ipamTarget()
	if err != nil {
		return nil, err
	}
	s, err := c.st.sdn.findSubnet(zone, vnet, ip)
	if err != nil {
		return nil, err
	}
	key := zone + "/" + ip.String()
	if c.st.sdn.ips[key] != nil {
		return nil, errorf(http.StatusInternalServerError, "IP '%s' already exist", ip)
	}
	mac, _ := cl.p.str("mac")
	c.st.sdn.ips[key] = &ipMapping{zone: zone, vnet: vnet, subnet: s["subnet"].(string), ip: ip.String(), mac: strings.ToLower(mac)}
	return nil, nil
}

func hIPUpdate(cl *call) (any, error) {
	c := cl.c
	zone, _, ip, err := cl.ipamTarget()
	if err != nil {
		return nil, err
	}
	m := c.st.sdn.ips[zone+"/"+ip.String()]
	if m == nil {
		return nil, errorf(http.StatusInternalServerError, "IP '%s' does not exist in IPAM", ip)
	}
	if mac, ok := cl.p.str("mac"); ok {
		m.mac = strings.ToLower(mac)
	}
	if vmid, ok := cl.p.int("vmid"); ok {
		m.vmid = int(vmid)
	}
	return nil, nil
}

func hIPDelete(cl *call) (any, error) {
	c := cl.c
	zone, _, ip, err := cl.ipamTarget()
	if err != nil {
		return nil, err
	}
	key := zone + "/" + ip.String()
	m := c.st.sdn.ips[key]
	if m == nil {
		return nil, errorf(http.StatusInternalServerError, "IP '%s' does not exist in IPAM", ip)
	}
	if m.gateway {
		return nil, errorf(http.StatusInternalServerError, "IP '%s' is the gateway of subnet '%s'", ip, m.subnet)
	}
	delete(c.st.sdn.ips, key)
	return nil, nil
}

func hIPAMs(cl *call) (any, error) {
	return []map[string]any{{"ipam": "pve", "type": "pve"}}, nil
}

func hIPAMStatus(cl *call) (any, error) {
	c := cl.c
	if cl.vars["ipam"] != "pve" {
		return nil, errorf(http.StatusInternalServerError, "sdn ipam '%s' does not exist", cl.vars["ipam"])
	}
	var list []*ipMapping
	for _, m := range c.st.sdn.ips {
		list = append(list, m)
	}
	sort.Slice(list, func(i, j int) bool {
		if list[i].zone != list[j].zone {
			return list[i].zone < list[j].zone
		}
		a, _ := netip.ParseAddr(list[i].ip)
		b, _ := netip.ParseAddr(list[j].ip)
		return a.Less(b)
	})
	out := []map[string]any{}
	for _, m := range list {
		_, sub, _ := strings.Cut(m.subnet, m.zone+"-")
		e := map[string]any{"zone": m.zone, "vnet": m.vnet, "subnet": sub, "ip": m.ip}
		if m.mac != "" {
			e["mac"] = m.mac
		}
		if m.vmid != 0 {
			e["vmid"] = fmt.Sprint(m.vmid)
		}
		if m.hostname != "" {
			e["hostname"] = m.hostname
		}
		if m.gateway {
			e["gateway"] = 1
		}
		out = append(out, e)
	}
	return out, nil
}

func hIPAMGet(cl *call) (any, error) {
	if cl.vars["ipam"] != "pve" {
		return nil, errorf(http.StatusInternalServerError, "sdn ipam '%s' does not exist", cl.vars["ipam"])
	}
	return map[string]any{"ipam": "pve", "type": "pve"}, nil
}

// dhcpMappings gives every NIC of g on a vnet whose zone runs DHCP an IPAM mapping
// before the guest starts, as Proxmox does: an existing mapping of the NIC's MAC is
// kept (the orchestrator's explicit claim), otherwise the next free address of the
// subnet's DHCP range is mapped to the MAC and VMID.
func (sd *sdnState) dhcpMappings(g *guest, t *task) error {
	for _, k := range sortedKeys(g.conf) {
		s, ok := g.conf[k].(string)
		if !ok || !netKeyR.MatchString(k) {
			continue
		}
		pr := parseProperty(s)
		vn := sd.running.vnets[pr.get("bridge")]
		if vn == nil {
			continue
		}
		zone, _ := vn["zone"].(string)
		if z := sd.running.zones[zone]; z == nil || z["dhcp"] == nil {
			continue
		}
		mac := ""
		for _, key := range pr.keys {
			if netModels[key] {
				mac = strings.ToLower(pr.get(key))
			}
		}
		if sd.leaseFor(mac) != nil {
			continue
		}
		ip, subnet, err := sd.nextFree(zone, pr.get("bridge"))
		if err != nil {
			return err
		}
		sd.ips[zone+"/"+ip] = &ipMapping{zone: zone, vnet: pr.get("bridge"), subnet: subnet, ip: ip, mac: mac, vmid: g.vmid, hostname: g.name()}
		t.log = append(t.log, fmt.Sprintf("%s: dhcp mapping %s -> %s", k, mac, ip))
	}
	return nil
}

// nextFree is the lowest unmapped address in the DHCP ranges of vnet's subnets.
func (sd *sdnState) nextFree(zone, vnet string) (string, string, error) {
	for _, id := range sortedKeys(sd.running.subnets) {
		s := sd.running.subnets[id]
		if s["vnet"] != vnet {
			continue
		}
		ranges, _ := s["dhcp-range"].([]string)
		for _, r := range ranges {
			a, err1 := netip.ParseAddr(propValue(r, "start-address"))
			b, err2 := netip.ParseAddr(propValue(r, "end-address"))
			if err1 != nil || err2 != nil {
				continue
			}
			for ip := a; ip.Compare(b) <= 0 && ip.IsValid(); ip = ip.Next() {
				if sd.ips[zone+"/"+ip.String()] == nil {
					return ip.String(), id, nil
				}
			}
		}
	}
	return "", "", fmt.Errorf("can't find any free ip in zone %s for vnet %s", zone, vnet)
}

// releaseVM drops the IPAM mappings of a destroyed guest.
func (sd *sdnState) releaseVM(vmid int) {
	for k, m := range sd.ips {
		if m.vmid == vmid && !m.gateway {
			delete(sd.ips, k)
		}
	}
}
