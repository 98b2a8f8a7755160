package privhelper

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// Marks of a copy across zones, which the orchestrator sets on the guests
// in Proxmox: a volume is read only for a guest marked LeavingTag (a VM
// that moves) or for a template marked OutgoingTag (a VDC's image copied
// into another zone), and written only for one marked ArrivingTag.
const (
	LeavingTag  = "fp-leaving"
	ArrivingTag = "fp-incoming"
	OutgoingTag = "fp-image-out"
)

// diskBuses are the config keys (with a number) that hold a guest's
// disks; unusedN, vmstate and the snapshots' sections are not among them.
var diskBuses = []string{"scsi", "virtio", "sata", "ide", "efidisk", "tpmstate"}

// HasTag reports whether a Proxmox tag list holds tag.
func HasTag(tags, tag string) bool {
	return slices.Contains(strings.FieldsFunc(tags, func(r rune) bool { return r == ';' || r == ',' || r == ' ' }), tag)
}

// DiskVolume is the volume of a guest config's entry key: value when the
// entry is a disk (not a CD-ROM), else "" and false.
func DiskVolume(key, value string) (string, bool) {
	if !isDiskKey(key) {
		return "", false
	}
	first, opts, _ := strings.Cut(value, ",")
	if strings.Contains(","+opts+",", ",media=cdrom,") {
		return "", false
	}
	return first, true
}

// isDiskKey reports whether k is a disk slot of a guest config.
func isDiskKey(k string) bool {
	for _, bus := range diskBuses {
		if n, ok := strings.CutPrefix(k, bus); ok && n != "" && strings.Trim(n, "0123456789") == "" {
			return true
		}
	}
	return false
}

// maxGuestConfig bounds a guest config file the helper reads.
const maxGuestConfig = 1 << 20

// guestConfig reads the current section of guest vmid's config file in
// dir (Proxmox's format: `key: value` lines, then a [section] per
// snapshot or pending change, which are not the guest's current state).
func guestConfig(dir string, vmid uint32) (map[string]string, error) {
	f, err := os.Open(filepath.Join(dir, strconv.FormatUint(uint64(vmid), 10)+".conf"))
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxGuestConfig+1))
	if err != nil {
		return nil, err
	}
	if len(b) > maxGuestConfig {
		return nil, fmt.Errorf("guest %d's config is larger than %d bytes", vmid, maxGuestConfig)
	}
	cfg := map[string]string{}
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(nil, maxGuestConfig)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if strings.HasPrefix(line, "[") {
			break
		}
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if k, v, ok := strings.Cut(line, ":"); ok {
			cfg[strings.TrimSpace(k)] = strings.TrimSpace(v)
		}
	}
	return cfg, sc.Err()
}
