package compute

import (
	"cmp"
	"context"
	"maps"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/flexplane/flexplane/pkg/proxmox/pveapi"
)

// NIC is a network interface of a guest's configuration (netN).
type NIC struct {
	// Index is N of netN.
	Index int
	// Model is the emulated device (virtio, e1000, ...); MAC its address.
	Model, MAC string
	// Bridge is what it is attached to: the VNet of a VDC network.
	Bridge string
}

// Disk is a disk of a guest's configuration (scsiN, virtioN, sataN, ideN;
// not CD-ROMs such as the cloud-init drive).
type Disk struct {
	// Slot is the configuration key, e.g. scsi0.
	Slot string
	// Storage is the Proxmox storage holding it.
	Storage string
	// SizeBytes is its size.
	SizeBytes int64
	// Limits; 0 is none.
	ReadMBps, WriteMBps, ReadIops, WriteIops int
	// Boot: the guest boots from it (the first disk of its boot order).
	Boot bool
}

// Hardware is a guest's NICs and disks, each in slot order, and the ISO
// image in its CD-ROM drive.
type Hardware struct {
	NICs  []NIC
	Disks []Disk
	// ISO is the catalog name of the VDC ISO image in the guest's CD-ROM
	// drive, "" for none (AttachedISO).
	ISO string
}

var nicKey = regexp.MustCompile(`^net(\d+)$`)

// ParseHardware reads the NICs and disks off a guest's configuration.
// Keys are read in order, so that slots Proxmox would not write but that
// sort alike ("net1" and "net01") come out the same on every call.
func ParseHardware(cfg pveapi.Config) Hardware {
	var hw Hardware
	for _, key := range slices.Sorted(maps.Keys(cfg)) {
		val := cfg.Str(key)
		if m := nicKey.FindStringSubmatch(key); m != nil {
			n, _ := strconv.Atoi(m[1])
			nic := NIC{Index: n, Bridge: propOf(val, "bridge"), MAC: propOf(val, "macaddr")}
			// The model is the first property: "virtio=BC:24:11:..".
			first, _, _ := strings.Cut(val, ",")
			if k, v, ok := strings.Cut(first, "="); ok && k != "bridge" {
				nic.Model = k
				if macRE.MatchString(v) {
					nic.MAC = v
				}
			}
			hw.NICs = append(hw.NICs, nic)
		}
	}
	boot := cfg.BootDisk()
	for _, v := range cfg.Volumes() {
		if v.Unused() {
			continue
		}
		limit := func(k string) int { n, _ := strconv.Atoi(propOf(v.Props, k)); return max(n, 0) } // < 0 is not a limit
		hw.Disks = append(hw.Disks, Disk{Slot: v.Slot, Storage: v.Storage, SizeBytes: v.SizeBytes, Boot: v.Slot == boot,
			ReadMBps: limit("mbps_rd"), WriteMBps: limit("mbps_wr"), ReadIops: limit("iops_rd"), WriteIops: limit("iops_wr")})
	}
	slices.SortStableFunc(hw.NICs, func(a, b NIC) int { return cmp.Compare(a.Index, b.Index) })
	hw.ISO = AttachedISO(cfg)
	return hw
}

// Hardware returns the zone and the NICs and disks of VM id of vdc.
func (s *Service) Hardware(ctx context.Context, vdc, id string) (Zone, Hardware, error) {
	z, _, _, cfg, err := s.d.find.lookupConfig(ctx, vdc, id)
	if err != nil {
		return Zone{}, Hardware{}, err
	}
	return z, ParseHardware(cfg), nil
}

// taskKinds maps the Proxmox task types of the power actions, deletes and
// snapshot operations to their operation kinds.
var taskKinds = func() map[string]OpKind {
	// hastart, hastop and hamigrate are a start, a stop and a migration
	// of an HA VM (hawait.go).
	m := map[string]OpKind{"qmdestroy": OpDelete, "qmigrate": OpMigrate, "hamigrate": OpMigrate, "hastart": OpStart, "hastop": OpStop, "vzdump": OpCreateBackup}
	maps.Copy(m, snapshotTasks)
	for k, p := range powerPaths {
		m["qm"+p] = k
	}
	return m
}()

// taskState is the state of an operation that follows task ts, and its
// error when it failed.
func taskState(ts pveapi.TaskStatus) (OpState, string) {
	switch {
	case ts.Running:
		return OpRunning, ""
	case ts.ExitStatus == "OK":
		return OpSucceeded, ""
	}
	return OpFailed, ts.ExitStatus
}

// MaxHistory bounds History's n.
const MaxHistory = 100

// History returns the operations that ran on VM id of vdc, newest first,
// at most n (1 to MaxHistory): its create (from the intent it carries) and
// the power actions and deletes in the task history of its node. Their ids
// answer Operation too. Tasks of other nodes (before a migration) are not
// read, nor tasks of an earlier guest that had the VMID (taskOfThisGuest).
func (s *Service) History(ctx context.Context, vdc, id string, n int) ([]Operation, error) {
	if n < 1 || n > MaxHistory {
		return nil, badInput("n", "n must be between 1 and %d", MaxHistory)
	}
	z, g, in, err := s.d.find.lookup(ctx, vdc, id)
	if err != nil {
		return nil, err
	}
	// Tasks of other types (config changes, resizes, consoles) are no
	// operations: read more than n to find n that are.
	tasks, err := pveapi.NodeTasks(ctx, z.Client, g.Node, g.VMID, 4*n)
	if err != nil {
		return nil, zoneDown(z.Name, err)
	}
	var ops []Operation
	for _, t := range tasks {
		kind, ok := taskKinds[t.Type]
		if !ok || !taskOfThisGuest(t.Started, in) {
			continue // not an operation, or one of an earlier guest with the VMID
		}
		op := Operation{ID: taskOpID(z.ID, g.VMID, kind, t.UPID), Kind: kind, Step: t.Type, VMID: id, Started: t.Started, Updated: t.Ended}
		op.State, op.Error = taskState(t.TaskStatus)
		if op.Updated.IsZero() {
			op.Updated = time.Now()
		}
		ops = append(ops, op)
	}
	if in != nil && in.Op != "" {
		op := Operation{ID: createOpID(z.ID, g.VMID, in.Op), Kind: OpCreate, State: OpSucceeded, Step: "finish", VMID: id,
			Started: in.Created, Updated: in.Created}
		if isCreating(g) {
			op.State, op.Step, op.Updated = OpRunning, observeStep(ctx, z, g, in), time.Now()
		}
		ops = append(ops, op)
	}
	// Proxmox keeps task start times in seconds: within one, a task is
	// newer than the create (it was started by it or after it).
	slices.SortStableFunc(ops, func(a, b Operation) int {
		return b.Started.Truncate(time.Second).Compare(a.Started.Truncate(time.Second))
	})
	return ops[:min(n, len(ops))], nil
}
