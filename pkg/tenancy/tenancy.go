// Package tenancy holds the conventions by which flexplane marks, in Proxmox
// itself, what it owns and which VDC each thing belongs to: guest tags, the
// pool of a VDC, the SDN zone and VNet ids of a VDC's networks, and the
// opaque global ids the API hands out. Proxmox is the system of record, so
// these conventions are the only place tenancy is written down: every read
// that filters by VDC and every write that creates something for a VDC uses
// this package, never its own string formatting.
package tenancy

import (
	"crypto/sha256"
	"encoding/base32"
	"encoding/base64"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strconv"
	"strings"
)

// ManagedTag marks every guest flexplane created.
const ManagedTag = "flexplane"

// vdcTagPrefix starts the tag that names a guest's VDC.
const vdcTagPrefix = "fp-vdc-"

// VDCTag is the Proxmox tag that places a guest in vdc. VDC names are DNS
// labels (pkg/catalog validates them), which are valid Proxmox tags.
func VDCTag(vdc string) string { return vdcTagPrefix + vdc }

// SplitTags splits a Proxmox tag list as Proxmox writes it (';' separated,
// though ',' and spaces are accepted on input) into its tags.
func SplitTags(tags string) []string {
	return strings.FieldsFunc(tags, func(r rune) bool { return r == ';' || r == ',' || r == ' ' })
}

// JoinTags renders tags the way Proxmox stores them: sorted, unique, ';'.
func JoinTags(tags []string) string {
	t := slices.Clone(tags)
	slices.Sort(t)
	return strings.Join(slices.Compact(t), ";")
}

// VDCOf returns the VDC named by a guest's tags and whether the guest is one
// flexplane manages. A guest without exactly one VDC tag belongs to no VDC.
func VDCOf(tags []string) (vdc string, managed bool) {
	managed = slices.Contains(tags, ManagedTag)
	n := 0
	for _, t := range tags {
		if v, ok := strings.CutPrefix(t, vdcTagPrefix); ok && v != "" {
			vdc = v
			n++
		}
	}
	if !managed || n != 1 {
		return "", managed
	}
	return vdc, true
}

// GuestTags are the tags of a new guest of vdc, plus any extra tags.
func GuestTags(vdc string, extra ...string) string {
	return JoinTags(append([]string{ManagedTag, VDCTag(vdc)}, extra...))
}

// CreatingTag marks a guest whose create has not finished: whoever sees it
// on a guest no live operation works on finishes the create from the
// intent recorded on the guest, or cleans it up.
const CreatingTag = "fp-creating"

// Creating reports whether a guest's tags say its create has not finished:
// it carries CreatingTag, or it is a guest flexplane manages with no VDC tag
// yet (a fresh clone of a flexplane template, in the first moments of a
// create). What Proxmox itself says (a create or clone lock) and that a
// template is never creating are pveapi.Resource.State's.
func Creating(tags []string) bool {
	if slices.Contains(tags, CreatingTag) {
		return true
	}
	vdc, managed := VDCOf(tags)
	return managed && vdc == ""
}

// opTagPrefix starts the tag naming the operation that works on a guest.
const opTagPrefix = "fp-op-"

// OpTag is the tag naming operation op (an id of lower-case letters and
// digits) on the guest it works on.
func OpTag(op string) string { return opTagPrefix + op }

// OpOf returns the operation named by a guest's tags ("" if none).
func OpOf(tags []string) string {
	for _, t := range tags {
		if v, ok := strings.CutPrefix(t, opTagPrefix); ok && v != "" {
			return v
		}
	}
	return ""
}

// PoolID is the Proxmox pool that holds the guests of vdc.
func PoolID(vdc string) string { return "fp-" + vdc }

// sdnIDLen is the longest SDN zone or VNet id Proxmox accepts.
const sdnIDLen = 8

var lowerBase32 = base32.NewEncoding("abcdefghijklmnopqrstuvwxyz234567").WithPadding(base32.NoPadding)

// sdnID derives an SDN id of at most 8 characters from parts: Proxmox limits
// SDN zone and VNet ids to 8 characters, too short for human names, so the
// id is a prefix letter and a hash, and the names live in the VNet alias.
func sdnID(prefix byte, parts ...string) string {
	sum := sha256.Sum256([]byte(strings.Join(parts, "\x00")))
	return string(prefix) + lowerBase32.EncodeToString(sum[:])[:sdnIDLen-1]
}

// SDNZoneID is the Proxmox SDN zone that is the layer-3 domain of vdc.
func SDNZoneID(vdc string) string { return sdnID('f', vdc) }

// VNetID is the Proxmox SDN VNet of the network named network in vdc.
func VNetID(vdc, network string) string { return sdnID('n', vdc, network) }

// aliasPrefix starts the alias of every VNet flexplane created.
const aliasPrefix = "flexplane:"

// VNetAlias is the alias written on a VNet: it records the VDC and the
// network's name, which the VNet id (a hash) cannot carry.
func VNetAlias(vdc, network string) string { return aliasPrefix + vdc + ":" + network }

// ParseVNetAlias reverses VNetAlias; ok is false for VNets flexplane did not create.
func ParseVNetAlias(alias string) (vdc, network string, ok bool) {
	rest, found := strings.CutPrefix(alias, aliasPrefix)
	if !found {
		return "", "", false
	}
	vdc, network, ok = strings.Cut(rest, ":")
	if !ok || vdc == "" || network == "" {
		return "", "", false
	}
	return vdc, network, true
}

// VNetOf returns the VDC a Proxmox VNet belongs to, given the VNet's SDN
// zone and alias: it belongs to vdc when flexplane created it for vdc (its
// alias names vdc) and it lies in vdc's SDN zone (an alias alone can be
// written by anyone who edits the VNet). This is the one check of VNet
// ownership, for reads and writes alike.
func VNetOf(sdnZone, alias string) (vdc, network string, ok bool) {
	vdc, network, ok = ParseVNetAlias(alias)
	if !ok || sdnZone != SDNZoneID(vdc) {
		return "", "", false
	}
	return vdc, network, true
}

// VNetBelongs reports whether the VNet of sdnZone and alias belongs to vdc
// (VNetOf).
func VNetBelongs(vdc, sdnZone, alias string) bool {
	owner, _, ok := VNetOf(sdnZone, alias)
	return ok && owner == vdc
}

// ErrBadID is returned (wrapped) for an id that is not one the API handed out.
var ErrBadID = errors.New("malformed id")

// VMRef locates a guest: the zone (cluster identity) and its VMID.
type VMRef struct {
	ZoneID string
	VMID   int
}

// ID is the opaque, global id of the VM.
func (r VMRef) ID() string { return encodeID("vm", r.ZoneID, strconv.Itoa(r.VMID)) }

// ParseVMID parses an id made by VMRef.ID.
func ParseVMID(id string) (VMRef, error) {
	parts, err := decodeID("vm", id, 2)
	if err != nil {
		return VMRef{}, err
	}
	vmid, err := strconv.Atoi(parts[1])
	if err != nil || vmid < 100 || vmid > 999999999 || strconv.Itoa(vmid) != parts[1] {
		return VMRef{}, fmt.Errorf("tenancy: parse vm id: %w", ErrBadID)
	}
	return VMRef{ZoneID: parts[0], VMID: vmid}, nil
}

// NetworkRef locates a network: the zone (cluster identity) and its VNet.
type NetworkRef struct {
	ZoneID string
	VNet   string
}

// ID is the opaque, global id of the network.
func (r NetworkRef) ID() string { return encodeID("net", r.ZoneID, r.VNet) }

// ParseNetworkID parses an id made by NetworkRef.ID.
func ParseNetworkID(id string) (NetworkRef, error) {
	parts, err := decodeID("net", id, 2)
	if err != nil {
		return NetworkRef{}, err
	}
	return NetworkRef{ZoneID: parts[0], VNet: parts[1]}, nil
}

// HostRef locates a host: the zone (cluster identity) and its Proxmox node
// name (node names repeat across zones).
type HostRef struct {
	ZoneID string
	Node   string
}

// ID is the opaque, global id of the host.
func (r HostRef) ID() string { return encodeID("host", r.ZoneID, r.Node) }

// ParseHostID parses an id made by HostRef.ID.
func ParseHostID(id string) (HostRef, error) {
	parts, err := decodeID("host", id, 2)
	if err != nil {
		return HostRef{}, err
	}
	return HostRef{ZoneID: parts[0], Node: parts[1]}, nil
}

// BackupRef locates a backup archive: the zone (cluster identity), the
// node whose storage lists it (any node for shared storage) and the
// archive's Proxmox volume id.
type BackupRef struct {
	ZoneID string
	Node   string
	VolID  string
}

// ID is the opaque, global id of the backup.
func (r BackupRef) ID() string {
	return encodeID("backup", r.ZoneID, r.Node, url.QueryEscape(r.VolID))
}

// ParseBackupID parses an id made by BackupRef.ID.
func ParseBackupID(id string) (BackupRef, error) {
	parts, err := decodeID("backup", id, 3)
	if err != nil {
		return BackupRef{}, err
	}
	vol, err := url.QueryUnescape(parts[2])
	if err != nil || url.QueryEscape(vol) != parts[2] {
		return BackupRef{}, fmt.Errorf("tenancy: parse backup id: %w", ErrBadID)
	}
	return BackupRef{ZoneID: parts[0], Node: parts[1], VolID: vol}, nil
}

// encodeID joins kind and parts into an opaque URL-safe id.
func encodeID(kind string, parts ...string) string {
	return base64.RawURLEncoding.EncodeToString([]byte(kind + "/" + strings.Join(parts, "/")))
}

// decodeID reverses encodeID, checking the kind and the number of parts.
// It accepts only the encoding encodeID gives (the decoder also takes
// other last characters and ignores newlines; ParseVMID checks the VMID is
// canonical), so that an object has exactly one id.
func decodeID(kind, id string, n int) ([]string, error) {
	raw, err := base64.RawURLEncoding.DecodeString(id)
	if err != nil || base64.RawURLEncoding.EncodeToString(raw) != id {
		return nil, fmt.Errorf("tenancy: parse %s id: %w", kind, ErrBadID)
	}
	parts := strings.Split(string(raw), "/")
	if len(parts) != n+1 || parts[0] != kind || slices.Contains(parts[1:], "") {
		return nil, fmt.Errorf("tenancy: parse %s id: %w", kind, ErrBadID)
	}
	return parts[1:], nil
}
