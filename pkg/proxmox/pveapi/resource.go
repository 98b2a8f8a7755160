package pveapi

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"strconv"
	"strings"

	proxmox "github.com/luthermonson/go-proxmox"
)

// Resource is one entry of /cluster/resources, and of a pool's members
// (GET /pools?poolid=), which list guests with the same fields less tags,
// lock and pool. It is flexplane's one model of these answers: reads and
// writes, the inventory and the VM lifecycle decode them into it (go-proxmox's
// ClusterResource lacks lock).
type Resource struct {
	ID       string  `json:"id"`
	Type     string  `json:"type"`
	Node     string  `json:"node"`
	Status   string  `json:"status"`
	Name     string  `json:"name"`
	VMID     int     `json:"vmid"`
	RawTags  string  `json:"tags"`
	Lock     string  `json:"lock"`
	Template int     `json:"template"`
	Pool     string  `json:"pool"`
	CPU      float64 `json:"cpu"`
	MaxCPU   int     `json:"maxcpu"`
	Mem      int64   `json:"mem"`
	MaxMem   int64   `json:"maxmem"`
	Disk     int64   `json:"disk"`
	MaxDisk  int64   `json:"maxdisk"`
	Uptime   int64   `json:"uptime"`
	// Guests: bytes through their NICs and disks since they started.
	NetIn      int64  `json:"netin"`
	NetOut     int64  `json:"netout"`
	DiskRead   int64  `json:"diskread"`
	DiskWrite  int64  `json:"diskwrite"`
	Storage    string `json:"storage"`
	Shared     int    `json:"shared"`
	PluginType string `json:"plugintype"`
	// HAState is the guest's Proxmox HA state ("" when HA does not manage it).
	HAState string `json:"hastate"`
}

// SplitTags splits a tag list as Proxmox writes it (';' separated; ','
// and ' ' are accepted too).
func SplitTags(tags string) []string {
	return strings.FieldsFunc(tags, func(r rune) bool { return r == ';' || r == ',' || r == ' ' })
}

// Tags splits the guest's tags.
func (r Resource) Tags() []string { return SplitTags(r.RawTags) }

// HasTag reports whether the guest carries tag.
func (r Resource) HasTag(tag string) bool {
	for _, t := range r.Tags() {
		if t == tag {
			return true
		}
	}
	return false
}

// MemoryMiB is the guest's memory in MiB.
func (r Resource) MemoryMiB() int { return int(r.MaxMem >> 20) }

// DiskGiB is the guest's disk size in GiB, rounded up.
func (r Resource) DiskGiB() int { return int((r.MaxDisk + 1<<30 - 1) >> 30) }

// GuestState is what a guest is doing, as flexplane reports it (the VM
// states of the API).
type GuestState string

// Guest states.
const (
	StateCreating GuestState = "CREATING"
	StateRunning  GuestState = "RUNNING"
	StateStopped  GuestState = "STOPPED"
	StatePaused   GuestState = "PAUSED"
	StateUnknown  GuestState = "UNKNOWN"
)

// State is the one mapping of a guest's Proxmox status and lock to its
// state, given whether its tags mark a create that has not finished
// (markedCreating: flexplane's marker, which its owner pkg/tenancy reads,
// tenancy.Creating; Proxmox knows nothing of it):
//   - CREATING while Proxmox creates or clones it (lock create, clone), and
//     while it is marked creating and is no template;
//   - PAUSED when it is paused or suspended in RAM (status paused,
//     suspended) or hibernated to disk (lock suspending, suspended: its
//     status is then running or stopped), marked or not;
//   - UNKNOWN while Proxmox's HA manager has it on a node it is fencing or
//     recovers it onto another node (HA state fence or recovery);
//   - RUNNING and STOPPED as Proxmox says (a lock such as backup, migrate or
//     snapshot does not change what the guest does);
//   - UNKNOWN otherwise (status unknown while its node is offline, or a
//     state Proxmox adds later).
func (r Resource) State(markedCreating bool) GuestState {
	switch r.Lock {
	case "create", "clone":
		return StateCreating
	case "suspending", "suspended":
		return StatePaused
	}
	if markedCreating && r.Template != 1 {
		return StateCreating
	}
	if r.HAState == "fence" || r.HAState == "recovery" {
		return StateUnknown
	}
	switch r.Status {
	case "running":
		return StateRunning
	case "stopped":
		return StateStopped
	case "paused", "suspended":
		return StatePaused
	}
	return StateUnknown
}

// ResourcesPath is the path of /cluster/resources of type typ ("" for
// every type, else "vm", "node", "storage" or "sdn").
func ResourcesPath(typ string) string {
	if typ == "" {
		return "/cluster/resources"
	}
	return "/cluster/resources?" + url.Values{"type": {typ}}.Encode()
}

// Resources reads /cluster/resources of type typ (ResourcesPath).
func Resources(ctx context.Context, c *proxmox.Client, typ string) ([]Resource, error) {
	var rs []Resource
	if err := c.Get(ctx, ResourcesPath(typ), &rs); err != nil {
		return nil, fmt.Errorf("pveapi: read resources: %w", err)
	}
	return rs, nil
}

// Guests lists the QEMU guests of the cluster.
func Guests(ctx context.Context, c *proxmox.Client) ([]Resource, error) {
	all, err := Resources(ctx, c, "vm")
	if err != nil {
		return nil, err
	}
	return QEMU(all), nil
}

// QEMU keeps the QEMU guests of rs (in place).
func QEMU(rs []Resource) []Resource {
	out := rs[:0]
	for _, g := range rs {
		if g.Type == "qemu" {
			out = append(out, g)
		}
	}
	return out
}

// FindGuest returns the guest vmid, or ok false if there is none.
func FindGuest(ctx context.Context, c *proxmox.Client, vmid int) (Resource, bool, error) {
	all, err := Guests(ctx, c)
	if err != nil {
		return Resource{}, false, err
	}
	for _, g := range all {
		if g.VMID == vmid {
			return g, true, nil
		}
	}
	return Resource{}, false, nil
}

// Pool is a pool as GET /pools?poolid= answers for one pool.
type Pool struct {
	PoolID  string     `json:"poolid"`
	Comment string     `json:"comment"`
	Members []Resource `json:"members"`
}

// PoolGuestsPath is the path that lists the QEMU guests of pool poolid
// (GET /pools?poolid=&type=qemu; /pools/{poolid} is deprecated since PVE
// 8.1). Its answer is a list of one Pool.
func PoolGuestsPath(poolid string) string {
	return "/pools?" + url.Values{"poolid": {poolid}, "type": {"qemu"}}.Encode()
}

// PoolGuests lists the QEMU guests of pool poolid; a pool that does not
// exist has none.
func PoolGuests(ctx context.Context, c *proxmox.Client, poolid string) ([]Resource, error) {
	var ps []Pool
	err := c.Get(ctx, PoolGuestsPath(poolid), &ps)
	if IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("pveapi: guests of pool %s: %w", poolid, err)
	}
	return GuestsOfPools(ps), nil
}

// GuestsOfPools returns the QEMU members of a /pools answer.
func GuestsOfPools(ps []Pool) []Resource {
	var out []Resource
	for _, p := range ps {
		out = append(out, QEMU(p.Members)...)
	}
	return out
}

// IPMapping is one address of the PVE IPAM (GET
// /cluster/sdn/ipams/{ipam}/status).
type IPMapping struct {
	Zone    string `json:"zone"`
	VNet    string `json:"vnet"`
	Subnet  string `json:"subnet"`
	IP      string `json:"ip"`
	MAC     string `json:"mac"`
	VMID    VMID   `json:"vmid"`
	Gateway int    `json:"gateway"`
}

// VMID is a guest id that Proxmox sends as a number or as a string (the
// IPAM keeps the vmid of a mapping as it was given: a string when set
// through the API, a number when set by a guest's start); 0 is none.
type VMID int

// UnmarshalJSON implements json.Unmarshaler: a number, a string of digits,
// "" or null.
func (v *VMID) UnmarshalJSON(b []byte) error {
	b = bytes.Trim(b, `"`)
	if len(b) == 0 || string(b) == "null" {
		*v = 0
		return nil
	}
	n, err := strconv.Atoi(string(b))
	if err != nil {
		return fmt.Errorf("pveapi: vmid %s is not a number", b)
	}
	*v = VMID(n)
	return nil
}

// IPAMStatusPath is the PVE IPAM's list of mappings.
const IPAMStatusPath = "/cluster/sdn/ipams/pve/status"

// IPAMStatus reads every mapping of the zone's PVE IPAM (one call).
func IPAMStatus(ctx context.Context, c *proxmox.Client) ([]IPMapping, error) {
	var ms []IPMapping
	if err := c.Get(ctx, IPAMStatusPath, &ms); err != nil {
		return nil, fmt.Errorf("pveapi: read IPAM: %w", err)
	}
	return ms, nil
}

var _ json.Unmarshaler = (*VMID)(nil)
