package devstack_test

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/flexplane/flexplane/pkg/dev/devstack"
	"github.com/flexplane/flexplane/pkg/dev/netns"
	"github.com/flexplane/flexplane/pkg/dev/poll"
)

// TestCreatesAcrossOrchestratorRestarts: 10 clients send 100 creates (two
// VDCs, two zones) while the dev stack's orchestrator process is stopped
// with SIGTERM, then killed with SIGKILL, each time with creates accepted
// and not finished and requests in flight, and restarted by the stack. Every
// create accepted ends RUNNING exactly once with its address; one whose
// request was cut off ends RUNNING once or leaves nothing; one refused is
// refused as unavailable (never as bad input: right after a restart the
// zones are not known yet) or rate limited (alice's ten clients together
// send faster than one caller may) and sent again; no guest, IPAM address or quota
// reservation is left without its VM.
func TestCreatesAcrossOrchestratorRestarts(t *testing.T) {
	t.Parallel()
	repo := stackTestRepo(t, "the orchestrator restart test")
	tmp := t.TempDir()
	bin := buildStack(t)
	addr, dir := freeAddr(t), filepath.Join(tmp, "dev")
	ctx := t.Context()
	// Fast Proxmox tasks: 100 creates in a bounded time. A create the old
	// process left is taken over after 15s, not the default 2m.
	s := startStack(t, bin, repo, addr, dir, "DEV_PVE_TIMING=fast", "DEV_RESTART_DELAY_MAX=1s", "DEV_START_LIMIT_BURST=20", "DEV_VM_RECOVER_AFTER=15s")
	status := func() string { out, _ := devstackCommand(t, bin, dir, "status"); return out }
	// The clients connect to the orchestrator in the stack's namespace, not
	// through the stack's forwarder: a stopped orchestrator refuses the
	// connection (the create was not sent) rather than the forwarder
	// closing it (which a cut-off request also looks like).
	simPID := pidInStatus(status(), "pvesim fra1")
	direct := func(c *devstack.Client) *devstack.Client {
		d := *c
		d.HTTPClient = &http.Client{Timeout: time.Minute, Transport: &http.Transport{DialContext: netns.DialerOf(simPID)}}
		return &d
	}
	admin, alice := direct(s.client(t, "admin")), direct(s.client(t, "alice"))
	for _, vdc := range []string{"prod", "dev"} {
		in := map[string]any{"name": vdc, "quotas": map[string]any{"vcpus": 400, "memoryMiB": 1 << 20, "storageGiB": 20000, "vms": 200}}
		// Again on CONFLICT: the stack's seeding writes the VDC meanwhile.
		poll.Until(t, time.Minute, "the quotas of "+vdc+" raised", func() error {
			return admin.Do(ctx, "", `mutation($in: UpdateVDCInput!) { updateVDC(input: $in) { name } }`, map[string]any{"in": in}, nil)
		})
	}
	networks := networksOf(t, ctx, alice)

	const clients, each = 10, 10
	type create struct{ vdc, name string }
	var (
		mu       sync.Mutex
		accepted []create           // protected by mu
		cutOff   []create           // protected by mu
		refused  = map[string]int{} // by code or error; protected by mu
	)
	countAccepted := func() int { mu.Lock(); defer mu.Unlock(); return len(accepted) }
	var wg sync.WaitGroup
	for c := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(c), 1))
			vdc, zone := []string{"prod", "dev"}[c%2], []string{"fra1", "hel1"}[c/2%2]
			// poll:own-loop: a client's creates, paced at random.
			for i := range each {
				cr := create{vdc, fmt.Sprintf("rs-%d-%d", c, i)}
				spec := devstack.VMSpec{Name: cr.name, Zone: zone, Image: "debian-12", ComputeProfile: "small",
					StorageProfile: "ssd-standard", DiskGiB: 10, Network: networks[vdc+"/"+zone]}
				// poll:own-loop: a client sending again every 200 ms,
				// counting each refusal.
				for deadline := time.Now().Add(3 * time.Minute); ; {
					_, err := devstack.CreateVM(ctx, alice, vdc, spec)
					var re *devstack.ResponseError
					mu.Lock()
					switch {
					case err == nil:
						accepted = append(accepted, cr)
					case errors.Is(err, syscall.ECONNREFUSED):
						refused["connection refused"]++
					case errors.As(err, &re) && !slices.ContainsFunc(codes(re), func(c string) bool {
						return c != "UNAVAILABLE" && c != "ZONE_UNAVAILABLE" && c != "INTERNAL" && c != "RATE_LIMITED"
					}):
						// Starting, the zones not known yet, cut off inside
						// or over alice's rate limit: refused, nothing
						// left; sent again.
						refused[strings.Join(codes(re), ",")]++
					case re != nil:
						t.Errorf("%s refused: %v", cr.name, err)
						mu.Unlock()
						return
					default: // cut off: sent, and maybe accepted
						cutOff = append(cutOff, cr)
						t.Logf("%s cut off: %v", cr.name, err)
						err = nil
					}
					mu.Unlock()
					if err == nil {
						break
					}
					if time.Now().After(deadline) {
						t.Errorf("%s not accepted within 3m: %v", cr.name, err)
						return
					}
					time.Sleep(200 * time.Millisecond)
				}
				time.Sleep(time.Duration(rng.Int64N(int64(400 * time.Millisecond))))
			}
		}()
	}
	restart := func(sig syscall.Signal, after int) {
		poll.Until(t, 3*time.Minute, fmt.Sprintf("%d creates accepted", after), func() error {
			if n := countAccepted(); n < after {
				return fmt.Errorf("%d accepted", n)
			}
			return nil
		})
		pid := pidInStatus(status(), "orchestrator")
		if pid == 0 {
			t.Fatal("no orchestrator pid in devstack status")
		}
		if err := syscall.Kill(pid, sig); err != nil {
			t.Fatal(err)
		}
		began := time.Now()
		poll.Until(t, 2*time.Minute, "the orchestrator restarted", func() error {
			if p := pidInStatus(status(), "orchestrator"); p == 0 || p == pid {
				return errors.New("not restarted")
			}
			return nil
		})
		t.Logf("%v after %d creates accepted; a new orchestrator %v later", sig, after, time.Since(began).Round(100*time.Millisecond))
	}
	began := time.Now()
	restart(syscall.SIGTERM, 30)
	restart(syscall.SIGKILL, 65)
	wg.Wait()
	sent := time.Since(began)
	if t.Failed() {
		t.FailNow()
	}

	// Every create accepted RUNNING once with its address, every one cut
	// off RUNNING once or gone, and each VDC's usage (its VMs and the
	// creates in flight) down to its VMs: no reservation left.
	must := map[string]bool{}
	for _, a := range accepted {
		must[a.name] = true
	}
	var running, gone int
	settling := time.Now()
	poll.Until(t, 4*time.Minute, "every create RUNNING or gone", func() error {
		running, gone = 0, 0
		for _, vdc := range []string{"prod", "dev"} {
			vms, err := vmsOf(ctx, alice, vdc)
			if err != nil {
				return err
			}
			seen := map[string]int{}
			for _, v := range vms {
				if !strings.HasPrefix(v.Name, "rs-") {
					continue
				}
				if seen[v.Name]++; seen[v.Name] > 1 {
					t.Fatalf("%s/%s listed twice", vdc, v.Name)
				}
				if v.Status != "RUNNING" || len(v.IPAddresses) == 0 {
					return fmt.Errorf("%s/%s %s with %v", vdc, v.Name, v.Status, v.IPAddresses)
				}
				running++
			}
			for _, cr := range append(append([]create(nil), accepted...), cutOff...) {
				if cr.vdc == vdc && seen[cr.name] == 0 {
					if must[cr.name] {
						return fmt.Errorf("%s/%s accepted, not listed", vdc, cr.name)
					}
					gone++
				}
			}
			var d struct {
				VDC struct{ Usage struct{ VMs int } }
			}
			if err := admin.Do(ctx, "", `query($n: String!) { vdc(name: $n) { usage { vms } } }`, map[string]any{"n": vdc}, &d); err != nil {
				return err
			}
			if want := len(vms); d.VDC.Usage.VMs != want {
				return fmt.Errorf("VDC %s uses %d VMs with %d listed (reservations left?)", vdc, d.VDC.Usage.VMs, want)
			}
		}
		return nil
	})
	listed := checkProxmox(t, ctx, alice, dir, simPID, "rs-")
	for name, n := range listed {
		if strings.HasPrefix(name, "rs-") && n > 1 {
			t.Errorf("%s listed %d times", name, n)
		}
	}
	if running+gone != len(accepted)+len(cutOff) || running+gone != clients*each {
		t.Errorf("%d running + %d gone, want %d accepted + %d cut off = %d", running, gone, len(accepted), len(cutOff), clients*each)
	}
	t.Logf("%d creates sent in %v: %d accepted, %d cut off in flight, refused and sent again: %v; %d RUNNING, %d gone, none twice, no orphan; settled %v after the last create was sent",
		clients*each, sent.Round(time.Second), len(accepted), len(cutOff), refused, running, gone, time.Since(settling).Round(time.Second))
}

// codes are the error codes of a GraphQL answer.
func codes(re *devstack.ResponseError) []string {
	var out []string
	for _, e := range re.Errors {
		out = append(out, e.Code())
	}
	return out
}
