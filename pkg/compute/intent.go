package compute

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/flexplane/flexplane/pkg/network/ipam"
	"github.com/flexplane/flexplane/pkg/proxmox/pveapi"
	"github.com/flexplane/flexplane/pkg/tenancy"
)

// Intent is everything a create needs, recorded on the guest (in its
// description) when it is cloned, so that any process can finish the
// create without the catalog or the request.
type Intent struct {
	// Op is the create's operation id (also the guest's tenancy.OpTag).
	Op      string    `json:"op"`
	Created time.Time `json:"created"`
	VDC     string    `json:"vdc"`
	Name    string    `json:"name"`
	Image   string    `json:"image"`
	// ISO is the file (its volume id) of the ISO image the VM has in its
	// CD-ROM drive from its create on, "" for none (isos.go).
	ISO       string `json:"iso,omitempty"`
	VCPUs     int    `json:"vcpus"`
	MemoryMiB int    `json:"memoryMiB"`
	DiskGiB   int    `json:"diskGiB"`
	// Storage is the Proxmox storage of the disk; ReadMBps and WriteMBps
	// its limits (0 = none).
	Storage   string      `json:"storage"`
	ReadMBps  int         `json:"readMBps,omitempty"`
	WriteMBps int         `json:"writeMBps,omitempty"`
	NICs      []NICIntent `json:"nics"`
	User      string      `json:"user,omitempty"`
	SSHKeys   []string    `json:"sshKeys,omitempty"`
	// UserDataSum is the SHA-256 (hex) of the snippet of the guest's own
	// cloud-init user-data (see CreateInput.UserData), "" without: the
	// user-data itself is in the snippet only, never in the description.
	UserDataSum string `json:"userDataSum,omitempty"`
	// UserData is user-data recorded, gzip-compressed and base64-encoded,
	// by earlier versions, which kept it in the intent: a create of
	// theirs that Recover finishes writes its snippet from it.
	UserData string `json:"userData,omitempty"`
	// ComputeProfile is the compute profile of VCPUs and MemoryMiB once a
	// resize named one ("" before).
	ComputeProfile string `json:"computeProfile,omitempty"`
	// Resize is set while a resize that reboots the VM is unfinished.
	Resize *ResizeIntent `json:"resize,omitempty"`
	// SecurityGroups are the short names of the VDC's security groups the
	// VM is in: a fact of the VM, changed by SetSecurityGroups; the
	// groups' members are read from here.
	SecurityGroups []string `json:"securityGroups,omitempty"`
	// PlacementGroup is the short name of the VDC's placement group the
	// VM is in ("" for none): a fact of the VM, set by its create; the
	// group's members are read from here (pgroups.go).
	PlacementGroup string `json:"placementGroup,omitempty"`
	// NoHA keeps the VM out of Proxmox HA (created with highAvailability
	// false); otherwise a VM on shared storage is an HA resource (ha.go).
	NoHA bool `json:"noHA,omitempty"`
	// Move is set on the target copy of a move across zones: until it is
	// the VM, where it comes from, so whoever finds it unfinished
	// finishes it (the source was marked moved) or undoes it. It stays
	// once the move is done: its Started bounds the tasks of the guest
	// (ownedSince).
	Move *MoveIntent `json:"move,omitempty"`
}

// MoveIntent records a move across zones on its target guest.
type MoveIntent struct {
	Op string `json:"op"`
	// From and VMID are the source's zone identity and VMID.
	From    string    `json:"from"`
	VMID    int       `json:"vmid"`
	Running bool      `json:"running,omitempty"`
	Started time.Time `json:"started"`
	// Beat is when the runner last said it is alive (it beats while it
	// copies); Recover leaves the move alone until Beat (or Started) is
	// older than StaleAfter.
	Beat time.Time `json:"beat,omitzero"`
}

// last is when the move was last known to be alive.
func (mi *MoveIntent) last() time.Time {
	if mi.Beat.After(mi.Started) {
		return mi.Beat
	}
	return mi.Started
}

// NICIntent is one NIC: its VNet, the MAC its address is claimed under in
// the IPAM, and the address with the subnet's prefix length and gateway.
type NICIntent struct {
	SDNZone string `json:"sdnZone"`
	VNet    string `json:"vnet"`
	MAC     string `json:"mac"`
	Address string `json:"address"`
	Bits    int    `json:"bits"`
	Gateway string `json:"gateway,omitempty"`
}

// intentMarker starts the line of the description that holds the intent.
const intentMarker = "flexplane-intent:"

// Description renders the guest description holding the intent.
func (in *Intent) Description() string {
	b, _ := json.Marshal(in)
	return fmt.Sprintf("Managed by flexplane (VDC %s). The line below records the create; do not edit it.\n%s%s",
		in.VDC, intentMarker, base64.RawURLEncoding.EncodeToString(b))
}

// ParseIntent finds the intent in a guest description; ok is false when
// there is none (a guest flexplane did not create from an intent).
func ParseIntent(desc string) (*Intent, bool) {
	for line := range strings.SplitSeq(desc, "\n") {
		enc, found := strings.CutPrefix(strings.TrimSpace(line), intentMarker)
		if !found {
			continue
		}
		raw, err := base64.RawURLEncoding.DecodeString(enc)
		if err != nil {
			return nil, false
		}
		var in Intent
		if json.Unmarshal(raw, &in) != nil || in.Op == "" || in.VDC == "" {
			return nil, false
		}
		return &in, true
	}
	return nil, false
}

// DecodedUserData returns the guest's own cloud-init user-data (nil when
// it has none).
func (in *Intent) DecodedUserData() ([]byte, error) {
	if in.UserData == "" {
		return nil, nil
	}
	raw, err := base64.StdEncoding.DecodeString(in.UserData)
	if err != nil {
		return nil, fmt.Errorf("intent: user-data: %w", err)
	}
	zr, err := gzip.NewReader(bytes.NewReader(raw))
	if err != nil {
		return nil, fmt.Errorf("intent: user-data: %w", err)
	}
	data, err := io.ReadAll(io.LimitReader(zr, 1<<20))
	if err != nil {
		return nil, fmt.Errorf("intent: user-data: %w", err)
	}
	return data, nil
}

// VMByName returns the VM of vdc called name in zone, nil when there is
// none (names are not unique in general: callers that make them so, such
// as the Cluster API provider, find their VM again by it).
func (s *Service) VMByName(ctx context.Context, vdc, zone, name string) (*VM, error) {
	z, ok := s.d.find.zoneByName(ctx, zone)
	if !ok {
		return nil, zoneDown(zone, errors.New("zone not reachable"))
	}
	gs, err := pveapi.Guests(ctx, z.Client)
	if err != nil {
		return nil, zoneDown(zone, err)
	}
	for _, g := range gs {
		if v, _ := tenancy.VDCOf(g.Tags()); v != vdc || g.Name != name || g.Template == 1 {
			continue
		}
		return s.VM(ctx, vdc, tenancy.VMRef{ZoneID: z.ID, VMID: g.VMID}.ID())
	}
	return nil, nil
}

// Validate checks in as CreateVM would, changing nothing: the errors are
// CreateVM's (BAD_INPUT with the field, NOT_FOUND for a network that is
// not the VDC's). Callers that create VMs later (a node pool's workers)
// refuse bad input up front with it.
func (s *Service) Validate(ctx context.Context, in CreateInput) error {
	vctx, cancel := context.WithTimeout(ctx, s.d.find.timeout)
	defer cancel()
	_, err := validate(vctx, s.d, in)
	return err
}

// CheckNetwork checks that network id is a network of vdc in zone, as
// createVM's NIC check does (the field at fault is "zone" or
// "nics[0].network").
func (s *Service) CheckNetwork(ctx context.Context, vdc, zone, id string) error {
	_, err := s.Network(ctx, vdc, zone, id)
	return err
}

// Network returns network id of vdc in zone (its VNet, prefix and gateway
// address), refused as CheckNetwork refuses it.
func (s *Service) Network(ctx context.Context, vdc, zone, id string) (ipam.Subnet, error) {
	f := s.d.find
	vctx, cancel := context.WithTimeout(ctx, f.timeout)
	defer cancel()
	absent := badInput("zone", "no zone %q", zone)
	z, ok := f.zoneByName(vctx, zone)
	if !ok {
		return ipam.Subnet{}, absent
	}
	if err := placeable(vctx, s.d, z.Name, vdc, absent); err != nil {
		return ipam.Subnet{}, err
	}
	sub, err := f.network(vctx, z, vdc, id)
	if err != nil {
		if errors.Is(err, errNoNetwork) {
			return ipam.Subnet{}, badInput("nics[0].network", "no network %q in zone %s", id, z.Name)
		}
		return ipam.Subnet{}, zoneDown(z.Name, err)
	}
	return sub, nil
}
