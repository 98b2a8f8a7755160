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
}

func newFormatSet(namedJSON []byte) (*formatSet, error) {
	fs := &formatSet{verifiers: verifiers(), props: map[string]map[string]*prop{}}
	for name, v := range cpuVerifiers(cpuModels()) {
		fs.verifiers[name] = v
	}
	if err := json.Unmarshal(namedJSON, &fs.props); err != nil {
		return nil, fmt.Errorf("named formats: %w", err)
	}
	for name, f := range fs.props {
		if err := fs.prepareProp(&prop{FormatProps: f}, name); err != nil {
			return nil, fmt.Errorf("named formats: %w", err)
		}
	}
	return fs, nil
}

// known reports whether a named format can be checked.
func (fs *formatSet) known(name string) bool {
	if fs.props[name] != nil || fs.verifiers[name] != nil {
		return true
	}
	if base, ok := listBase(name); ok {
		return fs.known(base)
	}
	if base, ok := strings.CutSuffix(name, "-opt"); ok {
		return fs.known(base)
	}
	return false
}

// FormatNames lists every named format the engine checks (verifiers and named
// property-string formats); "-list", "-alist" and "-opt" variants of each are accepted too.
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
	fabricIDRE    = regexp.MustCompile(`^[a-zA-Z0-9][a-zA-Z0-9-]{0,6}[a-zA-Z0-9]?$`)
	volumeIDRE    = regexp.MustCompile(`(?i)^([a-z][a-z0-9\-_.]*[a-z0-9]):(.+)$`)
	vgNameRE      = regexp.MustCompile(`^[a-zA-Z0-9.+_][a-zA-Z0-9.+_\-]+$`)
	cpusetPartRE  = regexp.MustCompile(`^\s*(\d+)(?:-(\d+))?\s*$`)
	bootdiskRE    = regexp.MustCompile(`^(ide|sata|scsi|virtio|efidisk|tpmstate)\d+$`)
	bootdevRE     = regexp.MustCompile(`^(ide|sata|scsi|virtio|efidisk|tpmstate|net|hostpci|usb)\d+$`)
	startupPartRE = regexp.MustCompile(`^(?:(?:order=)?\d+|up=\d+|down=\d+)$`)
	rtRE          = regexp.MustCompile(`^(\d+):(\d+)$`)
	dirOverrideRE = regexp.MustCompile(`^([a-z]+)=(/.+|[^/].*)$`)
	portalRE      = regexp.MustCompile(`^(?:\[([^\]]+)\]|([^:\[\]]+))(?::(\d+))?$`)
	emailRE       = regexp.MustCompile(`^(\w+)([\-+.][\w]+)*@(\w[\-\w]*\.){1,5}([A-Za-z]){2,63}$`)
)

// verifiers returns the checks of Proxmox's simple named formats. Each error text is the
// message Proxmox's verifier dies with (without the trailing newline).
func verifiers() map[string]func(string) error {
	re := func(r *regexp.Regexp, msg string) func(string) error {
		return func(v string) error {
			if !r.MatchString(v) {
				return errors.New(strings.ReplaceAll(msg, "%v", v))
			}
			return nil
		}
	}
	return map[string]func(string) error{
		"string":         func(string) error { return nil },
		"pve-node":       re(nodeRE, "value does not look like a valid node name"),
		"pve-vmid":       re(vmidRE, "value does not look like a valid VM ID"),
		"pve-storage-id": re(storageIDRE, "storage ID '%v' contains illegal characters"),
		"pve-configid":   re(configIDRE, "invalid configuration ID '%v'"),
		"pve-poolid":     re(poolRE, "pool name '%v' contains invalid characters"),
		"pve-bridge-id":  re(bridgeRE, "invalid bridge ID '%v'"),
		"pve-iface":      re(ifaceRE, "invalid network interface name '%v'"),
		"dns-name":       re(dnsNameRE, "value does not look like a valid DNS name"),
		"mac-addr":       re(macRE, "value does not look like a valid unicast MAC address"),
		"urlencoded":     re(urlencodedRE, "invalid urlencoded string: %v"),
		"email":          re(emailRE, "value does not look like a valid email address"),
		"disk-size":      re(diskSizeRE, "value does not look like a valid disk size: %v"),
		"pve-tag":        re(tagRE, "invalid characters in tag '%v'"),
		"pve-storage-vgname": re(vgNameRE,
			"value does not look like a valid volume group name"),
		"pve-qm-bootdisk": re(bootdiskRE, "invalid boot disk '%v'"),
		"pve-qm-bootdev":  re(bootdevRE, "invalid boot device '%v'"),
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
			if !isIPv4(v) && !isIPv6(v) {
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
			if m == 0 || (^m)&(^m+1) != 0 {
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
			if isIPv4(v) || isIPv6(v) || dnsNameRE.MatchString(v) {
				return nil
			}
			return fmt.Errorf("value does not look like a valid address: %s", v)
		},
		"pve-storage-server": func(v string) error {
			if isIPv4(v) || isIPv6(v) || dnsNameRE.MatchString(v) {
				return nil
			}
			return fmt.Errorf("value does not look like a valid server name or IP address")
		},
		"pve-storage-portal-dns": func(v string) error {
			m := portalRE.FindStringSubmatch(v)
			if m != nil {
				host := m[1] + m[2]
				if (m[1] != "" && isIPv6(host)) || (m[2] != "" && (isIPv4(host) || dnsNameRE.MatchString(host))) {
					if m[3] == "" || validPort(m[3]) {
						return nil
					}
				}
			}
			if isIPv6(v) {
				return nil
			}
			return fmt.Errorf("value does not look like a valid portal address")
		},
		"pve-tag-list": func(v string) error {
			tags := splitList(v)
			if len(tags) == 0 {
				return errors.New("tag list cannot be empty")
			}
			for _, t := range tags {
				if !tagRE.MatchString(t) {
					return fmt.Errorf("invalid characters in tag '%s'", t)
				}
			}
			return nil
		},
		"pve-sdn-zone-id": sdnID("zone", 8),
		"pve-sdn-vnet-id": sdnID("vnet", 8),
		"pve-sdn-ipam-id": re(storageIDRE, "ipam ID '%v' contains illegal characters"),
		"pve-sdn-fabric-id": func(v string) error {
			if !fabricIDRE.MatchString(v) {
				return fmt.Errorf("fabric ID '%s' contains illegal characters", v)
			}
			return nil
		},
		"pve-sdn-subnet-id": func(v string) error {
			cidr := v
			if !strings.Contains(v, "/") {
				parts := strings.SplitN(v, "-", 3)
				if len(parts) != 3 {
					return errors.New("value does not look like a valid CIDR network")
				}
				cidr = parts[1] + "/" + parts[2]
			}
			if !isCIDR(cidr, 4) && !isCIDR(cidr, 6) {
				return errors.New("value does not look like a valid CIDR network")
			}
			return nil
		},
		"pve-sdn-bgp-rt": func(v string) error {
			m := rtRE.FindStringSubmatch(v)
			if m == nil {
				if i := strings.LastIndex(v, ":"); i > 0 && isIPv4(v[:i]) && isUint(v[i+1:], 65535) {
					return nil
				}
				return fmt.Errorf("value '%s' does not look like a valid route target", v)
			}
			if !isUint(m[1], 4294967295) || !isUint(m[2], 4294967295) {
				return fmt.Errorf("value '%s' does not look like a valid route target", v)
			}
			return nil
		},
		"pve-vlan-id-or-range": func(v string) error {
			lo, hi, isRange := strings.Cut(v, "-")
			if !isRange {
				hi = lo
			}
			a, errA := strconv.Atoi(lo)
			b, errB := strconv.Atoi(hi)
			if errA != nil || errB != nil || a < 2 || b > 4094 || a > b {
				return fmt.Errorf("invalid VLAN tag or range '%s'", v)
			}
			return nil
		},
		"pve-task-status-type": func(v string) error {
			switch v {
			case "ok", "error", "warning", "unknown":
				return nil
			}
			return fmt.Errorf("invalid task status type '%s'", v)
		},
		"pve-cpuset": func(v string) error {
			n := 0
			for _, part := range strings.Split(v, ",") {
				m := cpusetPartRE.FindStringSubmatch(part)
				if m == nil {
					return errors.New("value does not look like a valid CPU set")
				}
				a, _ := strconv.Atoi(m[1])
				b := a
				if m[2] != "" {
					b, _ = strconv.Atoi(m[2])
				}
				if a > b || b >= 8192 {
					return errors.New("value does not look like a valid CPU set")
				}
				n++
			}
			if n == 0 {
				return errors.New("value does not look like a valid CPU set")
			}
			return nil
		},
		"pve-hotplug-features": func(v string) error {
			if v == "0" || v == "1" {
				return nil
			}
			for _, f := range strings.Split(v, ",") {
				switch f {
				case "network", "disk", "cpu", "memory", "usb", "cloudinit":
				default:
					return fmt.Errorf("invalid hotplug feature '%s'", f)
				}
			}
			return nil
		},
		"pve-startup-order": func(v string) error {
			if v == "" {
				return errors.New("unable to parse startup options")
			}
			for _, part := range strings.Split(v, ",") {
				if strings.TrimSpace(part) == "" {
					continue
				}
				if !startupPartRE.MatchString(part) {
					return errors.New("unable to parse startup options")
				}
			}
			return nil
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
		"pve-storage-path": func(v string) error {
			if !strings.HasPrefix(v, "/") || strings.ContainsAny(v, ";()") || strings.Contains(v, "\x00") {
				return errors.New("value does not look like a valid absolute path")
			}
			return nil
		},
		"pve-storage-content": func(v string) error {
			switch v {
			case "images", "rootdir", "vztmpl", "iso", "backup", "snippets", "import", "none":
				return nil
			}
			return fmt.Errorf("invalid content type '%s'", v)
		},
		"pve-storage-options": func(v string) error {
			if v == "" || strings.ContainsAny(v, " \t\n") {
				return fmt.Errorf("invalid options '%s'", v)
			}
			return nil
		},
		"pve-dir-override": func(v string) error {
			m := dirOverrideRE.FindStringSubmatch(v)
			if m == nil {
				return fmt.Errorf("invalid content-dirs override '%s'", v)
			}
			switch m[1] {
			case "images", "rootdir", "vztmpl", "iso", "backup", "snippets", "import":
				return nil
			}
			return fmt.Errorf("invalid content type '%s'", m[1])
		},
		"storage-pair": func(v string) error {
			if v == "1" {
				return nil
			}
			src, dst, pair := strings.Cut(v, ":")
			if !storageIDRE.MatchString(src) || pair && !storageIDRE.MatchString(dst) {
				return fmt.Errorf("storage ID '%s' contains illegal characters", v)
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
		if len(v) > maxLen {
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

func validPort(s string) bool {
	n, err := strconv.Atoi(s)
	return err == nil && n > 0 && n < 65536
}
