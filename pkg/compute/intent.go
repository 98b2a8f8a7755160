package compute

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"strings"
	"time"
)

// Intent is everything a create needs, recorded on the guest (in its
// description) when it is cloned, so that any process can finish the
// create without the catalog or the request.
type Intent struct {
	// Op is the create's operation id (also the guest's tenancy.OpTag).
	Op        string    `json:"op"`
	Created   time.Time `json:"created"`
	VDC       string    `json:"vdc"`
	Name      string    `json:"name"`
	Image     string    `json:"image"`
	VCPUs     int       `json:"vcpus"`
	MemoryMiB int       `json:"memoryMiB"`
	DiskGiB   int       `json:"diskGiB"`
	// Storage is the Proxmox storage of the disk; ReadMBps and WriteMBps
	// its limits (0 = none).
	Storage   string      `json:"storage"`
	ReadMBps  int         `json:"readMBps,omitempty"`
	WriteMBps int         `json:"writeMBps,omitempty"`
	NICs      []NICIntent `json:"nics"`
	User      string      `json:"user,omitempty"`
	SSHKeys   []string    `json:"sshKeys,omitempty"`
	// Move is set on the target copy of a move across zones until it is
	// the VM: where it comes from, so whoever finds it unfinished
	// finishes it (the source was marked moved) or undoes it.
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
