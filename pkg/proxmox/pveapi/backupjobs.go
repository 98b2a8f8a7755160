package pveapi

import (
	"context"
	"fmt"
	"time"

	proxmox "github.com/luthermonson/go-proxmox"
)

// BackupJob is a backup job of the cluster (GET /cluster/backup): a
// vzdump that Proxmox's scheduler runs on its schedule.
type BackupJob struct {
	// ID is the job's id.
	ID string
	// Schedule is its calendar event ("daily", "mon..fri 02:00").
	Schedule string
	// VMIDs is its list of guests ("100,101").
	VMIDs string
	// Storage is where its archives go.
	Storage string
	// Enabled is false for a job that does not run.
	Enabled bool
	// Comment is the job's comment.
	Comment string
	// NotesTemplate is the template of its archives' notes.
	NotesTemplate string
	// Keep are its prune-backups options ("keep-last" -> 3); empty keeps
	// every archive.
	Keep map[string]int
	// NextRun is when it runs next (zero for a disabled job).
	NextRun time.Time
}

// BackupJobs lists the cluster's backup jobs.
func BackupJobs(ctx context.Context, c *proxmox.Client) ([]BackupJob, error) {
	var raw []struct {
		ID       string             `json:"id"`
		Schedule string             `json:"schedule"`
		VMID     string             `json:"vmid"`
		Storage  string             `json:"storage"`
		Enabled  *proxmox.IntOrBool `json:"enabled"`
		Comment  string             `json:"comment"`
		Notes    string             `json:"notes-template"`
		Prune    map[string]any     `json:"prune-backups"`
		NextRun  int64              `json:"next-run"`
	}
	if err := c.Get(ctx, "/cluster/backup", &raw); err != nil {
		return nil, fmt.Errorf("pveapi: backup jobs: %w", err)
	}
	out := make([]BackupJob, 0, len(raw))
	for _, j := range raw {
		b := BackupJob{ID: j.ID, Schedule: j.Schedule, VMIDs: j.VMID, Storage: j.Storage, Enabled: j.Enabled == nil || bool(*j.Enabled),
			Comment: j.Comment, NotesTemplate: j.Notes, Keep: map[string]int{}}
		for k, v := range j.Prune {
			if n, ok := v.(float64); ok && k != "keep-all" {
				b.Keep[k] = int(n)
			}
		}
		if j.NextRun > 0 {
			b.NextRun = time.Unix(j.NextRun, 0)
		}
		out = append(out, b)
	}
	return out, nil
}
