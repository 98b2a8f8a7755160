package devstack

import (
	"encoding/json"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/flexplane/flexplane/pkg/dev/poll"
	"github.com/flexplane/flexplane/pkg/dev/pvetest"
	"github.com/flexplane/flexplane/pkg/pvesim"
	"github.com/flexplane/flexplane/pkg/support/unixsock"
)

func TestCommandLinesAreChecked(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		args []string
		path string // "" for a usage error
	}{
		{[]string{"status"}, "/status"},
		{[]string{"agent", "kill", "hel1-pve2"}, "/agents/hel1-pve2/kill"},
		{[]string{"node", "offline", "fra1", "pve3"}, "/zones/fra1/nodes/pve3/offline"},
		{[]string{"partition", "hel1"}, "/zones/hel1/partition"},
		{[]string{"heal", "fra1"}, "/zones/fra1/heal"},
		{nil, ""},
		{[]string{"reboot"}, ""},
		{[]string{"status", "now"}, ""},
		{[]string{"agent", "kill"}, ""},
		{[]string{"agent", "pause", "fra1-pve1"}, ""},
		{[]string{"agent", "kill", "fra1-pve4"}, ""},
		{[]string{"agent", "kill", "pve1"}, ""},
		{[]string{"node", "offline", "fra1"}, ""},
		{[]string{"node", "down", "fra1", "pve1"}, ""},
		{[]string{"node", "offline", "hel1", "pve3"}, ""},
		{[]string{"node", "offline", "ams1", "pve1"}, ""},
		{[]string{"partition"}, ""},
		{[]string{"partition", "ams1"}, ""},
		{[]string{"heal", "fra1", "hel1"}, ""},
	} {
		path, err := controlPath(c.args)
		var ue *UsageError
		if c.path == "" && (!errors.As(err, &ue) || ue.Msg == "") {
			t.Errorf("%q: %q, %v; want a usage error", c.args, path, err)
		}
		if c.path != "" && (err != nil || path != c.path) {
			t.Errorf("%q: %q, %v; want %s", c.args, path, err, c.path)
		}
	}
}

// TestCommandsActOnTheRunningStack: every command, through the control
// socket named in stack.json, on children that are real processes and a
// real simulated cluster.
func TestCommandsActOnTheRunningStack(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	s, _ := testStack(t, Config{Dir: dir, RestartDelay: 10 * time.Millisecond})
	for _, name := range agentNames() {
		if _, err := s.add(AgentPrefix+name, sh("exec sleep 60")); err != nil {
			t.Fatal(err)
		}
	}
	// fra1's simulator with its control socket, as pvesim --control serves it.
	const token = "root@pam!t=secret"
	sim, pve := pvetest.Start(t, pvesim.Config{Cluster: "fra1", Nodes: 3}, token)
	if err := os.MkdirAll(filepath.Join(dir, "pve"), 0o700); err != nil {
		t.Fatal(err)
	}
	ln, err := unixsock.Listen(filepath.Join(dir, "pve", "fra1.sock"))
	if err != nil {
		t.Fatal(err)
	}
	simControl := &http.Server{Handler: sim.ControlHandler()}
	go simControl.Serve(ln)
	defer simControl.Close()

	control, closeControl, err := s.serveControl()
	if err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(control); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("control socket %s: %v %v, want mode 0600", control, fi, err)
	}
	b, _ := json.Marshal(stackState{Control: control})
	if err := os.WriteFile(filepath.Join(dir, "stack.json"), b, 0o600); err != nil {
		t.Fatal(err)
	}
	run := func(args ...string) (string, error) {
		var out strings.Builder
		err := Command(t.Context(), dir, args, &out)
		return out.String(), err
	}
	must := func(args ...string) string {
		t.Helper()
		out, err := run(args...)
		if err != nil {
			t.Fatalf("devstack %s: %v", strings.Join(args, " "), err)
		}
		return out
	}
	unitOf := func(name string) *unit {
		s.mu.Lock()
		defer s.mu.Unlock()
		u, err := s.unitNamed(AgentPrefix + name)
		if err != nil {
			t.Fatal(err)
		}
		return u
	}
	pidOf := func(name string) int {
		_, p, running := s.state(unitOf(name))
		if !running {
			return 0
		}
		return p.pid()
	}

	if out := must("status"); strings.Count(out, " running ") != 5 || !strings.Contains(out, "agent fra1-pve1") {
		t.Errorf("status:\n%s", out)
	}

	// agent stop, start, kill.
	must("agent", "stop", "fra1-pve1")
	if pidOf("fra1-pve1") != 0 {
		t.Fatal("fra1-pve1 runs after agent stop")
	}
	if out := must("status"); !strings.Contains(out, "agent fra1-pve1  stopped") {
		t.Errorf("status after agent stop:\n%s", out)
	}
	if _, err := run("agent", "stop", "fra1-pve1"); err == nil || !strings.Contains(err.Error(), "already stopped") {
		t.Errorf("stopping it again: %v", err)
	}
	if _, err := run("agent", "kill", "fra1-pve1"); err == nil || !strings.Contains(err.Error(), "not running") {
		t.Errorf("killing a stopped agent: %v", err)
	}
	must("agent", "start", "fra1-pve1")
	poll.True(t, 10*time.Second, "fra1-pve1 started", func() bool { return pidOf("fra1-pve1") != 0 })
	killed := pidOf("fra1-pve2")
	if out := must("agent", "kill", "fra1-pve2"); !strings.Contains(out, "SIGKILL") {
		t.Errorf("agent kill said %q", out)
	}
	poll.True(t, 10*time.Second, "fra1-pve2 restarted", func() bool { p := pidOf("fra1-pve2"); return p != 0 && p != killed })

	// partition and heal: the zone's agents stop (T) and continue.
	must("partition", "fra1")
	for _, name := range agentNames() {
		want := "S"
		if strings.HasPrefix(name, "fra1-") {
			want = "T"
		}
		poll.True(t, 10*time.Second, name+" in state "+want, func() bool { return processState(pidOf(name)) == want })
	}
	if _, err := run("partition", "fra1"); err == nil || !strings.Contains(err.Error(), "already") {
		t.Errorf("partitioning it again: %v", err)
	}
	if out := must("status"); strings.Count(out, " partitioned ") != 3 {
		t.Errorf("status of a partitioned fra1:\n%s", out)
	}
	must("heal", "fra1")
	for _, name := range []string{"fra1-pve1", "fra1-pve2", "fra1-pve3"} {
		poll.True(t, 10*time.Second, name+" continued", func() bool { return processState(pidOf(name)) == "S" })
	}

	// node offline and online, relayed to the simulator.
	nodeStatus := func(node string) string {
		var rs []struct{ Node, Status string }
		if err := pve.Get(t.Context(), "/cluster/resources?type=node", &rs); err != nil {
			t.Fatal(err)
		}
		for _, r := range rs {
			if r.Node == node {
				return r.Status
			}
		}
		return ""
	}
	must("node", "offline", "fra1", "pve2")
	if st := nodeStatus("pve2"); st != "offline" {
		t.Errorf("pve2 after node offline: %q", st)
	}
	must("node", "online", "fra1", "pve2")
	if st := nodeStatus("pve2"); st != "online" {
		t.Errorf("pve2 after node online: %q", st)
	}
	// hel1's simulator is not running here: the command says so.
	if _, err := run("node", "offline", "hel1", "pve1"); err == nil || !strings.Contains(err.Error(), "pvesim hel1") {
		t.Errorf("node offline in a zone whose simulator is down: %v", err)
	}

	closeControl()
	if _, err := run("status"); err == nil || !strings.Contains(err.Error(), "is not running") {
		t.Errorf("a command when the stack is gone: %v", err)
	}
}
