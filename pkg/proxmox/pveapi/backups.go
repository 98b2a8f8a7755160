package pveapi

import (
	"context"
	"fmt"
	"net/url"
	"strings"
	"time"

	proxmox "github.com/luthermonson/go-proxmox"
)

// BackupVolume is a backup archive as a storage's content lists it
// (GET /nodes/{node}/storage/{storage}/content?content=backup).
type BackupVolume struct {
	// VolID is the archive's volume id, e.g.
	// "local:backup/vzdump-qemu-100-2025_01_02-03_04_05.vma.zst".
	VolID string
	// VMID is the guest it was taken of.
	VMID int
	// Size is the archive's size in bytes.
	Size int64
	// Created is when it was taken.
	Created time.Time
	// Notes are the archive's notes (vzdump's notes-template filled in).
	Notes string
	// Protected archives cannot be deleted.
	Protected bool
}

// BackupVolumes lists the backup archives of storage as node sees it.
func BackupVolumes(ctx context.Context, c *proxmox.Client, node, storage string) ([]BackupVolume, error) {
	var raw []struct {
		VolID     string              `json:"volid"`
		Content   string              `json:"content"`
		VMID      proxmox.StringOrInt `json:"vmid"`
		Size      int64               `json:"size"`
		CTime     int64               `json:"ctime"`
		Notes     string              `json:"notes"`
		Protected proxmox.IntOrBool   `json:"protected"`
	}
	path := fmt.Sprintf("/nodes/%s/storage/%s/content?content=backup", url.PathEscape(node), url.PathEscape(storage))
	if err := c.Get(ctx, path, &raw); err != nil {
		return nil, fmt.Errorf("pveapi: backups on %s of %s: %w", storage, node, err)
	}
	out := make([]BackupVolume, 0, len(raw))
	for _, v := range raw {
		if v.Content != "backup" {
			continue
		}
		out = append(out, BackupVolume{VolID: v.VolID, VMID: int(v.VMID), Size: v.Size, Created: time.Unix(v.CTime, 0),
			Notes: v.Notes, Protected: bool(v.Protected)})
	}
	return out, nil
}

// BackupConfig reads the guest configuration archive volid holds (GET
// /nodes/{node}/vzdump/extractconfig): its keys and, as "description",
// the comment lines at its top. Snapshot and pending sections are left
// out.
func BackupConfig(ctx context.Context, c *proxmox.Client, node, volid string) (Config, error) {
	var text string
	q := url.Values{"volume": {volid}}
	if err := c.Get(ctx, fmt.Sprintf("/nodes/%s/vzdump/extractconfig?%s", url.PathEscape(node), q.Encode()), &text); err != nil {
		return nil, fmt.Errorf("pveapi: configuration of backup %s: %w", volid, err)
	}
	return parseConfigText(text), nil
}

// parseConfigText parses a guest configuration file (qemu-server's
// format) up to its first section.
func parseConfigText(text string) Config {
	cfg := Config{}
	var desc []string
	for line := range strings.SplitSeq(text, "\n") {
		switch {
		case strings.HasPrefix(line, "["):
			return withDescription(cfg, desc)
		case strings.HasPrefix(line, "#"):
			desc = append(desc, decodeConfigText(line[1:]))
		default:
			if k, v, ok := strings.Cut(line, ": "); ok && k != "" {
				cfg[k] = v
			}
		}
	}
	return withDescription(cfg, desc)
}

func withDescription(cfg Config, desc []string) Config {
	if len(desc) > 0 {
		cfg["description"] = strings.Join(desc, "\n")
	}
	return cfg
}

// decodeConfigText undoes the percent-encoding qemu-server applies to the
// characters of a comment line it cannot write as they are.
func decodeConfigText(s string) string {
	if !strings.Contains(s, "%") {
		return s
	}
	if d, err := url.PathUnescape(s); err == nil {
		return d
	}
	return s
}

// BackupNotes reads the whole notes of archive volid on storage as node
// sees it (GET /nodes/{node}/storage/{storage}/content/{volume}): a
// Proxmox Backup Server's listing gives only their first line.
func BackupNotes(ctx context.Context, c *proxmox.Client, node, storage, volid string) (string, error) {
	var v struct {
		Notes string `json:"notes"`
	}
	if err := c.Get(ctx, fmt.Sprintf("/nodes/%s/storage/%s/content/%s", url.PathEscape(node), url.PathEscape(storage), volid), &v); err != nil {
		return "", err
	}
	return v.Notes, nil
}
