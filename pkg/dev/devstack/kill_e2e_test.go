package devstack_test

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/flexplane/flexplane/pkg/dev/devstack"
	"github.com/flexplane/flexplane/pkg/dev/netns"
	"github.com/flexplane/flexplane/pkg/dev/poll"
)

// proxmoxOf is a client of a zone's simulated cluster as its operator has
// it: the zone's API token and its first node's endpoint, pinned to the
// fingerprint pvesim printed (in its log), connecting from inside the stack's
// network namespace (the one of process pid), where the endpoint is.
func proxmoxOf(t *testing.T, dir, zone string, pid int) func(ctx context.Context, path string, out any) error {
	t.Helper()
	tok, err := os.ReadFile(filepath.Join(dir, "pve", zone+".token"))
	if err != nil {
		t.Fatal(err)
	}
	log, err := os.ReadFile(filepath.Join(dir, "logs", "pvesim "+zone+".log"))
	if err != nil {
		t.Fatal(err)
	}
	var url, fp string
	for _, l := range strings.Split(string(log), "\n") {
		if n, _ := fmt.Sscanf(l, "node pve1: %s fingerprint %s", &url, &fp); n == 2 {
			break
		}
	}
	if fp == "" {
		t.Fatalf("no endpoint of %s's pve1 in its log", zone)
	}
	hc := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{DialContext: netns.DialerOf(pid), TLSClientConfig: &tls.Config{
		InsecureSkipVerify: true, // replaced by the pin
		VerifyPeerCertificate: func(raw [][]byte, _ [][]*x509.Certificate) error {
			sum := sha256.Sum256(raw[0])
			if !strings.EqualFold(strings.ReplaceAll(fp, ":", ""), fmt.Sprintf("%x", sum)) {
				return errors.New("fingerprint mismatch")
			}
			return nil
		},
	}}}
	return func(ctx context.Context, path string, out any) error {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url+path, nil)
		req.Header.Set("Authorization", "PVEAPIToken="+strings.TrimSpace(string(tok)))
		resp, err := hc.Do(req)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("GET %s: %s", path, resp.Status)
		}
		return json.NewDecoder(resp.Body).Decode(&struct{ Data any }{out})
	}
}

// TestOrchestratorKilledDuringCreateVM: the orchestrator is SIGKILLed at a
// random moment of each of 20 createVMs (two in flight at each of 10 kills),
// and restarted by the dev stack.
// Afterwards there is no duplicate VM, no guest or address without its VM,
// and every VM asked for is RUNNING or cleanly gone.
func TestOrchestratorKilledDuringCreateVM(t *testing.T) {
	t.Parallel()
	repo := stackTestRepo(t, "the orchestrator kill test")
	tmp := t.TempDir()
	bin := buildStack(t)
	addr, dir := freeAddr(t), filepath.Join(tmp, "dev")
	ctx := t.Context()
	// 10 restarts in a few minutes, each at once: the test's start limit.
	// Creates a killed orchestrator left are taken over after 15s, not the
	// default 2m: with one orchestrator nobody else is working on them.
	s := startStack(t, bin, repo, addr, dir, "DEV_START_LIMIT_BURST=100", "DEV_RESTART_DELAY_MAX=1s", "DEV_VM_RECOVER_AFTER=15s")
	admin, alice := s.client(t, "admin"), s.client(t, "alice")

	networks := networksOf(t, ctx, alice)
	orchestratorPID := func() int {
		out, code := devstackCommand(t, bin, dir, "status")
		if code != 0 {
			return 0
		}
		return pidInStatus(out, "orchestrator")
	}
	hostsOnline := func() error { return allHostsOnline(ctx, admin) }

	seed := uint64(time.Now().UnixNano())
	rng := rand.New(rand.NewPCG(seed, 0))
	t.Logf("random seed %d", seed)
	// 20 creates, each interrupted at a random point of its own: two
	// creates are in flight at each of 10 kills, started so that each is
	// killed a random 0-6 s after it was accepted (the later point's
	// create starts first). A kill costs a restart of the orchestrator and
	// its mesh (most of the test's time); the creates it interrupts do not.
	const kills, perKill = 10, 2
	type asked struct{ vdc, name string }
	var wanted []asked
	steps := map[string]int{} // the operation's step when it was killed
	began := time.Now()
	// poll:own-loop: each kill comes at a random point of its creates,
	// slept on purpose.
	for i := range kills {
		points := []time.Duration{
			time.Duration(rng.Int64N(int64(6 * time.Second))),
			time.Duration(rng.Int64N(int64(6 * time.Second))),
		}
		slices.SortFunc(points, func(a, b time.Duration) int { return int(b - a) }) // the later point first
		type inFlight struct{ vdc, op string }
		var ops []inFlight
		// poll:own-loop: the creates of one kill, started apart on purpose.
		for j := range perKill {
			n := i*perKill + j
			vdc, zone := []string{"prod", "dev"}[n%2], []string{"fra1", "hel1"}[n/2%2]
			name := fmt.Sprintf("kill-%02d", n)
			spec := devstack.VMSpec{Name: name, Zone: zone, Image: "debian-12", ComputeProfile: "small",
				StorageProfile: "ssd-standard", DiskGiB: 10, Network: networks[vdc+"/"+zone]}
			var op string
			poll.Until(t, 2*time.Minute, "createVM "+name+" accepted", func() error {
				var err error
				op, err = devstack.CreateVM(ctx, alice, vdc, spec)
				return err
			})
			wanted = append(wanted, asked{vdc, name})
			ops = append(ops, inFlight{vdc, op})
			wait := points[j]
			if j+1 < perKill {
				wait -= points[j+1]
			}
			time.Sleep(wait) // the random point of the create
		}
		pid := orchestratorPID()
		if pid == 0 {
			t.Fatalf("no orchestrator pid in devstack status")
		}
		var at []string
		for _, o := range ops {
			st, _ := devstack.GetOperation(ctx, alice, o.vdc, o.op)
			at = append(at, st.State+" "+st.Step)
		}
		if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		for _, s := range at {
			steps[s]++
		}
		poll.Until(t, 2*time.Minute, "the orchestrator back with every host", func() error {
			if p := orchestratorPID(); p == 0 || p == pid {
				return errors.New("not restarted")
			}
			return hostsOnline()
		})
	}
	t.Logf("%d kills in %v; the operations were at: %v", kills, time.Since(began).Round(time.Second), steps)

	// Every VM asked for ends RUNNING or gone, each once (a create
	// interrupted is taken over once its intent is older than the
	// orchestrator's -vm-recover-after, 15s here).
	var running, gone int
	recovering := time.Now()
	poll.Until(t, 5*time.Minute, "every VM RUNNING or gone", func() error {
		running, gone = 0, 0
		if err := hostsOnline(); err != nil {
			return err
		}
		for _, w := range wanted {
			vms, err := vmsOf(ctx, alice, w.vdc)
			if err != nil {
				return err
			}
			var mine []vm
			for _, v := range vms {
				if v.Name == w.name {
					mine = append(mine, v)
				}
			}
			switch {
			case len(mine) > 1:
				t.Fatalf("%s/%s listed %d times: %+v", w.vdc, w.name, len(mine), mine)
			case len(mine) == 0:
				gone++
			case mine[0].Status == "RUNNING" && len(mine[0].IPAddresses) > 0:
				running++
			default:
				return fmt.Errorf("%s/%s %s with %v", w.vdc, w.name, mine[0].Status, mine[0].IPAddresses)
			}
		}
		return nil
	})

	// In Proxmox: one guest per VM listed, none of a VM that is gone, and
	// no IPAM address of a guest that does not exist.
	listed := checkProxmox(t, ctx, alice, dir, orchestratorPID(), "kill-")
	t.Logf("after %d kills of %d creates: %d VMs RUNNING, %d cleanly gone, none twice, %v after the last kill", kills, kills*perKill, running, gone, time.Since(recovering).Round(time.Second))
	if running+gone != kills*perKill || slices.ContainsFunc(wanted, func(w asked) bool { return listed[w.name] > 1 }) {
		t.Errorf("%d running + %d gone of %d", running, gone, kills*perKill)
	}
}

// checkProxmox checks the guests and IPAM addresses of both zones against
// the VMs of both VDCs: every guest whose name starts with prefix belongs
// to exactly one VM listed, and every address of the IPAM to an existing
// guest. It returns how often each VM name is listed. pid is a process in
// the stack's namespace.
func checkProxmox(t *testing.T, ctx context.Context, alice *devstack.Client, dir string, pid int, prefix string) map[string]int {
	t.Helper()
	listed := map[string]int{}
	for _, vdc := range []string{"prod", "dev"} {
		vms, err := vmsOf(ctx, alice, vdc)
		if err != nil {
			t.Fatal(err)
		}
		for _, v := range vms {
			listed[v.Name]++
		}
	}
	for _, zone := range []string{"fra1", "hel1"} {
		pve := proxmoxOf(t, dir, zone, pid)
		var guests []struct {
			VMID     int
			Name     string
			Template int
		}
		if err := pve(ctx, "/cluster/resources?type=vm", &guests); err != nil {
			t.Fatal(err)
		}
		vmids := map[string]bool{}
		for _, g := range guests {
			vmids[strconv.Itoa(g.VMID)] = true
			if g.Template == 0 && strings.HasPrefix(g.Name, prefix) && listed[g.Name] != 1 {
				t.Errorf("guest %d %s in %s has no VM (listed %d times)", g.VMID, g.Name, zone, listed[g.Name])
			}
		}
		var ips []struct{ IP, VMID, Hostname string }
		if err := pve(ctx, "/cluster/sdn/ipams/pve/status", &ips); err != nil {
			t.Fatal(err)
		}
		for _, ip := range ips {
			if ip.VMID != "" && !vmids[ip.VMID] {
				t.Errorf("address %s of %s in %s belongs to no guest (vmid %s)", ip.IP, ip.Hostname, zone, ip.VMID)
			}
		}
	}
	return listed
}

// networksOf is the network id of each VDC's network in each zone, by
// "vdc/zone".
func networksOf(t *testing.T, ctx context.Context, alice *devstack.Client) map[string]string {
	t.Helper()
	networks := map[string]string{}
	for _, vdc := range []string{"prod", "dev"} {
		var d struct {
			Networks []struct {
				ID   string
				Zone struct{ Name string }
			}
		}
		if err := alice.Do(ctx, vdc, `{ networks { id zone { name } } }`, nil, &d); err != nil {
			t.Fatal(err)
		}
		for _, n := range d.Networks {
			networks[vdc+"/"+n.Zone.Name] = n.ID
		}
	}
	return networks
}
