package rollout_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/luthermonson/go-proxmox"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/flexplane/flexplane/pkg/agent"
	"github.com/flexplane/flexplane/pkg/dev/meshtest"
	"github.com/flexplane/flexplane/pkg/dev/poll"
	"github.com/flexplane/flexplane/pkg/mesh/fleet"
	"github.com/flexplane/flexplane/pkg/rollout"
	agentv1 "github.com/flexplane/flexplane/proto/flexplane/agent/v1"
)

type hostJSON struct {
	ID           string
	Name         string
	Status       string
	AgentVersion string
	Zone         struct{ ID, Name string }
	Update       *struct {
		State, Version, Reason string
	}
}

type opJSON struct {
	ID    string
	State string
	Error string
	Hosts []struct {
		ID, Name, Zone, State, Reason string
		Batch                         int
		Seconds                       float64
	}
}

const opFields = `id state error hosts { id name zone state reason batch seconds }`

func hosts(t testing.TB, h *meshtest.Harness) map[string]hostJSON {
	t.Helper()
	var hs []hostJSON
	h.GraphQL(t, "admin", "", `{ hosts { id name status agentVersion zone { id name } update { state version reason } } }`, nil).OK(t).Into(t, "hosts", &hs)
	out := map[string]hostJSON{}
	for _, x := range hs {
		out[x.Zone.Name+"/"+x.Name] = x
	}
	return out
}

// operation reads a rollout as the API reports it.
func operation(t testing.TB, h *meshtest.Harness, id string) opJSON {
	t.Helper()
	var op opJSON
	h.GraphQL(t, "admin", "", `query($id: ID!) { agentUpdateOperation(id: $id) { `+opFields+` } }`, map[string]any{"id": id}).OK(t).Into(t, "agentUpdateOperation", &op)
	return op
}

// follow polls a rollout until it ends, checking on every poll that no
// two hosts of one zone are updating at once; it returns the end state.
func follow(t testing.TB, h *meshtest.Harness, id string, timeout time.Duration) opJSON {
	t.Helper()
	var op opJSON
	poll.Until(t, timeout, "rollout "+id+" ending", func() error {
		op = operation(t, h, id)
		updating := map[string]int{}
		for _, x := range op.Hosts {
			if x.State == "UPDATING" {
				updating[x.Zone]++
				if updating[x.Zone] > 1 {
					t.Fatalf("two hosts of zone %s update at once: %+v", x.Zone, op.Hosts)
				}
			}
		}
		if op.State == "RUNNING" {
			return fmt.Errorf("still running: %+v", op)
		}
		return nil
	})
	return op
}

// vmUptimes reads the uptime of the VMs by zone client.
func vmUptime(t testing.TB, ctx context.Context, c *proxmox.Client, node string, vmid int) (string, uint64) {
	t.Helper()
	n, err := c.Node(ctx, node)
	if err != nil {
		t.Fatal(err)
	}
	vm, err := n.VirtualMachine(ctx, vmid)
	if err != nil {
		t.Fatal(err)
	}
	return vm.Status, vm.Uptime
}

// TestRollout updates real agent processes, built at two versions, across
// two zones in batches, refuses tampered releases before anything runs,
// ends a rollout abandoned by a crashed replica and takes its lock over,
// rolls back a release that crashes at start and one that never gets
// healthy, halting each rollout after its first host, and records a
// rollout whose orchestrator shut down as failed, its lock freed; the VMs
// keep running throughout.
func TestRollout(t *testing.T) {
	t.Parallel()
	bin := t.TempDir()
	v1 := meshtest.BuildAgent(t, bin, "v1.0.0")
	v11 := meshtest.BuildAgent(t, bin, "v1.1.0")
	const badagent = "github.com/flexplane/flexplane/pkg/rollout/testdata/badagent"
	crasher := meshtest.BuildProgram(t, bin, "crasher", badagent, "-X main.version=v1.2.0 -X main.mode=crash")
	hanger := meshtest.BuildProgram(t, bin, "hanger", badagent, "-X main.version=v1.3.0 -X main.mode=hang")

	k := meshtest.NewReleaseKey(t)
	h := meshtest.New(t, meshtest.WithoutAgents(), meshtest.WithAPI(meshtest.APISpec{}), meshtest.WithReleases(k.Public, 2*time.Minute),
		meshtest.WithClusters(meshtest.ClusterSpec{Name: "alpha", Nodes: 3}, meshtest.ClusterSpec{Name: "beta", Nodes: 2}))
	alpha, beta := h.Clusters[0], h.Clusters[1]
	env := []string{agent.EnvReleaseKey + "=" + k.Public, agent.EnvProbation + "=20s"}
	agents := append(h.StartProcessAgents(t, alpha, v1, env...), h.StartProcessAgents(t, beta, v1, env...)...)
	atVersion := func(version string) func() bool {
		return func() bool {
			for _, p := range agents {
				host, _, ok := h.ProcessHost(p)
				if !ok || host.Status != fleet.StatusOnline || host.AgentVersion != version {
					return false
				}
			}
			return true
		}
	}
	poll.True(t, 90*time.Second, "every agent online at v1.0.0", atVersion("v1.0.0"))

	// A running VM in each zone, whose uptime must only grow.
	ctx := t.Context()
	type vmRef struct {
		c    *proxmox.Client
		node string
	}
	var vms []vmRef
	for _, c := range []*meshtest.Cluster{alpha, beta} {
		client := c.Proxmox(t)
		n, err := client.Node(ctx, "pve1")
		if err != nil {
			t.Fatal(err)
		}
		task, err := n.NewVirtualMachine(ctx, 700, proxmox.VirtualMachineOption{Name: "memory", Value: 512})
		if err != nil {
			t.Fatal(err)
		}
		if err := task.Wait(ctx, 50*time.Millisecond, 30*time.Second); err != nil {
			t.Fatal(err)
		}
		vm, err := n.VirtualMachine(ctx, 700)
		if err != nil {
			t.Fatal(err)
		}
		task, err = vm.Start(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := task.Wait(ctx, 50*time.Millisecond, 30*time.Second); err != nil {
			t.Fatal(err)
		}
		vms = append(vms, vmRef{client, "pve1"})
	}
	lastUptime := make([]uint64, len(vms))
	checkVMs := func(t *testing.T) {
		t.Helper()
		for i, v := range vms {
			st, up := vmUptime(t, ctx, v.c, v.node, 700)
			if st != "running" || up < lastUptime[i] {
				t.Fatalf("VM %d: %s with uptime %d (was %d): an update touched it", i, st, up, lastUptime[i])
			}
			lastUptime[i] = up
		}
	}
	checkVMs(t)
	// agentClient is the orchestrator's client of p's agent.
	agentClient := func(t *testing.T, p *meshtest.ProcessAgent) agentv1.AgentServiceClient {
		t.Helper()
		host, _, _ := h.ProcessHost(p)
		client, ok := h.Orchestrator.Zones().Agent(host.MeshID)
		if !ok {
			t.Fatal("no client for", p)
		}
		return client
	}

	t.Run("tampered releases are refused before anything runs", func(t *testing.T) {
		p := agents[0]
		client := agentClient(t, p)
		good, err := os.ReadFile(v11)
		if err != nil {
			t.Fatal(err)
		}
		other := meshtest.NewReleaseKey(t)
		raw, sig := k.Manifest(t, v11, "v1.1.0", time.Now().Add(time.Hour))
		flipped := append([]byte(nil), good...)
		flipped[len(flipped)/2] ^= 0x01
		wrongRaw, wrongSig := other.Manifest(t, v11, "v1.1.0", time.Now().Add(time.Hour))
		expRaw, expSig := k.Manifest(t, v11, "v1.1.0", time.Now().Add(-time.Minute))
		oldRaw, oldSig := k.Manifest(t, v11, "v0.9.0", time.Now().Add(time.Hour))
		pid, starts := p.Pid(), p.Starts()
		for _, tc := range []struct {
			name          string
			manifest, sig []byte
			data          []byte
			want          string
		}{
			{"flipped byte", raw, sig, flipped, "SHA-256"},
			{"wrong key", wrongRaw, wrongSig, good, "none of the trusted keys"},
			{"expired", expRaw, expSig, good, "expired"},
			{"older version", oldRaw, oldSig, good, "not newer"},
			{"truncated download", raw, sig, good[:len(good)-4096], "truncated"},
			{"longer than its manifest", raw, sig, append(append([]byte(nil), good...), 0), "longer"},
		} {
			err := stream(t, client, &agentv1.UpdateRequest{Manifest: tc.manifest, Signature: tc.sig}, tc.data)
			if status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("%s: %v, want FailedPrecondition saying %q", tc.name, err, tc.want)
			}
		}
		entries, err := os.ReadDir(filepath.Join(p.StateDir, "update", "versions"))
		if err != nil || len(entries) != 0 {
			t.Errorf("versions after refusals: %v %v, want none", entries, err)
		}
		if _, err := os.Lstat(filepath.Join(p.StateDir, "update", "current")); !os.IsNotExist(err) {
			t.Errorf("current link after refusals: %v, want none", err)
		}
		if p.Pid() != pid || p.Starts() != starts {
			t.Errorf("the agent restarted (pid %d→%d, starts %d→%d)", pid, p.Pid(), starts, p.Starts())
		}
		// Nobody waits for this refusal: it shows at the agent's next
		// sampled Health (fleet's HealthInterval, 20s, and a quarter).
		poll.True(t, 35*time.Second, "the refusal reported", func() bool {
			x := hosts(t, h)["alpha/pve1"]
			return x.Update != nil && x.Update.State == "REFUSED" && strings.Contains(x.Update.Reason, "longer") && x.AgentVersion == "v1.0.0"
		})
	})

	t.Run("update across the zones in batches", func(t *testing.T) {
		k.Publish(t, h, v11, "v1.1.0")
		var rels []struct{ Version, Platform string }
		h.GraphQL(t, "admin", "", `{ agentReleases { version platform } }`, nil).OK(t).Into(t, "agentReleases", &rels)
		if len(rels) != 1 || rels[0].Version != "v1.1.0" {
			t.Fatalf("agentReleases = %+v", rels)
		}
		before := hosts(t, h)
		var avail []struct{ UpdateAvailable bool }
		h.GraphQL(t, "admin", "", `{ hosts { updateAvailable } }`, nil).OK(t).Into(t, "hosts", &avail)
		for _, a := range avail {
			if !a.UpdateAvailable {
				t.Fatalf("updateAvailable false with v1.1.0 published: %+v", avail)
			}
		}
		// Bad input changes nothing.
		r := h.GraphQL(t, "admin", "", `mutation { updateAgents(input: {version: "v9.9.9"}) { id } }`, nil)
		if r.Code(t) != "NOT_FOUND" {
			t.Fatalf("unpublished version: %v", r.Err())
		}
		if r := h.GraphQL(t, "alice", "red", `mutation { updateAgents(input: {version: "v1.1.0"}) { id } }`, nil); r.Code(t) != "NOT_FOUND" {
			t.Fatalf("a VDC member updating agents: %v", r.Err())
		}
		start := time.Now()
		var op opJSON
		h.GraphQL(t, "admin", "", `mutation { updateAgents(input: {version: "v1.1.0", batch: 4}) { `+opFields+` } }`, nil).OK(t).Into(t, "updateAgents", &op)
		if r := h.GraphQL(t, "admin", "", `mutation { updateAgents(input: {version: "v1.1.0"}) { id } }`, nil); r.Code(t) != "CONFLICT" {
			t.Fatalf("a second rollout while one runs: %v", r.Err())
		}
		op = follow(t, h, op.ID, 8*time.Minute)
		t.Logf("updated 5 hosts in %s", time.Since(start).Round(time.Millisecond))
		if op.State != "SUCCEEDED" {
			t.Fatalf("rollout %s: %s", op.State, op.Error)
		}
		perBatch := map[int][]string{}
		for _, x := range op.Hosts {
			if x.State != "DONE" {
				t.Errorf("host %s/%s: %s %s", x.Zone, x.Name, x.State, x.Reason)
			}
			perBatch[x.Batch] = append(perBatch[x.Batch], x.Zone)
			t.Logf("batch %d: %s/%s in %.1fs", x.Batch, x.Zone, x.Name, x.Seconds)
		}
		if len(perBatch[1]) != 1 || len(perBatch[2]) != 2 || len(perBatch[3]) != 2 {
			t.Errorf("batches %v, want 1 host, then 2, then 2 (one per zone)", perBatch)
		}
		for b, zs := range perBatch {
			if len(zs) == 2 && zs[0] == zs[1] {
				t.Errorf("batch %d updates two hosts of zone %s", b, zs[0])
			}
		}
		poll.True(t, 30*time.Second, "every agent online at v1.1.0", atVersion("v1.1.0"))
		for name, x := range hosts(t, h) {
			if x.Update == nil || x.Update.State != "DONE" || x.Update.Version != "v1.1.0" || x.ID != before[name].ID {
				t.Errorf("host %s after the rollout: %+v", name, x)
			}
		}
		checkVMs(t)
	})

	t.Run("a rollout abandoned by a stopped replica is ended and its lock taken over", func(t *testing.T) {
		// Records as a replica writes them, in the directory the replicas
		// share: one still driven (just written), then one whose replica
		// crashed mid-rollout (untouched for 10 minutes).
		dir := filepath.Join(h.DataDir(), "releases", "rollouts")
		zone := hosts(t, h)["alpha/pve1"].Zone.ID
		record := func(id string, updated time.Time) {
			r := rollout.Rollout{ID: id, Version: "v1.1.0", State: rollout.Running, Hosts: []rollout.Host{
				{ZoneID: zone, ZoneName: "alpha", Node: "pve1", Batch: 1, From: "v1.0.0", State: rollout.HostUpdating},
				{ZoneID: zone, ZoneName: "alpha", Node: "pve2", Batch: 2, From: "v1.0.0", State: rollout.HostPending},
			}, StartedAt: updated, UpdatedAt: updated}
			b, err := json.Marshal(r)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(dir, id+".json"), b, 0o644); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(dir, "active"), []byte(id), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		const live, crashed = "upd-00000000000000a1", "upd-00000000000000a2"
		record(live, time.Now().UTC())
		if op := operation(t, h, live); op.State != "RUNNING" {
			t.Fatalf("a rollout another replica drives: %+v, want RUNNING", op)
		}
		if r := h.GraphQL(t, "admin", "", `mutation { updateAgents(input: {version: "v1.1.0"}) { id } }`, nil); r.Code(t) != "CONFLICT" {
			t.Fatalf("a rollout while another replica drives one: %v, want CONFLICT", r.Err())
		}

		record(crashed, time.Now().Add(-10*time.Minute).UTC())
		op := operation(t, h, crashed)
		if op.State != "FAILED" || !strings.Contains(op.Error, "abandoned") || len(op.Hosts) != 2 ||
			op.Hosts[0].State != "FAILED" || !strings.Contains(op.Hosts[0].Reason, "stopped") || op.Hosts[1].State != "SKIPPED" {
			t.Fatalf("an abandoned rollout: %+v, want FAILED abandoned, its updating host FAILED, its pending one SKIPPED", op)
		}
		// The next rollout takes the lock over (every host runs v1.1.0:
		// all are skipped and it ends at once) and records the abandoned
		// one as ended.
		var next opJSON
		h.GraphQL(t, "admin", "", `mutation { updateAgents(input: {version: "v1.1.0"}) { `+opFields+` } }`, nil).OK(t).Into(t, "updateAgents", &next)
		next = follow(t, h, next.ID, time.Minute)
		if next.State != "SUCCEEDED" || len(next.Hosts) != 5 {
			t.Fatalf("the rollout after an abandoned one: %+v, want SUCCEEDED over 5 hosts", next)
		}
		for _, x := range next.Hosts {
			if x.State != "SKIPPED" {
				t.Errorf("host %s/%s: %s, want SKIPPED (at v1.1.0 already)", x.Zone, x.Name, x.State)
			}
		}
		var onDisk rollout.Rollout
		if b, err := os.ReadFile(filepath.Join(dir, crashed+".json")); err != nil || json.Unmarshal(b, &onDisk) != nil {
			t.Fatalf("the abandoned record: %v", err)
		}
		if onDisk.State != rollout.Failed || onDisk.FinishedAt.IsZero() || onDisk.Hosts[0].State != rollout.HostFailed {
			t.Errorf("the abandoned record after the takeover: %+v, want failed and finished", onDisk)
		}
		// The record says it ended just before the lock goes.
		poll.True(t, 10*time.Second, "the lock freed after the rollout ended", func() bool {
			_, err := os.Stat(filepath.Join(dir, "active"))
			return os.IsNotExist(err)
		})
		checkVMs(t)
	})

	rollback := func(t *testing.T, c *meshtest.Cluster, bad, version, reason string) {
		k.Publish(t, h, bad, version)
		zone := hosts(t, h)[c.Spec.Name+"/pve1"].Zone.ID
		start := time.Now()
		var op opJSON
		h.GraphQL(t, "admin", "", `mutation($zone: ID!, $v: String!) { updateAgents(input: {version: $v, zone: $zone}) { `+opFields+` } }`,
			map[string]any{"zone": zone, "v": version}).OK(t).Into(t, "updateAgents", &op)
		op = follow(t, h, op.ID, 4*time.Minute)
		t.Logf("%s rolled back and the rollout halted in %s", version, time.Since(start).Round(time.Millisecond))
		if op.State != "FAILED" || !strings.Contains(op.Error, "halted") {
			t.Fatalf("rollout %s: %s, want FAILED halted", op.State, op.Error)
		}
		first := op.Hosts[0]
		if first.State != "FAILED" || !strings.Contains(first.Reason, "rolled-back") || !strings.Contains(first.Reason, reason) {
			t.Errorf("first host: %s %q, want FAILED, rolled back: %q", first.State, first.Reason, reason)
		}
		for _, x := range op.Hosts[1:] {
			if x.State != "SKIPPED" {
				t.Errorf("host %s after the halt: %s, want SKIPPED", x.Name, x.State)
			}
		}
		poll.True(t, 30*time.Second, "the zone online at v1.1.0 again", atVersion("v1.1.0"))
		x := hosts(t, h)[c.Spec.Name+"/"+first.Name]
		if x.Update == nil || x.Update.State != "ROLLED_BACK" || !strings.Contains(x.Update.Reason, reason) || x.Update.Version != version {
			t.Errorf("host %s: %+v, want ROLLED_BACK from %s: %q", first.Name, x.Update, version, reason)
		}
		checkVMs(t)
	}
	t.Run("a release that crashes at start is rolled back", func(t *testing.T) {
		rollback(t, alpha, crasher, "v1.2.0", "crashes at start")
	})
	t.Run("a release that never gets healthy is rolled back", func(t *testing.T) {
		rollback(t, beta, hanger, "v1.3.0", "not healthy within 20s")
	})
	t.Run("an orchestrator shutting down mid-rollout records it failed and frees its lock", func(t *testing.T) {
		zone := hosts(t, h)["alpha/pve1"].Zone.ID
		var op opJSON
		h.GraphQL(t, "admin", "", `mutation($zone: ID!) { updateAgents(input: {version: "v1.3.0", zone: $zone}) { `+opFields+` } }`,
			map[string]any{"zone": zone}).OK(t).Into(t, "updateAgents", &op)
		poll.True(t, time.Minute, "the first host updating", func() bool {
			x := operation(t, h, op.ID)
			return len(x.Hosts) == 3 && x.Hosts[0].State == "UPDATING"
		})
		h.RestartOrchestrator(t)
		op = operation(t, h, op.ID)
		if op.State != "FAILED" || op.Hosts[0].State != "FAILED" || !strings.Contains(op.Hosts[0].Reason, "shut down") {
			t.Fatalf("a rollout whose orchestrator shut down: %+v, want FAILED, its updating host FAILED saying the orchestrator shut down", op)
		}
		for _, x := range op.Hosts[1:] {
			if x.State != "SKIPPED" {
				t.Errorf("host %s after the shutdown: %s, want SKIPPED", x.Name, x.State)
			}
		}
		if _, err := os.Stat(filepath.Join(h.DataDir(), "releases", "rollouts", "active")); !os.IsNotExist(err) {
			t.Errorf("the lock after the shutdown: %v, want none", err)
		}
		// The host finishes on its own: the release never gets healthy,
		// so its launcher rolls it back.
		poll.True(t, 90*time.Second, "every agent online at v1.1.0 again", atVersion("v1.1.0"))
		checkVMs(t)
	})
	t.Run("a floor revokes the versions below it", func(t *testing.T) {
		// The agent keeps a floor sent with a release and refuses a
		// release below it before accepting a byte.
		p := agents[0]
		client := agentClient(t, p)
		good, err := os.ReadFile(hanger)
		if err != nil {
			t.Fatal(err)
		}
		raw, sig := k.Manifest(t, hanger, "v1.3.0", time.Now().Add(time.Hour))
		floor, floorSig := k.Floor(t, "v1.4.0")
		err = stream(t, client, &agentv1.UpdateRequest{Manifest: raw, Signature: sig, Floor: floor, FloorSignature: floorSig}, good)
		if status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), "floor") {
			t.Fatalf("a release below the floor sent with it: %v, want FailedPrecondition naming the floor", err)
		}
		// Without the floor (an orchestrator that forgot it) still refused.
		if err := stream(t, client, &agentv1.UpdateRequest{Manifest: raw, Signature: sig}, good); status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), "floor") {
			t.Fatalf("a release below the floor the agent has seen: %v, want FailedPrecondition naming the floor", err)
		}
		// The orchestrator refuses to roll out below its floor.
		k.PublishFloor(t, h, "v1.4.0")
		r := h.GraphQL(t, "admin", "", `mutation { updateAgents(input: {version: "v1.3.0"}) { id } }`, nil)
		if r.Code(t) != "CONFLICT" || !strings.Contains(r.Err().Error(), "floor") {
			t.Fatalf("a rollout below the floor: %v, want CONFLICT naming the floor", r.Err())
		}
		poll.True(t, 30*time.Second, "every agent online at v1.1.0", atVersion("v1.1.0"))
	})
}

// stream sends a release to an agent as the orchestrator does (first is
// its first message: manifest, signature, floor), with arbitrary bytes for
// the binary.
func stream(t testing.TB, client agentv1.AgentServiceClient, first *agentv1.UpdateRequest, data []byte) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s, err := client.Update(ctx)
	if err != nil {
		return err
	}
	first.Operation = "test"
	if err := s.Send(first); err != nil {
		_, err = s.CloseAndRecv()
		return err
	}
	for len(data) > 0 {
		n := min(len(data), 256<<10)
		if err := s.Send(&agentv1.UpdateRequest{Data: data[:n]}); err != nil {
			_, err = s.CloseAndRecv()
			return err
		}
		data = data[n:]
	}
	_, err = s.CloseAndRecv()
	return err
}
