package pveapi

import (
	"context"
	"fmt"
	"net/url"
	"regexp"
	"strconv"
	"strings"

	proxmox "github.com/luthermonson/go-proxmox"
)

// MigrateCheck is what Proxmox says of migrating a guest to a node
// (GET /nodes/{node}/qemu/{vmid}/migrate).
type MigrateCheck struct {
	// Running is whether the guest runs (an online migration is needed).
	Running bool
	// Allowed are the nodes it may migrate to; NotAllowed the others, each
	// with Proxmox's reason.
	Allowed    []string
	NotAllowed map[string]string
	// LocalDisks are the volumes on storage the target cannot see (they
	// are copied: with-local-disks).
	LocalDisks []string
	// LocalResources are devices bound to the node (PCI, USB, ...); a
	// guest with any cannot move.
	LocalResources []string
}

// MigratePreconditions reads what Proxmox says of migrating guest vmid on
// node to target.
func MigratePreconditions(ctx context.Context, c *proxmox.Client, node string, vmid int, target string) (MigrateCheck, error) {
	var raw struct {
		Running    proxmox.IntOrBool `json:"running"`
		Allowed    []string          `json:"allowed_nodes"`
		NotAllowed map[string]any    `json:"not_allowed_nodes"`
		LocalDisks []struct {
			VolID string `json:"volid"`
		} `json:"local_disks"`
		LocalResources []string `json:"local_resources"`
	}
	q := url.Values{"target": {target}}
	if err := c.Get(ctx, fmt.Sprintf("/nodes/%s/qemu/%d/migrate?%s", url.PathEscape(node), vmid, q.Encode()), &raw); err != nil {
		return MigrateCheck{}, fmt.Errorf("pveapi: migrate preconditions of %d: %w", vmid, err)
	}
	mc := MigrateCheck{Running: bool(raw.Running), Allowed: raw.Allowed, LocalResources: raw.LocalResources,
		NotAllowed: map[string]string{}}
	for n, why := range raw.NotAllowed {
		mc.NotAllowed[n] = fmt.Sprint(why)
	}
	for _, d := range raw.LocalDisks {
		mc.LocalDisks = append(mc.LocalDisks, d.VolID)
	}
	return mc, nil
}

// TaskLog reads the lines of task upid's log.
func TaskLog(ctx context.Context, c *proxmox.Client, upid string) ([]string, error) {
	node, err := NodeOfUPID(upid)
	if err != nil {
		return nil, err
	}
	var raw []struct {
		N int    `json:"n"`
		T string `json:"t"`
	}
	q := url.Values{"start": {"0"}, "limit": {"5000"}}
	if err := c.Get(ctx, "/nodes/"+node+"/tasks/"+url.PathEscape(upid)+"/log?"+q.Encode(), &raw); err != nil {
		return nil, fmt.Errorf("pveapi: task log: %w", err)
	}
	out := make([]string, 0, len(raw))
	for _, l := range raw {
		out = append(out, l.T)
	}
	return out, nil
}

// Transfer is how far a migration task has copied, as its log says.
type Transfer struct {
	// Done and Total are bytes copied and to copy: the disks (the latest
	// line of each drive's mirror job) and the memory (the latest
	// "migration active" line).
	Done, Total int64
	// BytesPerSecond is the rate of the latest line that gives one (or the
	// disks' bytes over their time), 0 if none does.
	BytesPerSecond float64
}

var (
	// drive-scsi0: transferred 1.0 GiB of 4.0 GiB (25.00%) in 2s
	driveLine = regexp.MustCompile(`^(drive-[a-z]+\d+): transferred ([\d.]+ [KMGT]?i?B) of ([\d.]+ [KMGT]?i?B) \([\d.]+%\) in (?:(\d+)m )?(\d+)s`)
	// migration active, transferred 351.9 MiB of 4.0 GiB VM-state, 113.7 MiB/s
	memLine = regexp.MustCompile(`^migration (?:active|completed), transferred ([\d.]+ [KMGT]?i?B) of ([\d.]+ [KMGT]?i?B) VM-state, ([\d.]+ [KMGT]?i?B)/s`)
)

// ParseSize reads a size as Proxmox renders one in task logs ("1.5 GiB",
// "512 B").
func ParseSize(s string) (int64, bool) {
	num, unit, ok := strings.Cut(s, " ")
	if !ok {
		return 0, false
	}
	f, err := strconv.ParseFloat(num, 64)
	if err != nil || f < 0 || f > 1<<53 {
		return 0, false
	}
	mult := map[string]float64{"B": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30, "TiB": 1 << 40}[unit]
	if mult == 0 {
		return 0, false
	}
	return int64(f * mult), true
}

// ParseTransfer reads a migration task's progress off its log lines.
func ParseTransfer(lines []string) Transfer {
	type drive struct {
		done, total int64
		secs        int64
	}
	drives := map[string]drive{}
	var order []string
	var memDone, memTotal int64
	var memRate float64
	for _, l := range lines {
		if m := driveLine.FindStringSubmatch(l); m != nil {
			done, ok1 := ParseSize(m[2])
			total, ok2 := ParseSize(m[3])
			if !ok1 || !ok2 {
				continue
			}
			mins, _ := strconv.ParseInt(m[4], 10, 64)
			secs, _ := strconv.ParseInt(m[5], 10, 64)
			if _, seen := drives[m[1]]; !seen {
				order = append(order, m[1])
			}
			drives[m[1]] = drive{done: done, total: total, secs: mins*60 + secs}
			continue
		}
		if m := memLine.FindStringSubmatch(l); m != nil {
			done, ok1 := ParseSize(m[1])
			total, ok2 := ParseSize(m[2])
			rate, ok3 := ParseSize(m[3])
			if ok1 && ok2 && ok3 {
				memDone, memTotal, memRate = done, total, float64(rate)
			}
		}
	}
	var t Transfer
	var secs int64
	for _, k := range order {
		d := drives[k]
		t.Done += d.done
		t.Total += d.total
		secs = max(secs, d.secs)
	}
	if secs > 0 {
		t.BytesPerSecond = float64(t.Done) / float64(secs)
	}
	t.Done += memDone
	t.Total += memTotal
	if memRate > 0 {
		t.BytesPerSecond = memRate
	}
	return t
}
