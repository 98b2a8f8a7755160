package pveapi

import (
	"context"
	"fmt"
	"maps"
	"math"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"

	proxmox "github.com/luthermonson/go-proxmox"
)

// Volume is a disk volume a guest's configuration names: an attached disk
// (scsiN, virtioN, sataN, ideN; not a CD-ROM such as the cloud-init drive,
// nor "none" or a passed-through device) or an unused one (unusedN, what a
// disk becomes when it is removed from the guest but its volume is kept).
type Volume struct {
	// Slot is the configuration key, e.g. scsi1 or unused0.
	Slot string
	// VolID is the volume's id, e.g. local-lvm:vm-100-disk-1.
	VolID string
	// Storage is the storage holding it (VolID's prefix).
	Storage string
	// SizeBytes is the size the configuration records; 0 for an unused
	// volume, whose entry has none (VolumeSize reads it).
	SizeBytes int64
	// Props is the whole property string of an attached disk ("" for an
	// unused one).
	Props string
}

// Unused reports whether the volume is an unused disk of the guest.
func (v Volume) Unused() bool { return strings.HasPrefix(v.Slot, "unused") }

var (
	diskSlotRE   = regexp.MustCompile(`^(scsi|virtio|sata|ide)(\d+)$`)
	unusedSlotRE = regexp.MustCompile(`^unused(\d+)$`)
)

// IsDiskSlot reports whether key is the configuration key of a drive
// (scsiN, virtioN, sataN, ideN).
func IsDiskSlot(key string) bool { return diskSlotRE.MatchString(key) }

// Volumes lists the disk volumes of the configuration: the attached disks
// in slot order (by bus, then number), then the unused ones by number.
func (c Config) Volumes() []Volume {
	var disks, unused []Volume
	for _, key := range slices.Sorted(maps.Keys(c)) {
		val := c.Str(key)
		switch {
		case diskSlotRE.MatchString(key):
			if Prop(val, "media") == "cdrom" {
				continue
			}
			vol, _, _ := strings.Cut(val, ",")
			storage, _, ok := strings.Cut(vol, ":")
			if !ok {
				continue
			}
			size, _ := ConfigSize(Prop(val, "size"))
			disks = append(disks, Volume{Slot: key, VolID: vol, Storage: storage, SizeBytes: size, Props: val})
		case unusedSlotRE.MatchString(key):
			storage, _, ok := strings.Cut(val, ":")
			if !ok {
				continue
			}
			unused = append(unused, Volume{Slot: key, VolID: val, Storage: storage})
		}
	}
	slices.SortStableFunc(disks, func(a, b Volume) int { return SlotOrder(a.Slot, b.Slot) })
	slices.SortStableFunc(unused, func(a, b Volume) int { return slotNumber(a.Slot) - slotNumber(b.Slot) })
	return append(disks, unused...)
}

// slotNumber is N of a slot such as scsiN or unusedN.
func slotNumber(slot string) int {
	i := strings.LastIndexFunc(slot, func(r rune) bool { return r < '0' || r > '9' })
	n, _ := strconv.Atoi(slot[i+1:])
	return n
}

// SlotOrder orders drive slots by bus, then number (scsi2 before scsi10).
func SlotOrder(a, b string) int {
	ma, mb := diskSlotRE.FindStringSubmatch(a), diskSlotRE.FindStringSubmatch(b)
	if ma == nil || mb == nil {
		return strings.Compare(a, b)
	}
	if ma[1] != mb[1] {
		return strings.Compare(ma[1], mb[1])
	}
	return slotNumber(a) - slotNumber(b)
}

// BootDisk is the slot of the disk the guest boots from: the first drive
// of its boot order ("order=scsi0;net0") that is one of its disks, else
// the legacy bootdisk key, else the first disk in slot order ("" when it
// has no disk).
func (c Config) BootDisk() string {
	var disks []string
	for _, v := range c.Volumes() {
		if !v.Unused() {
			disks = append(disks, v.Slot)
		}
	}
	if order := Prop(c.Str("boot"), "order"); order != "" {
		for dev := range strings.SplitSeq(order, ";") {
			if slices.Contains(disks, dev) {
				return dev
			}
		}
	}
	if b := c.Str("bootdisk"); slices.Contains(disks, b) {
		return b
	}
	if len(disks) > 0 {
		return disks[0]
	}
	return ""
}

// Prop returns key of a Proxmox property string ("vol,key=v,...").
func Prop(s, key string) string {
	for p := range strings.SplitSeq(s, ",") {
		if k, v, ok := strings.Cut(p, "="); ok && k == key {
			return v
		}
	}
	return ""
}

// ConfigSize parses a size as a guest's configuration writes one ("32G",
// "512M", "4096"): a byte count, never negative.
func ConfigSize(s string) (int64, error) {
	mult := int64(1)
	if s != "" {
		switch s[len(s)-1] {
		case 'K':
			mult = 1 << 10
		case 'M':
			mult = 1 << 20
		case 'G':
			mult = 1 << 30
		case 'T':
			mult = 1 << 40
		}
		if mult > 1 {
			s = s[:len(s)-1]
		}
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil {
		return 0, fmt.Errorf("pveapi: size %q: %w", s, err)
	}
	// Not negative, NaN or beyond int64 (whose conversion is undefined).
	n := f * float64(mult)
	if !(n >= 0 && n < math.MaxInt64) {
		return 0, fmt.Errorf("pveapi: size %q is out of range", s)
	}
	return int64(n), nil
}

// VolumeSize reads the size of volume volid on node from its storage
// (GET /nodes/{node}/storage/{storage}/content/{volume}).
func VolumeSize(ctx context.Context, c *proxmox.Client, node, volid string) (int64, error) {
	storage, _, ok := strings.Cut(volid, ":")
	if !ok {
		return 0, fmt.Errorf("pveapi: volume %q has no storage", volid)
	}
	var info struct {
		Size int64 `json:"size"`
	}
	path := fmt.Sprintf("/nodes/%s/storage/%s/content/%s", url.PathEscape(node), url.PathEscape(storage), volid)
	if err := c.Get(ctx, path, &info); err != nil {
		return 0, fmt.Errorf("pveapi: size of %s: %w", volid, err)
	}
	return info.Size, nil
}

// GuestDiskBytes is what a guest of node with configuration cfg holds on
// storage: every disk of cfg, the unused ones included (their sizes read off
// their storage).
func GuestDiskBytes(ctx context.Context, c *proxmox.Client, node string, cfg Config) (int64, error) {
	var total int64
	for _, v := range cfg.Volumes() {
		size := v.SizeBytes
		if v.Unused() {
			var err error
			if size, err = VolumeSize(ctx, c, node, v.VolID); err != nil {
				if IsNotFound(err) {
					continue // a dangling entry holds nothing
				}
				return 0, err
			}
		}
		total += size
	}
	return total, nil
}
