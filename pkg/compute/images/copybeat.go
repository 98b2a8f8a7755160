package images

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	proxmox "github.com/luthermonson/go-proxmox"

	"github.com/flexplane/flexplane/pkg/catalog"
	"github.com/flexplane/flexplane/pkg/proxmox/pveapi"
)

// A copy guest (IncomingTag) says in its description when the process
// copying into it was last alive: BeginCopy writes the first beat, the
// copier beats again while it copies (CopyBeat). A copy guest whose beat
// is older than the caller's staleness limit was cut off (its copier
// crashed or was killed) and nothing will ever finish it: StaleCopy finds
// it, so that staging again removes it and copies afresh.

// beatPrefix starts the description line holding a copy's last beat.
const beatPrefix = "copy alive at "

// beatLine is the description line of a beat at now.
func beatLine(now time.Time) string { return beatPrefix + now.UTC().Format(time.RFC3339Nano) }

// withBeat is description with its beat line set to now.
func withBeat(description string, now time.Time) string {
	lines := strings.Split(strings.TrimRight(description, "\n"), "\n")
	out := lines[:0]
	for _, l := range lines {
		if !strings.HasPrefix(l, beatPrefix) {
			out = append(out, l)
		}
	}
	return strings.Join(append(out, beatLine(now)), "\n")
}

// lastBeat is the time of description's beat line; false for none.
func lastBeat(description string) (time.Time, bool) {
	for _, l := range strings.Split(description, "\n") {
		if rest, ok := strings.CutPrefix(l, beatPrefix); ok {
			at, err := time.Parse(time.RFC3339Nano, strings.TrimSpace(rest))
			return at, err == nil
		}
	}
	return time.Time{}, false
}

// CopyBeat records in the copy guest tpl that its copier is alive at now,
// conditional on the configuration it read: a guest that is no longer a
// copy (finished or removed) is an error.
func CopyBeat(ctx context.Context, c *proxmox.Client, tpl Template, now time.Time) error {
	cfg, err := pveapi.GuestConfig(ctx, c, tpl.Node, tpl.VMID)
	if err != nil {
		return fmt.Errorf("images: beat of copy %d: %w", tpl.VMID, err)
	}
	if !slices.Contains(pveapi.SplitTags(cfg.Str("tags")), IncomingTag) {
		return fmt.Errorf("images: beat of copy %d: no longer a copy", tpl.VMID)
	}
	if _, err := pveapi.Run(ctx, c, "POST", fmt.Sprintf("/nodes/%s/qemu/%d/config", tpl.Node, tpl.VMID),
		map[string]any{"description": withBeat(cfg.Str("description"), now), "digest": cfg.Digest()}); err != nil {
		return fmt.Errorf("images: beat of copy %d: %w", tpl.VMID, err)
	}
	return nil
}

// StaleCopy returns the copy guest of img in the zone of t whose copier
// last beat more than staleAfter before now (or never): a copy cut off.
// false when there is none, or the copy is alive.
func StaleCopy(ctx context.Context, t Target, img *catalog.Image, staleAfter time.Duration, now time.Time) (Template, bool, error) {
	_, pending, err := findTemplate(ctx, t, img)
	if err != nil || pending == nil || !pending.HasTag(IncomingTag) {
		return Template{}, false, err
	}
	cfg, err := pveapi.GuestConfig(ctx, t.Client, pending.Node, pending.VMID)
	if err != nil {
		return Template{}, false, fmt.Errorf("images: read copy %d: %w", pending.VMID, err)
	}
	if !CopyCutOff(cfg.Str("description"), staleAfter, now) {
		return Template{}, false, nil
	}
	return Template{Node: pending.Node, VMID: pending.VMID}, true, nil
}

// CopyCutOff reports whether a copy guest's description records no beat
// of its copier within staleAfter before now (or none at all): the copy
// was cut off and nothing will finish it.
func CopyCutOff(description string, staleAfter time.Duration, now time.Time) bool {
	at, ok := lastBeat(description)
	return !ok || now.Sub(at) > staleAfter
}
