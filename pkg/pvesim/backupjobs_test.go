package pvesim_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	proxmox "github.com/luthermonson/go-proxmox"

	"github.com/flexplane/flexplane/pkg/dev/poll"
	"github.com/flexplane/flexplane/pkg/pvesim"
)

// vzdumpTasks lists the vzdump tasks of the cluster by guest ("" for a
// task of several), failing while one runs.
func vzdumpTasks(t *testing.T, c *pvesim.Cluster) ([]string, error) {
	t.Helper()
	r := call(t, c, testToken, http.MethodGet, "/cluster/tasks", nil)
	var ids []string
	for _, e := range r.data.([]any) {
		m := e.(map[string]any)
		if m["type"] != "vzdump" {
			continue
		}
		if m["status"] == "running" || m["status"] == nil {
			return nil, fmt.Errorf("task %v still runs", m["upid"])
		}
		if m["status"] != "OK" {
			return nil, fmt.Errorf("task %v: %v", m["upid"], m["status"])
		}
		if m["user"] != "root@pam" {
			t.Errorf("task %v runs as %v, want root@pam", m["upid"], m["user"])
		}
		ids = append(ids, m["id"].(string))
	}
	slices.Sort(ids)
	return ids, nil
}

// archives lists the backup archives of guest vmid on node's local storage.
func archiveList(t *testing.T, c *pvesim.Cluster, node string, vmid int) []string {
	t.Helper()
	r := call(t, c, testToken, http.MethodGet, "/nodes/"+node+"/storage/local/content", url.Values{"content": {"backup"}, "vmid": {fmt.Sprint(vmid)}})
	var out []string
	for _, e := range r.data.([]any) {
		out = append(out, e.(map[string]any)["volid"].(string))
	}
	slices.Sort(out)
	return out
}

// TestBackupJobs: a backup job (/cluster/backup) runs by the simulator's
// clock as a vzdump task on each node with guests of its list, once for
// one scheduled time however far the clock jumps; it prunes each guest's
// archives by keep-last and keep-daily; a disabled job does not run, nor,
// enabled again, make up for the times it passed over; a schedule that
// does not parse is refused and changes nothing.
func TestBackupJobs(t *testing.T) {
	t.Parallel()
	c := startCluster(t, pvesim.Config{Cluster: "c", Nodes: 2, CheckResponses: true})
	ctx := testCtx(t)
	cl := pveClient(t, c, testTokenID, testTokenSecret)
	for vmid, node := range map[int]string{100: "pve1", 101: "pve2"} {
		r := call(t, c, testToken, http.MethodPost, "/nodes/"+node+"/qemu", url.Values{"vmid": {fmt.Sprint(vmid)}, "name": {fmt.Sprintf("vm%d", vmid)},
			"scsi0": {"local-lvm:1"}})
		waitOK(t, ctx, proxmox.NewTask(proxmox.UPID(r.data.(string)), cl), nil)
	}

	job := url.Values{"id": {"nightly"}, "schedule": {"02:61"}, "vmid": {"100,101"}, "storage": {"local"}, "mode": {"snapshot"},
		"compress": {"zstd"}, "prune-backups": {"keep-last=1,keep-daily=1"}, "notes-template": {"job {{guestname}}"}, "comment": {"every night"}}
	if r := call(t, c, testToken, http.MethodPost, "/cluster/backup", job); r.status != http.StatusBadRequest || !strings.Contains(r.errors["schedule"], "calendar event") {
		t.Fatalf("a job with schedule 02:61: %s %v, want 400 naming schedule", r.reason, r.errors)
	}
	if r := call(t, c, testToken, http.MethodGet, "/cluster/backup", nil); len(r.data.([]any)) != 0 {
		t.Fatalf("after a refused create the jobs are %v, want none", r.data)
	}
	job.Set("schedule", "02:00")
	if r := call(t, c, testToken, http.MethodPost, "/cluster/backup", job); r.status != http.StatusOK {
		t.Fatalf("create job: %s", r.reason)
	}
	r := call(t, c, testToken, http.MethodGet, "/cluster/backup/nightly", nil)
	got := r.data.(map[string]any)
	if got["schedule"] != "02:00" || got["vmid"] != "100,101" || got["comment"] != "every night" || got["next-run"] == nil {
		t.Fatalf("job read back as %v", got)
	}
	next := time.Unix(int64(got["next-run"].(float64)), 0)

	// day runs the clock on to d days after the job's first time and
	// waits for what ran.
	want := []string{}
	day := func(d int, runs bool) {
		t.Helper()
		c.AdvanceClockForTest(next.Add(time.Duration(d)*24*time.Hour + time.Minute).Sub(c.ClockForTest()))
		if runs {
			want = append(want, "100", "101")
			slices.Sort(want)
		}
		poll.Until(t, 10*time.Second, "the job's vzdump tasks", func() error {
			ids, err := vzdumpTasks(t, c)
			if err != nil {
				return err
			}
			if !slices.Equal(ids, want) {
				return fmt.Errorf("vzdump tasks of %v, want %v", ids, want)
			}
			return nil
		})
	}
	day(0, true)
	first := archiveList(t, c, "pve1", 100)
	if len(first) != 1 || len(archiveList(t, c, "pve2", 101)) != 1 {
		t.Fatalf("after the first run: archives %v and %v, want one each", first, archiveList(t, c, "pve2", 101))
	}
	r = call(t, c, testToken, http.MethodGet, "/nodes/pve1/storage/local/content", url.Values{"content": {"backup"}})
	if notes := r.data.([]any)[0].(map[string]any)["notes"]; notes != "job vm100" {
		t.Errorf("the archive's notes are %q, want the job's template filled in", notes)
	}
	// The same scheduled time again: nothing runs twice.
	c.AdvanceClockForTest(time.Minute)
	day(0, false)

	day(1, true)
	if got := archiveList(t, c, "pve1", 100); len(got) != 2 || got[0] != first[0] {
		t.Fatalf("after the second day: archives %v, want the first and a new one", got)
	}
	// A whole day skipped runs once; keep-last=1 keeps the newest,
	// keep-daily=1 the newest of another day: the first is pruned.
	day(3, true)
	got3 := archiveList(t, c, "pve1", 100)
	if len(got3) != 2 || slices.Contains(got3, first[0]) {
		t.Fatalf("after the fourth day: archives %v, want two without the first %s", got3, first[0])
	}
	if log := taskLog(t, c, "pve1", lastVzdump(t, c, "pve1")); !strings.Contains(log, "INFO: pruned 1 backup(s) not covered by keep-retention policy") {
		t.Errorf("the last run's log does not say it pruned one:\n%s", log)
	}

	if r := call(t, c, testToken, http.MethodPut, "/cluster/backup/nightly", url.Values{"enabled": {"0"}}); r.status != http.StatusOK {
		t.Fatalf("disable: %s", r.reason)
	}
	if r := call(t, c, testToken, http.MethodGet, "/cluster/backup/nightly", nil); r.data.(map[string]any)["next-run"] != nil {
		t.Errorf("a disabled job shows next-run %v", r.data.(map[string]any)["next-run"])
	}
	day(4, false)
	// Enabled again, it does not make up for the time it passed over
	// while disabled; it runs at its next time.
	if r := call(t, c, testToken, http.MethodPut, "/cluster/backup/nightly", url.Values{"enabled": {"1"}}); r.status != http.StatusOK {
		t.Fatalf("enable: %s", r.reason)
	}
	c.AdvanceClockForTest(time.Minute)
	day(4, false)
	day(5, true)
	if r := call(t, c, testToken, http.MethodDelete, "/cluster/backup/nightly", nil); r.status != http.StatusOK {
		t.Fatalf("delete: %s", r.reason)
	}
	if r := call(t, c, testToken, http.MethodGet, "/cluster/backup/nightly", nil); r.status != http.StatusInternalServerError {
		t.Errorf("a deleted job answers %s", r.reason)
	}
	if p := c.SchemaProblems(); len(p) > 0 {
		t.Errorf("responses disagree with the schema: %v", p)
	}
}

// lastVzdump is the newest vzdump task of node.
func lastVzdump(t *testing.T, c *pvesim.Cluster, node string) string {
	t.Helper()
	r := call(t, c, testToken, http.MethodGet, "/nodes/"+node+"/tasks", url.Values{"typefilter": {"vzdump"}})
	list := r.data.([]any)
	if len(list) == 0 {
		t.Fatal("no vzdump task")
	}
	return list[0].(map[string]any)["upid"].(string)
}

// TestVzdumpOneAtATimePerNode: a second vzdump on a node waits for the
// first (vzdump's global lock): its guest is not locked meanwhile and its
// log says it waits; both then finish.
func TestVzdumpOneAtATimePerNode(t *testing.T) {
	t.Parallel()
	c := startCluster(t, pvesim.Config{Cluster: "c", Nodes: 1, Timing: pvesim.Timing{PerGiB: 2 * time.Second}})
	ctx := testCtx(t)
	cl := pveClient(t, c, testTokenID, testTokenSecret)
	for _, vmid := range []string{"100", "101"} {
		r := call(t, c, testToken, http.MethodPost, "/nodes/pve1/qemu", url.Values{"vmid": {vmid}, "scsi0": {"local-lvm:0.125"}})
		waitOK(t, ctx, proxmox.NewTask(proxmox.UPID(r.data.(string)), cl), nil)
	}
	var upids []string
	for _, vmid := range []string{"100", "101"} {
		r := call(t, c, testToken, http.MethodPost, "/nodes/pve1/vzdump", url.Values{"vmid": {vmid}, "storage": {"local"}})
		if r.status != http.StatusOK {
			t.Fatalf("vzdump %s: %s", vmid, r.reason)
		}
		upids = append(upids, r.data.(string))
	}
	if lock := call(t, c, testToken, http.MethodGet, "/nodes/pve1/qemu/101/config", nil).data.(map[string]any)["lock"]; lock != nil {
		t.Errorf("the waiting backup's guest is locked %v", lock)
	}
	if log := taskLog(t, c, "pve1", upids[1]); !strings.Contains(log, "INFO: trying to get global lock - waiting...") {
		t.Errorf("the second vzdump's log does not say it waits:\n%s", log)
	}
	for _, u := range upids {
		waitOK(t, ctx, proxmox.NewTask(proxmox.UPID(u), cl), nil)
	}
	if got := archiveList(t, c, "pve1", 101); len(got) != 1 {
		t.Errorf("the second backup's archives: %v", got)
	}
}

// TestBackupJobSurvivesRestart: a job and when it last ran are in the
// state file: after a restart it is listed as it was and, its time not
// come again, does not run at once.
func TestBackupJobSurvivesRestart(t *testing.T) {
	t.Parallel()
	cfg := pvesim.Config{Cluster: "lab", Nodes: 1, StateFile: filepath.Join(t.TempDir(), "state.json")}
	c := startCluster(t, cfg)
	if r := call(t, c, testToken, http.MethodPost, "/cluster/backup", url.Values{"id": {"keep"}, "schedule": {"sat 03:30"}, "vmid": {"100"},
		"storage": {"local"}, "prune-backups": {"keep-weekly=4"}, "enabled": {"0"}}); r.status != http.StatusOK {
		t.Fatalf("create job: %s", r.reason)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	c2 := startCluster(t, cfg)
	r := call(t, c2, testToken, http.MethodGet, "/cluster/backup/keep", nil)
	got, _ := r.data.(map[string]any)
	if got["schedule"] != "sat 03:30" || fmt.Sprint(got["prune-backups"]) != "map[keep-weekly:4]" || fmt.Sprint(got["enabled"]) != "false" {
		t.Fatalf("after the restart the job reads %s %v", r.reason, r.data)
	}
}

// TestClockControl: the control handler moves the backup jobs' clock
// forward by a duration, and refuses what is not one.
func TestClockControl(t *testing.T) {
	t.Parallel()
	c := startCluster(t, pvesim.Config{Cluster: "lab", Nodes: 1})
	ctl := httptest.NewServer(c.ControlHandler())
	t.Cleanup(ctl.Close)
	post := func(q string) int {
		t.Helper()
		resp, err := http.Post(ctl.URL+"/clock?"+q, "", nil)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	before := c.ClockForTest()
	if code := post("advance=25h"); code != http.StatusNoContent {
		t.Fatalf("advance=25h: %d", code)
	}
	if ahead := c.ClockForTest().Sub(before); ahead < 25*time.Hour {
		t.Errorf("the clock moved %v, want 25h", ahead)
	}
	for _, q := range []string{"advance=tomorrow", "advance=-1h", ""} {
		if code := post(q); code != http.StatusBadRequest {
			t.Errorf("%q: %d, want 400", q, code)
		}
	}
}
