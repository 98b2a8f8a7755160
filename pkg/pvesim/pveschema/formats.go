package pveschema

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"regexp"
	"strconv"
	"strings"
)

// formatSet holds the named formats: verifier functions for simple formats and
// property-string definitions for the named property-string formats whose definitions the
// api-viewer schema does not carry (namedformats.json).
type formatSet struct {
	verifiers map[string]func(string) error
	props     map[string]map[string]*prop
	// validators check a parsed named property string as a whole (Proxmox's format
	// validators), after its keys were checked.
	validators map[string]func(Params) error
}

func newFormatSet(namedJSON []byte) (*formatSet, error) {
	drives, devs := qemuDeviceKeys()
	fs := &formatSet{verifiers: verifiers(drives, devs), props: map[string]map[string]*prop{}}
	for name, verify := range firewallVerifiers() {
		fs.verifiers[name] = verify
	}
	if err := json.Unmarshal(namedJSON, &fs.props); err != nil {
		return nil, fmt.Errorf("named formats: %w", err)
	}
	for name, f := range fs.props {
		if err := fs.prepareProp(&prop{FormatProps: f}, name); err != nil {
			return nil, fmt.Errorf("named formats: %w", err)
		}
	}
	fs.validators = map[string]func(Params) error{
		"pve-vm-cpu-conf": cpuFormatValidator(fs.props["pve-vm-cpu-conf"]),
		"prune-backups":   pruneBackupsValidator,
	}
	return fs, nil
}

// qemuDeviceKeys returns the VM disk keys (ide0, ..., efidisk0, tpmstate0) and the other
// bootable device keys (net0, usb0, hostpci0, ...) of a VM configuration.
func qemuDeviceKeys() (drives, devs map[string]bool) {
	counts := indexCounts()
	drives = map[string]bool{"efidisk0": true, "tpmstate0": true}
	devs = map[string]bool{}
	add := func(set map[string]bool, bases ...string) {
		for _, b := range bases {
			for i := 0; i < counts[b]; i++ {
				set[b+strconv.Itoa(i)] = true
			}
		}
	}
	add(drives, "ide", "sata", "scsi", "virtio")
	add(devs, "net", "usb", "hostpci")
	return drives, devs
}

// known reports whether a named format can be checked.
func (fs *formatSet) known(name string) bool {
	if fs.props[name] != nil || fs.verifiers[name] != nil {
		return true
	}
	if base, ok := strings.CutSuffix(name, "-list"); ok {
		return fs.verifiers[base] != nil
	}
	if base, ok := strings.CutSuffix(name, "-opt"); ok {
		return fs.verifiers[base] != nil
	}
	return false
}

// FormatNames lists every named format the engine checks (verifiers and named
// property-string formats); the "-list" and "-opt" variants of the simple ones are accepted
// too.
func (s *Schema) FormatNames() []string {
	names := map[string]bool{}
	for n := range s.formats.verifiers {
		names[n] = true
	}
	for n := range s.formats.props {
		names[n] = true
	}
	return sortedKeys(names)
}

var (
	nodeRE        = regexp.MustCompile(`^[a-zA-Z0-9]([a-zA-Z0-9\-]*[a-zA-Z0-9])?$`)
	vmidRE        = regexp.MustCompile(`^[1-9][0-9]{2,8}$`)
	storageIDRE   = regexp.MustCompile(`(?i)^[a-z][a-z0-9\-_.]*[a-z0-9]$`)
	configIDRE    = regexp.MustCompile(`(?i)^[a-z][a-z0-9_-]+$`)
	poolRE        = regexp.MustCompile(`^[A-Za-z0-9.\-_]+(?:/[A-Za-z0-9.\-_]+){0,2}$`)
	bridgeRE      = regexp.MustCompile(`^[-_.\w]+$`)
	ifaceRE       = regexp.MustCompile(`(?i)^[a-z][a-z0-9_]{1,20}([:.]\d+)?$`)
	dnsNameRE     = regexp.MustCompile(`^(([a-zA-Z0-9]([a-zA-Z0-9\-]*[a-zA-Z0-9])?)\.)*([a-zA-Z0-9]([a-zA-Z0-9\-]*[a-zA-Z0-9])?)$`)
	macRE         = regexp.MustCompile(`(?i)^[a-f0-9][02468ace](?::[a-f0-9]{2}){5}$`)
	diskSizeRE    = regexp.MustCompile(`^(\d+(\.\d+)?)([KMGT])?$`)
	urlencodedRE  = regexp.MustCompile(`^[-%a-zA-Z0-9_.!~*'()]*$`)
	tagRE         = regexp.MustCompile(`(?i)^[a-z0-9_][a-z0-9_\-+.]*$`)
	sdnIDRE       = regexp.MustCompile(`(?i)^[a-z][a-z0-9]*[a-z0-9]$`)
	fabricIDRE    = regexp.MustCompile(`(?i)^[a-zA-Z0-9][a-zA-Z0-9-]{0,6}[a-zA-Z0-9]?$`)
	volumeIDRE    = regexp.MustCompile(`(?i)^([a-z][a-z0-9\-_.]*[a-z0-9]):(.+)$`)
	lvmNameRE     = regexp.MustCompile(`(?i)^[a-z0-9][a-z0-9\-_.]*[a-z0-9]$`)
	cpusetPartRE  = regexp.MustCompile(`^\s*(\d+)(?:-(\d+))?\s*$`)
	startupRE     = regexp.MustCompile(`^(?:(?:order=)?\d+|up=\d+|down=\d+)$`)
	bgpRTRE       = regexp.MustCompile(`^(\d+):(\d+)$`)
	vlanRE        = regexp.MustCompile(`^(\d+)(?:-(\d+))?$`)
	dirOverRE     = regexp.MustCompile(`^([a-z]+)=([^.]*(?:\.?[^.]+)+)$`)
	storagePathRE = regexp.MustCompile(`^/[^;()]+`)
	hostPortRE    = regexp.MustCompile(`^([[:alnum:]\-.]+)(?::(\d+))?$`)
	bracketRE     = regexp.MustCompile(`^\[([^\]]+)\](?::(\d+))?$`)
	ipv6DotRE     = regexp.MustCompile(`^(.+?)(?:\.(\d+))?$`)
	hostRE        = regexp.MustCompile(`^[[:alnum:]\-.]+$`)
	taskStatusRE  = regexp.MustCompile(`(?i)^(ok|error|warning|unknown)$`)
	hotplugRE     = regexp.MustCompile(`^(network|disk|cpu|memory|usb|cloudinit)$`)
	replJobRE     = regexp.MustCompile(`^\d+-\d+$`)
	// haSIDRE and haVMSIDRE are HA resource ids: "vm:100", and the VMID
	// shortcut the resource endpoints accept ("100", "ct:101").
	haSIDRE   = regexp.MustCompile(`^[a-z]+:\S+$`)
	haVMSIDRE = regexp.MustCompile(`^((ct|vm):)?[1-9][0-9]{2,8}$`)
	// haNodeRE is a node of an HA rule with its optional priority ("pve1:2").
	haNodeRE = regexp.MustCompile(`^[^\s:]+(:\d+)?$`)
	// dayOfWeekRE is a day of a backup job's deprecated dow list.
	dayOfWeekRE = regexp.MustCompile(`^(mon|tue|wed|thu|fri|sat|sun)$`)
	// calendarRE is the alphabet of systemd-style calendar events
	// ("*/15", "mon..fri 02:30", "sat 1:00"); PVE::CalendarEvent parses
	// them further.
	calendarRE = regexp.MustCompile(`^[0-9a-zA-Z*/,:.\- ]+$`)
)

// storageContent are the content types a storage may hold (those of the dir plugin).
func storageContent(ct string) bool {
	switch ct {
	case "images", "rootdir", "vztmpl", "iso", "backup", "snippets", "none", "import":
		return true
	}
	return false
}

// verifiers returns the checks of Proxmox's simple named formats, each with the message
// Proxmox's verifier dies with (without the trailing newline). qemuDrives lists the VM
// disk keys (ide0, scsi30, efidisk0, ...) and qemuDevs the other bootable keys (net0, ...).
// emailOrUserRE is an email address or a user name (user@realm), loosely.
var emailOrUserRE = regexp.MustCompile(`^[^\s@,;]+(@[^\s@,;]+)?$`)

func verifiers(qemuDrives, qemuDevs map[string]bool) map[string]func(string) error {
	re := func(r *regexp.Regexp, msg string) func(string) error {
		return func(v string) error {
			if !r.MatchString(v) {
				return errors.New(strings.ReplaceAll(msg, "%v", v))
			}
			return nil
		}
	}
	ip := func(v string) bool { return isIPv4(v) || isIPv6(v) }
	return map[string]func(string) error{
		"string":                   func(string) error { return nil },
		"pve-node":                 re(nodeRE, "value does not look like a valid node name"),
		"pve-vmid":                 re(vmidRE, "value does not look like a valid VM ID"),
		"pve-storage-id":           re(storageIDRE, "storage ID '%v' contains illegal characters"),
		"pve-configid":             re(configIDRE, "invalid configuration ID '%v'"),
		"pve-bridge-id":            re(bridgeRE, "invalid bridge ID '%v'"),
		"pve-iface":                re(ifaceRE, "invalid network interface name '%v'"),
		"dns-name":                 re(dnsNameRE, "value does not look like a valid DNS name"),
		"mac-addr":                 re(macRE, "value does not look like a valid unicast MAC address"),
		"urlencoded":               re(urlencodedRE, "invalid urlencoded string: %v"),
		"disk-size":                re(diskSizeRE, "value does not look like a valid disk size: %v"),
		"pve-tag":                  re(tagRE, "invalid characters in tag"),
		"pve-sdn-zone-id":          sdnID("zone", 8),
		"pve-sdn-vnet-id":          sdnID("vnet", 8),
		"pve-sdn-ipam-id":          sdnID("ipam", 0),
		"pve-sdn-fabric-id":        re(fabricIDRE, "Fabric ID '%v' contains illegal characters"),
		"pve-storage-vgname":       re(lvmNameRE, "lvm name '%v' contains illegal characters"),
		"pve-storage-options":      re(regexp.MustCompile(`^\S+$`), "invalid options '%v'"),
		"pve-storage-path":         re(storagePathRE, "value does not look like a valid absolute path"),
		"pve-task-status-type":     re(taskStatusRE, "invalid status '%v'"),
		"pve-replication-job-id":   re(replJobRE, "replication job ID '%v' invalid"),
		"pve-calendar-event":       re(calendarRE, "unable to parse calendar event '%v'"),
		"pve-day-of-week":          re(dayOfWeekRE, "invalid day '%v'"),
		"pve-ha-resource-id":       re(haSIDRE, "value does not look like a valid ha resource id"),
		"pve-ha-resource-or-vm-id": re(haVMSIDRE, "value does not look like a valid ha resource id"),
		"pve-ha-node":              re(haNodeRE, "value does not look like a valid ha node"),
		"email-or-username":        re(emailOrUserRE, "value does not look like a valid email address or user name"),
		"pve-startup-order": func(v string) error {
			if v == "" || v == "0" {
				return errors.New("unable to parse startup options")
			}
			for _, part := range strings.Split(v, ",") {
				if strings.TrimSpace(part) != "" && !startupRE.MatchString(part) {
					return errors.New("unable to parse startup options")
				}
			}
			return nil
		},
		"pve-phys-bits": func(v string) error {
			if v == "host" || isUintRange(v, 8, 64) && len(v) <= 2 {
				return nil
			}
			return errors.New("value must be an integer between 8 and 64 or 'host'")
		},
		"pve-poolid": func(v string) error {
			if len(strings.Split(strings.TrimRight(v, "/"), "/")) > 3 {
				return fmt.Errorf("pool name '%s' nested too deeply (max levels = 3)", v)
			}
			if !poolRE.MatchString(v) {
				return fmt.Errorf("pool name '%s' contains invalid characters", v)
			}
			return nil
		},
		"ipv4": func(v string) error {
			if !isIPv4(v) {
				return errors.New("value does not look like a valid IPv4 address")
			}
			return nil
		},
		"ipv6": func(v string) error {
			if !isIPv6(v) {
				return errors.New("value does not look like a valid IPv6 address")
			}
			return nil
		},
		"ip": func(v string) error {
			if !ip(v) {
				return errors.New("value does not look like a valid IP address")
			}
			return nil
		},
		"ipv4mask": func(v string) error {
			a, err := netip.ParseAddr(v)
			if err != nil || !a.Is4() {
				return errors.New("value does not look like a valid IP netmask")
			}
			b := a.As4()
			m := uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3])
			if (^m)&(^m+1) != 0 {
				return errors.New("value does not look like a valid IP netmask")
			}
			return nil
		},
		"CIDRv4": func(v string) error {
			if !isCIDR(v, 4) {
				return errors.New("value does not look like a valid IPv4 CIDR network")
			}
			return nil
		},
		"CIDRv6": func(v string) error {
			if !isCIDR(v, 6) {
				return errors.New("value does not look like a valid IPv6 CIDR network")
			}
			return nil
		},
		"CIDR": func(v string) error {
			if !isCIDR(v, 4) && !isCIDR(v, 6) {
				return errors.New("value does not look like a valid CIDR network")
			}
			return nil
		},
		"pve-ipv4-config": func(v string) error {
			if v == "dhcp" || v == "manual" || isCIDR(v, 4) {
				return nil
			}
			return errors.New("value does not look like a valid ipv4 network configuration")
		},
		"pve-ipv6-config": func(v string) error {
			if v == "dhcp" || v == "auto" || v == "manual" || isCIDR(v, 6) {
				return nil
			}
			return errors.New("value does not look like a valid ipv6 network configuration")
		},
		"address": func(v string) error {
			if ip(v) || dnsNameRE.MatchString(v) {
				return nil
			}
			return fmt.Errorf("value does not look like a valid address: %s", v)
		},
		"pve-storage-server": func(v string) error {
			if ip(v) || dnsNameRE.MatchString(v) {
				return nil
			}
			return errors.New("value does not look like a valid server name or IP address")
		},
		"pve-storage-portal-dns": func(v string) error {
			if !isHostAndPort(v) {
				return errors.New("value does not look like a valid portal address")
			}
			return nil
		},
		"pve-sdn-subnet-id": func(v string) error {
			cidr := v
			if !strings.Contains(v, "/") {
				parts := strings.Split(v, "-")
				for len(parts) < 3 {
					parts = append(parts, "")
				}
				cidr = parts[1] + "/" + parts[2]
			}
			if !isCIDR(cidr, 4) && !isCIDR(cidr, 6) {
				return errors.New("value does not look like a valid CIDR network")
			}
			return nil
		},
		"pve-sdn-bgp-rt": func(v string) error {
			m := bgpRTRE.FindStringSubmatch(v)
			if m == nil || !isUint(m[1], 4294967295) || !isUint(m[2], 4294967295) {
				return errors.New("value does not look like a valid bgp route-target")
			}
			return nil
		},
		"pve-vlan-id-or-range": func(v string) error {
			m := vlanRE.FindStringSubmatch(v)
			if m == nil {
				return fmt.Errorf("invalid VLAN configuration '%s'", v)
			}
			for _, tag := range m[1:] {
				if tag != "" && !isUintRange(tag, 2, 4094) {
					return fmt.Errorf("invalid VLAN tag '%s'", tag)
				}
			}
			if m[2] != "" && !isUintLess(m[1], m[2]) {
				return fmt.Errorf("VLAN range must go from lower to higher tag '%s'", v)
			}
			return nil
		},
		"pve-cpuset": func(v string) error {
			for _, part := range strings.Split(strings.TrimRight(v, ","), ",") {
				if v == "" {
					break
				}
				m := cpusetPartRE.FindStringSubmatch(part)
				if m == nil || m[2] != "" && isUintLess(m[2], m[1]) {
					return errors.New("unable to parse cpuset option")
				}
			}
			return nil
		},
		"pve-hotplug-features": func(v string) error {
			if v == "0" {
				return nil
			}
			if v == "1" {
				v = "network,disk,usb"
			}
			features := splitList(v)
			for _, f := range features {
				if !hotplugRE.MatchString(f) {
					return fmt.Errorf("invalid hotplug feature '%s'", f)
				}
			}
			if len(features) == 0 {
				return errors.New("unable to parse hotplug option")
			}
			return nil
		},
		"pve-qm-bootdisk": func(v string) error {
			if !qemuDrives[v] {
				return fmt.Errorf("invalid boot disk '%s'", v)
			}
			return nil
		},
		"pve-qm-bootdev": func(v string) error {
			if (qemuDrives[v] && !strings.HasPrefix(v, "efidisk") && !strings.HasPrefix(v, "tpmstate")) || qemuDevs[v] {
				return nil
			}
			return fmt.Errorf("invalid boot device '%s'", v)
		},
		"pve-volume-id": verifyVolumeID,
		"pve-volume-id-or-qm-path": func(v string) error {
			if v == "none" || v == "cdrom" || strings.HasPrefix(v, "/") {
				return nil
			}
			return verifyVolumeID(v)
		},
		"pve-volume-id-or-absolute-path": func(v string) error {
			if strings.HasPrefix(v, "/") {
				return nil
			}
			return verifyVolumeID(v)
		},
		"pve-storage-content": func(v string) error {
			if !storageContent(v) {
				return fmt.Errorf("invalid content type '%s'", v)
			}
			return nil
		},
		"pve-dir-override": func(v string) error {
			m := dirOverRE.FindStringSubmatch(v)
			if m == nil {
				return fmt.Errorf("invalid override '%s'", v)
			}
			if !storageContent(m[1]) {
				return fmt.Errorf("invalid content type '%s'", m[1])
			}
			if len(m[2]) >= 1023 {
				return fmt.Errorf("invalid override '%s'", v)
			}
			for _, c := range strings.Split(m[2], "/") {
				if len(c) >= 255 {
					return fmt.Errorf("invalid override '%s'", v)
				}
			}
			return nil
		},
		"storage-pair": func(v string) error {
			for _, entry := range splitList(v) {
				if entry == "1" {
					continue
				}
				ids := []string{entry}
				if src, dst, ok := strings.Cut(entry, ":"); ok && src != "" && dst != "" && !strings.Contains(dst, ":") {
					ids = []string{src, dst}
				}
				for _, id := range ids {
					if !storageIDRE.MatchString(id) {
						return fmt.Errorf("entry '%s' contains invalid ID - storage ID '%s' contains illegal characters", entry, id)
					}
				}
			}
			return nil
		},
	}
}

func sdnID(kind string, maxLen int) func(string) error {
	return func(v string) error {
		if !sdnIDRE.MatchString(v) {
			return fmt.Errorf("%s ID '%s' contains illegal characters", kind, v)
		}
		if maxLen > 0 && len(v) > maxLen {
			return fmt.Errorf("%s ID '%s' can't be more length than %d characters", kind, v, maxLen)
		}
		return nil
	}
}

func verifyVolumeID(v string) error {
	if !volumeIDRE.MatchString(v) {
		return fmt.Errorf("unable to parse volume ID '%s'", v)
	}
	return nil
}

func isIPv4(v string) bool {
	a, err := netip.ParseAddr(v)
	return err == nil && a.Is4()
}

func isIPv6(v string) bool {
	a, err := netip.ParseAddr(v)
	return err == nil && a.Is6() && a.Zone() == ""
}

// isCIDR checks "address/prefix" of the given IP version with Proxmox's prefix range
// (8 to 32 for IPv4, 8 to 128 for IPv6); host bits may be set.
func isCIDR(v string, version int) bool {
	addr, bits, ok := strings.Cut(v, "/")
	if !ok || bits == "" || len(bits) > 3 {
		return false
	}
	for _, c := range bits {
		if c < '0' || c > '9' {
			return false
		}
	}
	n, _ := strconv.Atoi(bits)
	if version == 4 {
		return isIPv4(addr) && n > 7 && n <= 32
	}
	return isIPv6(addr) && n > 7 && n <= 128
}

func isUint(s string, maxVal uint64) bool {
	n, err := strconv.ParseUint(s, 10, 64)
	return err == nil && n <= maxVal
}

func isUintRange(s string, lo, hi uint64) bool {
	n, err := strconv.ParseUint(s, 10, 64)
	return err == nil && n >= lo && n <= hi
}

// isUintLess compares two decimal strings of any length numerically: a < b.
func isUintLess(a, b string) bool {
	a, b = strings.TrimLeft(a, "0"), strings.TrimLeft(b, "0")
	if len(a) != len(b) {
		return len(a) < len(b)
	}
	return a < b
}

// isHostAndPort is Proxmox's parse_host_and_port: an IPv4 address or host name with an
// optional ":port", anything in brackets with an optional ":port", or an IPv6 address with
// an optional ".port".
func isHostAndPort(v string) bool {
	if m := hostPortRE.FindStringSubmatch(v); m != nil {
		return true
	}
	if m := bracketRE.FindStringSubmatch(v); m != nil {
		h := m[1]
		return isIPv6(h) || isIPv4(h) || hostRE.MatchString(h)
	}
	if m := ipv6DotRE.FindStringSubmatch(v); m != nil && isIPv6(m[1]) {
		return true
	}
	return isIPv6(v)
}
