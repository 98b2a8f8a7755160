package devstack_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/flexplane/flexplane/pkg/dev/cmdrun"
	"github.com/flexplane/flexplane/pkg/dev/devstack"
	"github.com/flexplane/flexplane/pkg/dev/gobin"
	"github.com/flexplane/flexplane/pkg/dev/netns"
	"github.com/flexplane/flexplane/pkg/dev/nettest"
	"github.com/flexplane/flexplane/pkg/dev/poll"
	"github.com/flexplane/flexplane/pkg/dev/shared"
	"github.com/flexplane/flexplane/pkg/pvesim"
	"github.com/flexplane/flexplane/pkg/tenancy"
)

// stack is the dev stack run as a user runs it: the devstack binary as a
// child process with DEV_ADDR and DEV_DIR.
type stack struct {
	cmd   *exec.Cmd
	addr  string
	dir   string
	lines chan string
	// beforeReady are the last 40 lines before the ready line (the banner).
	beforeReady []string
	done        chan struct{} // closed when the process has exited
	err         error
}

// startStack starts bin, with env added to its environment, and waits for
// its ready line; t.Cleanup stops it.
func startStack(t testing.TB, bin, repo, addr, dir string, env ...string) *stack {
	t.Helper()
	return launchStack(t, t, bin, repo, addr, dir, env...)
}

// launchStack is startStack with the stack stopped when owner ends rather
// than t: a shared stack started again by one of its tests outlives it.
func launchStack(t, owner testing.TB, bin, repo, addr, dir string, env ...string) *stack {
	t.Helper()
	if err := copyBinaries(t, dir); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin)
	cmd.Dir = repo
	cmd.Env = append(append(os.Environ(), "DEV_ADDR="+addr, "DEV_DIR="+dir, "DEV_LOG_LEVEL=info"), env...)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = cmd.Stdout
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	s := &stack{cmd: cmd, addr: addr, dir: dir, lines: make(chan string, 1024), done: make(chan struct{})}
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			select {
			case s.lines <- sc.Text():
			default: // nobody reads any more; the log file has everything
			}
		}
		s.err = cmd.Wait()
		close(s.lines)
		close(s.done)
	}()
	owner.Cleanup(func() { s.stop(owner) })

	want := devstack.ReadyPrefix + "http://" + addr
	deadline := time.NewTimer(10 * time.Minute) // a cold build of the binaries on busy cores included
	defer deadline.Stop()
	var tail []string
	for {
		select {
		case line, ok := <-s.lines:
			if !ok {
				t.Fatalf("the stack exited before it was ready (%v); last output:\n%s", s.err, strings.Join(tail, "\n"))
			}
			if line == want {
				s.beforeReady = tail
				return s
			}
			if strings.Contains(line, devstack.ReadyPrefix) {
				t.Fatalf("ready line %q, want %q", line, want)
			}
			tail = append(tail, line)
			if len(tail) > 40 {
				tail = tail[1:]
			}
		case <-deadline.C:
			t.Fatalf("no ready line after 10m; last output:\n%s", strings.Join(tail, "\n"))
		}
	}
}

// stop sends SIGTERM and waits for the stack to exit.
func (s *stack) stop(t testing.TB) {
	t.Helper()
	select {
	case <-s.done:
		return
	default:
	}
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	go func() {
		for range s.lines { // drain so the reader reaches Wait
		}
	}()
	select {
	case <-s.done:
	case <-time.After(60 * time.Second):
		_ = s.cmd.Process.Kill()
		<-s.done
		t.Errorf("the stack did not stop within 60s of SIGTERM")
	}
}

func (s *stack) client(t testing.TB, user string) *devstack.Client {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(s.dir, "tokens", user+".token"))
	if err != nil {
		t.Fatalf("token of %s: %v", user, err)
	}
	return &devstack.Client{URL: "http://" + s.addr + "/graphql", Token: strings.TrimSpace(string(b))}
}

// logTail is the end of a process's log in the stack's directory.
func (s *stack) logTail(name string, lines int) string {
	b, _ := os.ReadFile(filepath.Join(s.dir, "logs", name+".log"))
	l := strings.Split(strings.TrimSpace(string(b)), "\n")
	return strings.Join(l[max(0, len(l)-lines):], "\n")
}

// proc is a process seen in /proc: its id and start time (so a reused pid
// is not taken for it).
type proc struct {
	pid   int
	start string
	cmd   string
}

// readProc reads pid's parent and start time from /proc.
func readProc(pid int) (ppid int, p proc, ok bool) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, proc{}, false
	}
	// The command name is in parentheses and may hold spaces.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, proc{}, false
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 20 {
		return 0, proc{}, false
	}
	ppid, _ = strconv.Atoi(f[1])
	cmdline, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	return ppid, proc{pid: pid, start: f[19], cmd: strings.ReplaceAll(string(cmdline), "\x00", " ")}, true
}

// descendants are the living descendants of root.
func descendants(root int) []proc {
	children := map[int][]proc{}
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if ppid, p, ok := readProc(pid); ok {
			children[ppid] = append(children[ppid], p)
		}
	}
	var out []proc
	var walk func(int)
	walk = func(pid int) {
		for _, c := range children[pid] {
			out = append(out, c)
			walk(c.pid)
		}
	}
	walk(root)
	return out
}

// alive reports whether p still runs (same pid, same start time).
func alive(p proc) bool {
	_, q, ok := readProc(p.pid)
	return ok && q.start == p.start
}

// stackTestRepo skips a test that runs the whole stack under -short and
// returns the repository's root. (The race run of `make test` does not
// select these tests: the stack's processes are not built with the race
// detector, so it would check nothing the plain run does not.)
func stackTestRepo(t *testing.T, what string) string {
	t.Helper()
	if testing.Short() {
		t.Skipf("-short: %s builds and runs every binary", what)
	}
	return repoRoot(t)
}

// repoRoot is the repository's root.
func repoRoot(t testing.TB) string {
	t.Helper()
	repo, err := filepath.Abs(filepath.Join("..", "..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	return repo
}

// buildStack is the devstack binary `make dev` runs, built once for the
// package's tests (stackBinaries).
func buildStack(t testing.TB) string {
	t.Helper()
	return filepath.Join(stackBinaries.Get(t), "devstack")
}

// stackBinaries is a directory with the devstack binary, in tools flexctl
// and the OpenTofu provider, and, in bin, what a
// stack's start builds into $DEV_DIR/bin (devstack's build: the
// orchestrator, pvesim and the agent at its two versions, with the same
// flags), built once for the package's tests, and across packages and runs
// kept in the test binaries' cache when there is one (pkg/dev/gobin, which
// `make test` sets): then only what changed is linked. launchStack copies
// bin into a stack's directory before its start: the stack's own go build
// finds every target up to date (its build ID matches) and links none
// again, instead of linking four large binaries for each stack. Should
// the flags here drift from devstack's, the stack links its own as
// before: slower, never wrong.
var stackBinaries = shared.New("stack binaries", func(t testing.TB) string {
	repo, dir := repoRoot(t), t.TempDir()
	for out, args := range map[string][]string{
		"devstack":                               {"./cmd/devstack"},
		"bin/orchestrator":                       {"./cmd/orchestrator"},
		"bin/pvesim":                             {"./cmd/pvesim"},
		"bin/agent":                              {"-ldflags", "-X main.buildVersion=" + devstack.AgentVersion, "./cmd/agent"},
		"bin/agent-" + devstack.NextAgentVersion: {"-ldflags", "-X main.buildVersion=" + devstack.NextAgentVersion, "./cmd/agent"},
		// What a tenant drives the stack with (TestStack's automation).
		"tools/flexctl":                      {"./cmd/flexctl"},
		"tools/terraform-provider-flexplane": {"./cmd/terraform-provider-flexplane"},
	} {
		out = filepath.Join(dir, filepath.FromSlash(out))
		if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
			t.Fatal(err)
		}
		gobin.Build(t, repo, out, args...)
	}
	return dir
})

// copyBinaries copies stackBinaries' bin into the stack directory dir,
// unless it has one already (a stack started again on its directory).
func copyBinaries(t testing.TB, dir string) error {
	t.Helper()
	to := filepath.Join(dir, "bin")
	if _, err := os.Stat(to); err == nil {
		return nil
	}
	from := filepath.Join(stackBinaries.Get(t), "bin")
	if err := os.MkdirAll(to, 0o755); err != nil {
		return err
	}
	ents, err := os.ReadDir(from)
	if err != nil {
		return err
	}
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join(from, e.Name()))
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(to, e.Name()), b, 0o755); err != nil {
			return err
		}
	}
	return nil
}

// stackFile is the part of $DEV_DIR/stack.json the tests read.
type stackFile struct{ URL, Issuer string }

// readStackFile reads the stack.json of a stack serving on addr.
func readStackFile(t testing.TB, dir, addr string) stackFile {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, "stack.json"))
	if err != nil {
		t.Fatal(err)
	}
	var st stackFile
	if err := json.Unmarshal(b, &st); err != nil || st.URL != "http://"+addr || st.Issuer == "" {
		t.Fatalf("stack.json %s: %v", b, err)
	}
	return st
}

func freeAddr(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

type vm struct {
	ID, Name, Status string
	IPAddresses      []string
	Zone             struct{ Name string }
}

func vmsOf(ctx context.Context, c *devstack.Client, vdc string) ([]vm, error) {
	var d struct{ VMs []vm }
	err := c.Do(ctx, vdc, `{ vms { id name status ipAddresses zone { name } } }`, nil, &d)
	return d.VMs, err
}

func TestMain(m *testing.M) {
	flag.Parse()
	given := false
	flag.Visit(func(f *flag.Flag) { given = given || f.Name == "test.parallel" })
	if !given {
		if err := flag.Set("test.parallel", strconv.Itoa(e2eParallel)); err != nil {
			panic(err)
		}
	}
	os.Exit(shared.ThenClose(m, devStack, stackBinaries).Run())
}

// e2eParallel is how many of the package's tests run at once when
// -parallel does not say: its end-to-end tests (TestStack,
// TestPortalOnDevStack, TestOrchestratorKilledDuringCreateVM,
// TestCreatesAcrossOrchestratorRestarts, TestKubeStack) spend their time
// waiting on the stacks they run, so all of them start together instead of
// two at a time (the default, one a core): the longest, the kill test, no
// longer waits for the others.
const e2eParallel = 6

// portalFirst orders the turns on the shared stack: TestPortalOnDevStack,
// when it runs, has its turn before TestStack's. The other way round, the
// VM it creates can get the VMID of the VM TestStack deleted, whose Proxmox
// tasks the VM's operations then list. It is claimed by
// TestPortalOnDevStack before that test goes parallel, so that TestStack,
// which waits for it only once parallel itself, finds it claimed whenever
// the portal test runs.
var portalFirst turnOrder

// turnOrder is a turn that one test claims and others wait for until that
// test has ended; one that no test claimed is not waited for.
type turnOrder struct {
	mu   sync.Mutex
	done chan struct{} // closed when the claiming test has ended; protected by mu
}

// claim makes the turn t's: wait returns once t has ended.
func (o *turnOrder) claim(t *testing.T) {
	done := make(chan struct{})
	o.mu.Lock()
	o.done = done
	o.mu.Unlock()
	t.Cleanup(func() { close(done) })
}

// wait returns when the test that claimed the turn has ended, at once when
// none did.
func (o *turnOrder) wait() {
	o.mu.Lock()
	done := o.done
	o.mu.Unlock()
	if done != nil {
		<-done
	}
}

// devStack is the dev stack started exactly as `make dev` starts it, with
// its defaults, shared by the tests that use it as a user does (TestStack,
// TestPortalOnDevStack) instead of one stack each. They take turns (use):
// each leaves it running with every host ONLINE, its VMs named its own way.
// Closing it, after the package's tests, stops it with SIGTERM and checks
// that it exits cleanly and leaves none of its processes behind. Tests
// that need other settings (a start limit, fast tasks, DEV_KUBE) start
// their own.
var devStack = shared.New("dev stack", func(t testing.TB) *sharedStack {
	repo := repoRoot(t)
	ss := &sharedStack{owner: t, repo: repo, bin: buildStack(t), addr: freeAddr(t), dir: filepath.Join(t.TempDir(), "dev")}
	began := time.Now()
	ss.s = startStack(t, ss.bin, repo, ss.addr, ss.dir)
	ss.ready = time.Since(began)
	t.Cleanup(func() {
		children := descendants(ss.s.cmd.Process.Pid)
		ss.s.stop(t)
		if ss.s.err != nil {
			t.Errorf("the stack exited with %v after SIGTERM, want 0", ss.s.err)
		}
		for _, p := range children {
			if alive(p) {
				t.Errorf("process %d (%s) outlived the stack", p.pid, p.cmd)
			}
		}
	})
	return ss
})

// sharedStack is devStack.
type sharedStack struct {
	owner                testing.TB // the package's, which stops the stack
	repo, bin, addr, dir string
	ready                time.Duration // how long its first start took

	turn sync.Mutex // held by the test using the stack
	s    *stack     // the running stack; protected by turn
}

// use waits for t's turn on the shared stack, which lasts until t ends.
func (ss *sharedStack) use(t *testing.T) *sharedStack {
	t.Helper()
	ss.turn.Lock()
	t.Cleanup(ss.turn.Unlock)
	select {
	case <-ss.s.done:
		t.Fatalf("the shared stack is not running (an earlier test stopped it and failed before starting it again): %v", ss.s.err)
	default:
	}
	return ss
}

// restart starts the stack again on its address and directory after t
// stopped it; it stays running after t.
func (ss *sharedStack) restart(t *testing.T) *stack {
	t.Helper()
	ss.s = launchStack(t, ss.owner, ss.bin, ss.repo, ss.addr, ss.dir)
	return ss.s
}

// TestStack uses the dev stack started exactly as `make dev` starts it
// (devStack) with the tokens it wrote, stops it with SIGTERM and checks
// that no process it started is left; then starts it again on the same
// directory and checks the state survived.
func TestStack(t *testing.T) {
	t.Parallel()
	stackTestRepo(t, "the dev stack end-to-end test")
	portalFirst.wait()
	ss := devStack.Get(t).use(t)
	s, bin, repo, addr, dir := ss.s, ss.bin, ss.repo, ss.addr, ss.dir
	ctx := t.Context()

	t.Logf("ready after %v (binaries built from the module cache)", ss.ready.Round(time.Second))
	children := descendants(s.cmd.Process.Pid)
	// the devstack in its network namespace, orchestrator, 2 pvesim, and 5
	// agents, each a launcher (what systemd would start) and its agent
	if len(children) != 14 {
		t.Errorf("the stack runs %d processes, want 14: %v", len(children), children)
	}
	admin, alice, bob := s.client(t, "admin"), s.client(t, "alice"), s.client(t, "bob")

	t.Run("zones and hosts", func(t *testing.T) {
		var d struct {
			Zones []struct{ Name, Status string }
			Hosts []struct {
				Name, Status string
				Zone         struct{ Name string }
			}
		}
		if err := admin.Do(ctx, "", `{ zones { name status } hosts { name status zone { name } } }`, nil, &d); err != nil {
			t.Fatal(err)
		}
		var zones, hosts []string
		for _, z := range d.Zones {
			zones = append(zones, z.Name+" "+z.Status)
		}
		for _, h := range d.Hosts {
			hosts = append(hosts, h.Zone.Name+"/"+h.Name+" "+h.Status)
		}
		if want := []string{"fra1 ONLINE", "hel1 ONLINE"}; !slices.Equal(zones, want) {
			t.Errorf("zones %q, want %q", zones, want)
		}
		want := []string{"fra1/pve1 ONLINE", "fra1/pve2 ONLINE", "fra1/pve3 ONLINE", "hel1/pve1 ONLINE", "hel1/pve2 ONLINE"}
		if !slices.Equal(hosts, want) {
			t.Errorf("hosts %q, want %q", hosts, want)
		}
		// The agents joined the mesh as <zone>-<node>, not as five pve1/pve2
		// that Headscale would rename; the orchestrator logs the names it sees.
		orchLog, _ := os.ReadFile(filepath.Join(dir, "logs", "orchestrator.log"))
		for _, h := range []string{"fra1-pve1", "fra1-pve2", "fra1-pve3", "hel1-pve1", "hel1-pve2"} {
			if !strings.Contains(string(orchLog), "mesh_name="+h+" ") {
				t.Errorf("the orchestrator never saw the agent %s in the mesh", h)
			}
		}
	})

	t.Run("listens on loopback only", func(t *testing.T) {
		pids := []int{s.cmd.Process.Pid}
		for _, c := range descendants(s.cmd.Process.Pid) {
			pids = append(pids, c.pid)
		}
		socks, err := netns.ListeningSockets(pids)
		if err != nil {
			t.Fatal(err)
		}
		wildcard, onHost := 0, 0
		for _, sk := range socks {
			if !sk.LoopbackOnly() {
				t.Errorf("reachable from outside the machine: %s", sk)
			}
			if sk.Local.Addr().IsUnspecified() {
				wildcard++
			}
			if sk.PID == s.cmd.Process.Pid {
				onHost++
			}
		}
		// The 6 mesh nodes bind UDP on all interfaces (of the namespace);
		// the host side has DEV_ADDR, the provider's and the metrics
		// address.
		if wildcard < 12 || onHost != 3 {
			t.Errorf("%d sockets on all interfaces (want at least the mesh nodes' 12), %d on the host (want 3): %v", wildcard, onHost, socks)
		}
		t.Logf("%d listening sockets, %d on all interfaces of the stack's namespace (only lo), %d on the host's loopback", len(socks), wildcard, onHost)
	})

	t.Run("stack.json", func(t *testing.T) {
		st := readStackFile(t, dir, addr)
		resp, err := http.Get(st.Issuer + "/.well-known/openid-configuration")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var doc struct{ Issuer string }
		if err := json.NewDecoder(resp.Body).Decode(&doc); err != nil || doc.Issuer != st.Issuer {
			t.Fatalf("discovery of %s: issuer %q, %v", st.Issuer, doc.Issuer, err)
		}
	})

	t.Run("portal at /", func(t *testing.T) {
		if _, err := os.Stat(filepath.Join(repo, "portal", ".output", "public", "index.html")); err != nil {
			t.Fatal("the portal is not built (make portal, which make test runs): ", err)
		}
		resp, err := http.Get("http://" + addr + "/vms")
		if err != nil {
			t.Fatal(err)
		}
		page, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil || resp.StatusCode != http.StatusOK || !strings.Contains(resp.Header.Get("Content-Type"), "text/html") ||
			!strings.Contains(string(page), "<html") {
			t.Fatalf("GET /vms: %d %q, %v", resp.StatusCode, resp.Header.Get("Content-Type"), err)
		}
		resp, err = http.Get("http://" + addr + "/config.json")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var cfg struct{ Issuer, ClientID, GraphQL string }
		if err := json.NewDecoder(resp.Body).Decode(&cfg); err != nil {
			t.Fatal(err)
		}
		st := readStackFile(t, dir, addr)
		if cfg.Issuer != st.Issuer || cfg.ClientID != devstack.ClientID || cfg.GraphQL != "/graphql" {
			t.Errorf("portal config %+v, want issuer %s, client %s, /graphql", cfg, st.Issuer, devstack.ClientID)
		}
	})

	t.Run("demo data", func(t *testing.T) {
		var d struct {
			ComputeProfiles, StorageProfiles, Images []struct{ Name string }
			VDCs                                     []struct{ Name string } `json:"vdcs"`
		}
		if err := admin.Do(ctx, "", `{ computeProfiles { name } storageProfiles { name } images { name } vdcs { name } }`, nil, &d); err != nil {
			t.Fatal(err)
		}
		got := fmt.Sprint(d.ComputeProfiles, d.StorageProfiles, d.Images, d.VDCs)
		if want := "[{large} {medium} {small}] [{backup-standard} {nvme-performance} {ssd-standard}] [{debian-12} {ubuntu-24.04}] [{dev} {prod} {staging}]"; got != want {
			t.Errorf("catalog %s, want %s", got, want)
		}
		var nets struct {
			Networks []struct{ Name, Cidr string }
		}
		if err := alice.Do(ctx, "prod", `{ networks { name cidr } }`, nil, &nets); err != nil {
			t.Fatal(err)
		}
		if got := fmt.Sprint(nets.Networks); got != "[{main 10.10.1.0/24} {main 10.10.2.0/24}]" {
			t.Errorf("alice's networks in prod: %s", got)
		}
		// With the data plane, each zone's external network on its
		// router, public addresses .10 to .99.
		var ext struct {
			ExternalNetworks struct {
				Nodes []struct{ Zone, Cidr, Gateway, PoolStart, PoolEnd string }
			}
		}
		if err := admin.Do(ctx, "", `{ externalNetworks { nodes { zone cidr gateway poolStart poolEnd } } }`, nil, &ext); err != nil {
			t.Fatal(err)
		}
		slices.SortFunc(ext.ExternalNetworks.Nodes, func(a, b struct{ Zone, Cidr, Gateway, PoolStart, PoolEnd string }) int {
			return strings.Compare(a.Zone, b.Zone)
		})
		if got, want := fmt.Sprint(ext.ExternalNetworks.Nodes), "[{fra1 203.0.113.0/24 203.0.113.254 203.0.113.10 203.0.113.99} {hel1 198.51.100.0/24 198.51.100.254 198.51.100.10 198.51.100.99}]"; got != want {
			t.Errorf("external networks %s, want %s", got, want)
		}
		// The banner says so, and where to reach the public addresses from.
		banner := strings.Join(s.beforeReady, "\n")
		for _, want := range []string{"external fra1  203.0.113.0/24 via router 203.0.113.254: ip netns exec " + devstack.DataPlanePrefix(dir, "fra1") + "-inet",
			"external hel1  198.51.100.0/24 via router 198.51.100.254: ip netns exec " + devstack.DataPlanePrefix(dir, "hel1") + "-inet"} {
			if !strings.Contains(banner, want) {
				t.Errorf("the banner lacks %q:\n%s", want, banner)
			}
		}
		// bob may not work in alice's VDC.
		err := bob.Do(ctx, "prod", `{ networks { name } }`, nil, nil)
		var re *devstack.ResponseError
		if !errors.As(err, &re) || !re.HasCode("NOT_FOUND") {
			t.Errorf("bob in prod: %v, want NOT_FOUND", err)
		}
	})

	// The image walk runs beside the VMs test: both only add and remove
	// what they make, and the stack's wall time stays that of the longer.
	t.Run("workloads", func(t *testing.T) {
		t.Run("image walk", func(t *testing.T) {
			t.Parallel()
			testImageWalk(t, alice, dir)
		})
		t.Run("vms", func(t *testing.T) {
			t.Parallel()
			// The demo VMs come up first (their images are staged by then):
			// the screens a newcomer sees are not empty.
			poll.Until(t, 3*time.Minute, "the demo VMs web-1 and db-1 RUNNING in prod", func() error {
				vms, err := vmsOf(ctx, alice, "prod")
				if err != nil {
					return err
				}
				var up []string
				for _, v := range vms {
					if v.Status == "RUNNING" && len(v.IPAddresses) > 0 {
						up = append(up, v.Name)
					}
				}
				if slices.Sort(up); !slices.Equal(up, []string{"db-1", "web-1"}) {
					return fmt.Errorf("running: %v of %v", up, vms)
				}
				return nil
			})
			t.Run("port forward", func(t *testing.T) { checkSeededPortForward(t, alice, dir) })
			var ids, ops []string
			for _, zone := range []string{"fra1", "hel1"} {
				var d struct {
					Networks []struct{ ID string }
				}
				if err := alice.Do(ctx, "dev", `query($z: String) { networks(zone: $z) { id } }`, map[string]any{"z": zone}, &d); err != nil || len(d.Networks) != 1 {
					t.Fatalf("network of dev in %s: %v %v", zone, d.Networks, err)
				}
				spec := devstack.VMSpec{Name: "e2e-" + zone, Zone: zone, Image: "debian-12",
					ComputeProfile: "small", StorageProfile: "ssd-standard", DiskGiB: 10, Network: d.Networks[0].ID}
				if zone == "fra1" {
					spec.UserData = e2eUserData
				}
				op, err := devstack.CreateVM(ctx, alice, "dev", spec)
				if err != nil {
					t.Fatalf("create VM in %s: %v", zone, err)
				}
				ops = append(ops, op)
			}
			poll.Until(t, 3*time.Minute, "both VMs RUNNING with addresses", func() error {
				for _, id := range ops {
					o, err := devstack.GetOperation(ctx, alice, "dev", id)
					if err != nil || o.State != "FAILED" {
						continue
					}
					msg := "(no error given)"
					if o.Error != nil {
						msg = *o.Error
					}
					t.Fatalf("create operation %s failed at step %s: %s\norchestrator log:\n%s", id, o.Step, msg, s.logTail("orchestrator", 30))
				}
				vms, err := vmsOf(ctx, alice, "dev")
				if err != nil {
					return err
				}
				byZone := map[string]string{}
				for _, v := range vms {
					if v.Name != "e2e-fra1" && v.Name != "e2e-hel1" { // not another test's
						continue
					}
					if v.Status != "RUNNING" || len(v.IPAddresses) == 0 || v.Name != "e2e-"+v.Zone.Name {
						return fmt.Errorf("%s: %s in %s with %v", v.Name, v.Status, v.Zone.Name, v.IPAddresses)
					}
					byZone[v.Zone.Name] = v.ID
				}
				if len(byZone) != 2 {
					return fmt.Errorf("%d of 2 VMs", len(byZone))
				}
				// e2e-fra1 is stopped and deleted; e2e-hel1 lives on (and across the restart).
				ids = []string{byZone["fra1"], byZone["hel1"]}
				return nil
			})
			var snippet string
			t.Run("user-data", func(t *testing.T) { snippet = checkUserData(t, alice, dir, ids[0]) })
			if err := alice.Do(ctx, "dev", `mutation($id: ID!) { stopVM(id: $id) { __typename } }`, map[string]any{"id": ids[0]}, nil); err != nil {
				t.Fatalf("stopVM: %v", err)
			}
			poll.Until(t, time.Minute, "the VM STOPPED", func() error {
				vms, err := vmsOf(ctx, alice, "dev")
				if err != nil {
					return err
				}
				for _, v := range vms {
					if v.ID == ids[0] && v.Status != "STOPPED" {
						return fmt.Errorf("status %s", v.Status)
					}
				}
				return nil
			})
			if err := alice.Do(ctx, "dev", `mutation($id: ID!) { deleteVM(id: $id) { __typename } }`, map[string]any{"id": ids[0]}, nil); err != nil {
				t.Fatalf("deleteVM: %v", err)
			}
			poll.Until(t, time.Minute, "the VM gone", func() error {
				vms, err := vmsOf(ctx, alice, "dev")
				if err != nil {
					return err
				}
				if slices.ContainsFunc(vms, func(v vm) bool { return v.ID == ids[0] }) {
					return errors.New("still listed")
				}
				return nil
			})
			if snippet != "" {
				poll.Until(t, time.Minute, "the deleted VM's user-data snippet gone", func() error {
					if _, err := os.Stat(snippet); !errors.Is(err, fs.ErrNotExist) {
						return fmt.Errorf("%s: %v", snippet, err)
					}
					return nil
				})
			}
			// bob sees none of alice's VMs, neither in his VDC nor by id.
			theirs, err := vmsOf(ctx, bob, "staging")
			if err != nil {
				t.Fatal(err)
			}
			for _, v := range theirs {
				if v.ID == ids[1] || strings.HasPrefix(v.Name, "e2e-") {
					t.Errorf("bob sees alice's VM %+v", v)
				}
			}
			err = bob.Do(ctx, "staging", `query($id: ID!) { vm(id: $id) { name } }`, map[string]any{"id": ids[1]}, nil)
			var re *devstack.ResponseError
			if !errors.As(err, &re) || !re.HasCode("NOT_FOUND") {
				t.Errorf("bob asking for alice's VM by id: %v, want NOT_FOUND", err)
			}
		})
	})

	t.Run("automation", func(t *testing.T) { testAutomation(t, s, repo, filepath.Join(stackBinaries.Get(t), "tools"), admin) })
	t.Run("placement", func(t *testing.T) { testPlacement(t, admin, alice) })
	t.Run("faults", func(t *testing.T) { testFaults(t, bin, s, admin, alice, bob) })

	// What must survive a restart: the catalog, the zones' identities and
	// the VMs in the simulated clusters (alice's surviving e2e-hel1 with its
	// id, power state and addresses; the demo VMs, not created twice).
	const lasting = `{ vdc(name: "prod") { createdAt } zones { id name } hosts { status } }`
	type state struct {
		VDC   struct{ CreatedAt string } `json:"vdc"`
		Zones []struct{ ID, Name string }
		Hosts []struct{ Status string }
	}
	var before state
	if err := admin.Do(ctx, "", lasting, nil, &before); err != nil {
		t.Fatal(err)
	}
	survivor := func(vms []vm) (vm, bool) {
		i := slices.IndexFunc(vms, func(v vm) bool { return v.Name == "e2e-hel1" })
		if i < 0 {
			return vm{}, false
		}
		return vms[i], true
	}
	// demoVMs lists the demo VMs ("vdc/name status") as the VDCs' members see them.
	demoVMs := func(alice, bob *devstack.Client) ([]string, error) {
		var out []string
		for vdc, c := range map[string]*devstack.Client{"prod": alice, "dev": alice, "staging": bob} {
			vms, err := vmsOf(ctx, c, vdc)
			if err != nil {
				return nil, fmt.Errorf("VMs of %s: %w", vdc, err)
			}
			for _, v := range vms {
				if !strings.HasPrefix(v.Name, "e2e-") {
					out = append(out, vdc+"/"+v.Name+" "+v.Status)
				}
			}
		}
		slices.Sort(out)
		return out, nil
	}
	var kept vm
	haveVMs := false
	if vms, err := vmsOf(ctx, alice, "dev"); err == nil {
		kept, haveVMs = survivor(vms)
	}
	wantDemo := []string{"prod/db-1 RUNNING", "prod/web-1 RUNNING", "staging/app-1 RUNNING"}
	if haveVMs {
		poll.Until(t, 2*time.Minute, "every demo VM RUNNING", func() error {
			got, err := demoVMs(alice, bob)
			if err == nil && !slices.Equal(got, wantDemo) {
				err = fmt.Errorf("demo VMs %v", got)
			}
			return err
		})
	}

	children = descendants(s.cmd.Process.Pid) // the restarted agents included
	s.stop(t)
	if s.err != nil {
		t.Errorf("the stack exited with %v after SIGTERM, want 0", s.err)
	}
	for _, p := range children {
		if alive(p) {
			t.Errorf("process %d (%s) outlived the stack", p.pid, p.cmd)
		}
	}
	if left := descendants(s.cmd.Process.Pid); len(left) > 0 {
		t.Errorf("processes left: %v", left)
	}

	// A second start on the same directory: same catalog, agents back
	// without a new enrollment, new tokens valid. It stays running for the
	// other tests of devStack, whose close stops it and checks again that
	// no process is left.
	began := time.Now()
	s = ss.restart(t)
	t.Logf("ready again after %v", time.Since(began).Round(time.Second))
	admin = s.client(t, "admin")
	var after state
	if err := admin.Do(ctx, "", lasting, nil, &after); err != nil {
		t.Fatal(err)
	}
	if b, a := fmt.Sprint(before), fmt.Sprint(after); a != b {
		t.Errorf("after a restart: %s, before: %s", a, b)
	}
	if haveVMs {
		alice = s.client(t, "alice")
		vms, err := vmsOf(ctx, alice, "dev")
		if err != nil {
			t.Fatal(err)
		}
		got, ok := survivor(vms)
		slices.Sort(got.IPAddresses)
		slices.Sort(kept.IPAddresses)
		if !ok || got.ID != kept.ID || got.Status != "RUNNING" || !slices.Equal(got.IPAddresses, kept.IPAddresses) {
			t.Errorf("alice's VM after the restart: %+v (found %v), want %+v RUNNING", got, ok, kept)
		} else {
			t.Logf("e2e-hel1 came back with id %s, %s, addresses %v", got.ID, got.Status, got.IPAddresses)
		}
		// At once, not eventually: the seeder found them and created none.
		if got, err := demoVMs(alice, s.client(t, "bob")); err != nil || !slices.Equal(got, wantDemo) {
			t.Errorf("demo VMs after the restart: %v (%v), want %v", got, err, wantDemo)
		}
	}
	poll.Until(t, 2*time.Minute, "every host ONLINE after the restart", func() error { return allHostsOnline(ctx, admin) })
}

// e2eUserData is the cloud-config TestStack's VM e2e-fra1 is created with:
// a file written and a command run at its first boot.
const e2eUserData = `#cloud-config
write_files:
  - path: /etc/e2e-tenant.txt
    content: written by the tenant's cloud-config
runcmd:
  - echo tenant-runcmd-ran > etc/e2e-runcmd.txt
`

// checkUserData checks the user-data of alice's VM id (created in dev
// with e2eUserData) in the dev stack in dir: the agent of its host wrote
// it as a snippet of storage local under the node's file system
// (Dir/pve/<zone>-files/<host>), merged with flexplane's user, and the
// VM's cicustom names it; with the data plane (as root) the VM's first
// boot wrote its file and ran its command in the guest's root. It returns
// the snippet's path.
func checkUserData(t *testing.T, alice *devstack.Client, dir, id string) string {
	t.Helper()
	node, vmid := vmNode(t, alice, dir, id)
	snippet := filepath.Join(node, "var", "lib", "vz", "snippets", fmt.Sprintf("fp-%d-user.yaml", vmid))
	b, err := os.ReadFile(snippet)
	if err != nil {
		t.Fatalf("the VM's user-data snippet: %v", err)
	}
	for _, want := range []string{"user: flexplane", "hostname: e2e-fra1", "text/cloud-config", "tenant-runcmd-ran", "/etc/e2e-tenant.txt"} {
		if !strings.Contains(string(b), want) {
			t.Errorf("the snippet lacks %q:\n%s", want, b)
		}
	}
	if os.Geteuid() != 0 {
		t.Log("not root: the stack runs no data plane, so nothing runs the user-data")
		return snippet
	}
	guest := filepath.Join(node, "guests", fmt.Sprint(vmid), "rootfs")
	for file, want := range map[string]string{"etc/e2e-tenant.txt": "written by the tenant's cloud-config", "etc/e2e-runcmd.txt": "tenant-runcmd-ran\n"} {
		poll.Until(t, time.Minute, "the VM's first boot to write "+file, func() error {
			got, err := os.ReadFile(filepath.Join(guest, file))
			if err == nil && string(got) != want {
				err = fmt.Errorf("holds %q, want %q", got, want)
			}
			return err
		})
	}
	return snippet
}

// devstackCommand runs `devstack -dir DIR args...` as a user would against
// the running stack and returns its output and exit code.
func devstackCommand(t *testing.T, bin, dir string, args ...string) (string, int) {
	t.Helper()
	return cmdrun.Combined(t, exec.Command(bin, append([]string{"-dir", dir}, args...)...))
}

// hostStatus is every host's status by "zone/node".
func hostStatus(ctx context.Context, admin *devstack.Client) (map[string]string, error) {
	var d struct {
		Hosts []struct {
			Name, Status string
			Zone         struct{ Name string }
		}
	}
	if err := admin.Do(ctx, "", `{ hosts { name status zone { name } } }`, nil, &d); err != nil {
		return nil, err
	}
	out := map[string]string{}
	for _, h := range d.Hosts {
		out[h.Zone.Name+"/"+h.Name] = h.Status
	}
	return out, nil
}

// pidInStatus is the pid of the child called name in the output of
// `devstack status`, 0 if it does not run.
func pidInStatus(status, name string) int {
	for _, l := range strings.Split(status, "\n") {
		if rest, ok := strings.CutPrefix(l, name+" "); ok {
			// STATE pid PID starts N within D
			if f := strings.Fields(rest); len(f) >= 3 && f[1] == "pid" {
				pid, _ := strconv.Atoi(f[2])
				return pid
			}
		}
	}
	return 0
}

// allHostsOnline checks that the 5 hosts of the stack are known and
// ONLINE (right after a restart the orchestrator knows no zone until an
// agent reports again).
func allHostsOnline(ctx context.Context, admin *devstack.Client) error {
	hs, err := hostStatus(ctx, admin)
	if err == nil && len(hs) != 5 {
		err = fmt.Errorf("%d of 5 hosts known: %v", len(hs), hs)
	}
	for h, st := range hs {
		if err == nil && st != "ONLINE" {
			err = fmt.Errorf("%s %s", h, st)
		}
	}
	return err
}

// testFaults causes each failure the devstack command offers in the running
// stack and checks what the API answers, then that everything recovers.
func testFaults(t *testing.T, bin string, s *stack, admin, alice, bob *devstack.Client) {
	ctx := t.Context()
	run := func(t *testing.T, args ...string) string {
		t.Helper()
		out, code := devstackCommand(t, bin, s.dir, args...)
		if code != 0 {
			t.Fatalf("devstack %s: exit %d: %s", strings.Join(args, " "), code, out)
		}
		return out
	}
	waitHost := func(t *testing.T, host, want string, timeout time.Duration) time.Duration {
		t.Helper()
		began := time.Now()
		poll.Until(t, timeout, host+" "+want, func() error {
			hs, err := hostStatus(ctx, admin)
			if err == nil && hs[host] != want {
				err = fmt.Errorf("hosts %v", hs)
			}
			return err
		})
		return time.Since(began)
	}
	allOnline := func(t *testing.T) {
		t.Helper()
		poll.Until(t, 2*time.Minute, "every host ONLINE", func() error { return allHostsOnline(ctx, admin) })
	}
	pidIn := func(status, name string) int { return pidInStatus(status, devstack.AgentPrefix+name) }
	// waitRestarted waits for the agent name, whose process was pid, to run
	// again as another process and its host to be ONLINE with it. Whether
	// the host is seen down in between depends on timing: the stack starts
	// the agent again within about a second, and a check that fails on the
	// dead agent's connection may be followed by one that reaches the new
	// one before the next poll. So down only reports it.
	waitRestarted := func(t *testing.T, name, host string, pid int) (down bool, took time.Duration) {
		t.Helper()
		began := time.Now()
		restarted := false
		poll.Until(t, 2*time.Minute, name+" restarted and "+host+" ONLINE", func() error {
			hs, err := hostStatus(ctx, admin)
			if err != nil {
				return err
			}
			if hs[host] != "ONLINE" {
				down = true
				return fmt.Errorf("hosts %v", hs)
			}
			if !restarted {
				out, code := devstackCommand(t, bin, s.dir, "status")
				if p := pidIn(out, name); code != 0 || p == 0 || p == pid {
					return fmt.Errorf("%s not running again as another process (exit %d):\n%s", name, code, out)
				}
				restarted = true
				// Its host must be seen ONLINE after the restart, not
				// only before the stack noticed the kill.
				return fmt.Errorf("%s restarted; %s not yet checked since", name, host)
			}
			return nil
		})
		return down, time.Since(began)
	}

	t.Run("bad arguments", func(t *testing.T) {
		for _, args := range [][]string{{"agent", "kill", "fra1-pve9"}, {"node", "offline", "ams1", "pve1"}, {"partition"}, {"frobnicate"}} {
			if out, code := devstackCommand(t, bin, s.dir, args...); code != 2 || !strings.Contains(out, "usage: devstack") {
				t.Errorf("devstack %s: exit %d, %s; want 2 and the usage", strings.Join(args, " "), code, out)
			}
		}
	})

	t.Run("kill -9 of an agent", func(t *testing.T) {
		pid := pidIn(run(t, "status"), "hel1-pve2")
		if pid == 0 {
			t.Fatalf("no pid of hel1-pve2 in devstack status")
		}
		if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		down, on := waitRestarted(t, "hel1-pve2", "hel1/pve2", pid)
		t.Logf("kill -9 of agent hel1-pve2: ONLINE again with the new agent after %v (seen down: %v)", on.Round(100*time.Millisecond), down)
		st := run(t, "status")
		if p := pidIn(st, "hel1-pve2"); p == 0 || p == pid {
			t.Errorf("hel1-pve2 not restarted:\n%s", st)
		}
		if !strings.Contains(s.logTail("devstack", 200), `msg="exited unasked; restarting" process="agent hel1-pve2" status="signal: killed"`) {
			t.Errorf("the restart is not logged:\n%s", s.logTail("devstack", 20))
		}
	})

	t.Run("agent stop and start", func(t *testing.T) {
		run(t, "agent", "stop", "fra1-pve2")
		off := waitHost(t, "fra1/pve2", "OFFLINE", time.Minute)
		if out, code := devstackCommand(t, bin, s.dir, "agent", "stop", "fra1-pve2"); code != 1 || !strings.Contains(out, "already stopped") {
			t.Errorf("agent stop of a stopped agent: exit %d, %s", code, out)
		}
		run(t, "agent", "start", "fra1-pve2")
		on := waitHost(t, "fra1/pve2", "ONLINE", 2*time.Minute)
		t.Logf("agent stop: OFFLINE after %v; agent start: ONLINE after %v", off.Round(100*time.Millisecond), on.Round(100*time.Millisecond))
	})

	t.Run("agent kill", func(t *testing.T) {
		pid := pidIn(run(t, "status"), "fra1-pve3")
		if pid == 0 {
			t.Fatalf("no pid of fra1-pve3 in devstack status")
		}
		out := run(t, "agent", "kill", "fra1-pve3")
		if !strings.Contains(out, "SIGKILL") {
			t.Errorf("agent kill said %q", out)
		}
		down, on := waitRestarted(t, "fra1-pve3", "fra1/pve3", pid)
		t.Logf("agent kill of fra1-pve3: ONLINE again with the new agent after %v (seen down: %v)", on.Round(100*time.Millisecond), down)
	})

	t.Run("node offline", func(t *testing.T) {
		// VMs with their host, "zone/node".
		type placed struct {
			vm
			Host struct{ Name string }
		}
		vmsOn := func(c *devstack.Client, vdc string) ([]placed, error) {
			var d struct{ VMs []placed }
			err := c.Do(ctx, vdc, `{ vms { id name status zone { name } host { name } } }`, nil, &d)
			return d.VMs, err
		}
		// web-1 runs in fra1: its node goes offline.
		prod, err := vmsOn(alice, "prod")
		i := slices.IndexFunc(prod, func(v placed) bool { return v.Name == "web-1" })
		if err != nil || i < 0 || prod[i].Zone.Name != "fra1" || prod[i].Host.Name == "" {
			t.Fatalf("prod's VMs: %+v, %v", prod, err)
		}
		node := prod[i].Host.Name
		run(t, "node", "offline", "fra1", node)
		waitHost(t, "fra1/"+node, "OFFLINE", time.Minute)
		// The host is OFFLINE at the first failed health check; its detail
		// names Proxmox once the agent's own answer says so (a check of an
		// agent replaced just before, by the faults above, may first fail
		// on its connection).
		poll.Until(t, 30*time.Second, "the offline "+node+"'s status detail naming Proxmox", func() error {
			var d struct {
				Hosts []struct {
					Name, StatusDetail string
					Zone               struct{ Name string }
				}
			}
			if err := admin.Do(ctx, "", `{ hosts { name statusDetail zone { name } } }`, nil, &d); err != nil {
				return err
			}
			for _, h := range d.Hosts {
				if h.Zone.Name == "fra1" && h.Name == node && !strings.Contains(h.StatusDetail, "cannot reach Proxmox") {
					return fmt.Errorf("status detail %q", h.StatusDetail)
				}
			}
			return nil
		})
		// The zone answers through its other nodes: the VM is listed,
		// UNKNOWN, without an error (or, on a slow machine, already
		// recovered by HA on another node).
		recovered := func(v placed) bool { return v.Name == "web-1" && v.Status == "RUNNING" && v.Host.Name != node }
		poll.Until(t, time.Minute, "web-1 UNKNOWN", func() error {
			vms, err := vmsOn(alice, "prod")
			if err == nil && !slices.ContainsFunc(vms, func(v placed) bool { return v.Name == "web-1" && v.Status == "UNKNOWN" || recovered(v) }) {
				err = fmt.Errorf("prod's VMs %+v", vms)
			}
			return err
		})
		// web-1 is on the shared storage, an HA resource: the HA manager
		// fences its node after the dev timing's fence delay and starts it
		// on another node of fra1 (docs/operate/high-availability.md).
		poll.Until(t, pvesim.DevFenceDelay+time.Minute, "web-1 RUNNING on another node", func() error {
			vms, err := vmsOn(alice, "prod")
			if err == nil && !slices.ContainsFunc(vms, recovered) {
				err = fmt.Errorf("prod's VMs %+v", vms)
			}
			return err
		})
		run(t, "node", "online", "fra1", node)
		waitHost(t, "fra1/"+node, "ONLINE", 2*time.Minute)
		// A node that went offline stopped its guests, as a power loss
		// does: their owners start them again.
		for vdc, c := range map[string]*devstack.Client{"prod": alice, "staging": bob} {
			poll.Until(t, 2*time.Minute, "the VMs of "+vdc+" RUNNING", func() error {
				vms, err := vmsOn(c, vdc)
				for _, v := range vms {
					if err == nil && v.Status == "STOPPED" {
						err = c.Do(ctx, vdc, `mutation($id: ID!) { startVM(id: $id) { __typename } }`, map[string]any{"id": v.ID}, nil)
					}
					if err == nil && v.Status != "RUNNING" {
						err = fmt.Errorf("%s %s", v.Name, v.Status)
					}
				}
				return err
			})
		}
	})

	t.Run("partition and heal", func(t *testing.T) {
		run(t, "partition", "hel1")
		// Partial answers: fra1's VMs, and hel1 reported unavailable
		// within the orchestrator's -zone-timeout (5s by default).
		var took time.Duration
		poll.Until(t, time.Minute, "hel1 ZONE_UNAVAILABLE", func() error {
			began := time.Now()
			vms, err := vmsOf(ctx, alice, "prod")
			took = time.Since(began)
			var re *devstack.ResponseError
			if !errors.As(err, &re) || !re.HasCode("ZONE_UNAVAILABLE") || !strings.Contains(re.Error(), "hel1") {
				return fmt.Errorf("vms: %v, %v", vms, err)
			}
			if !slices.ContainsFunc(vms, func(v vm) bool { return v.Name == "web-1" }) {
				t.Errorf("the partial answer lacks fra1's web-1: %v", vms)
			}
			return nil
		})
		if took > 7*time.Second {
			t.Errorf("the partial answer took %v, more than -zone-timeout", took)
		}
		off := waitHost(t, "hel1/pve1", "OFFLINE", time.Minute)
		began := time.Now()
		run(t, "heal", "hel1")
		poll.Until(t, 2*time.Minute, "prod's VMs complete again", func() error {
			vms, err := vmsOf(ctx, alice, "prod")
			if err == nil && !slices.ContainsFunc(vms, func(v vm) bool { return v.Name == "db-1" }) {
				err = fmt.Errorf("vms %v", vms)
			}
			return err
		})
		healed := time.Since(began)
		allOnline(t)
		t.Logf("partition: partial answer in %v, hosts OFFLINE after %v; heal: complete answers after %v, every host ONLINE after %v",
			took.Round(10*time.Millisecond), off.Round(100*time.Millisecond), healed.Round(100*time.Millisecond), time.Since(began).Round(100*time.Millisecond))
	})
	allOnline(t)
}

// checkSeededPortForward checks, right after the ready line, what a tenant
// can try on the external network the seed made (the data plane runs as
// root): alice forwards a public port of prod's edge gateway in fra1 to
// the demo VM web-1, and a connection from fra1's internet (the router's
// namespace) reaches a listener in web-1's namespace through it. The
// gateway is then deleted, leaving prod as the seed made it.
func checkSeededPortForward(t *testing.T, alice *devstack.Client, dir string) {
	ctx := t.Context()
	vms, err := vmsOf(ctx, alice, "prod")
	if err != nil {
		t.Fatal(err)
	}
	i := slices.IndexFunc(vms, func(v vm) bool { return v.Name == "web-1" })
	if i < 0 {
		t.Fatalf("no web-1 in prod: %v", vms)
	}
	ref, err := tenancy.ParseVMID(vms[i].ID)
	if err != nil {
		t.Fatal(err)
	}
	prefix := devstack.DataPlanePrefix(dir, "fra1")
	nettest.Serve(t, fmt.Sprintf("%s-vm%d", prefix, ref.VMID), 80, "web-1")
	var d struct {
		CreatePortForward struct{ PublicAddress string }
	}
	if err := alice.Do(ctx, "prod", `mutation($id: ID!) { createPortForward(input: {vmId: $id, protocol: TCP, publicPort: 8080, targetPort: 80}) { publicAddress } }`,
		map[string]any{"id": vms[i].ID}, &d); err != nil {
		t.Fatalf("createPortForward: %v", err)
	}
	t.Cleanup(func() {
		var gws struct {
			EdgeGateways struct{ Nodes []struct{ ID string } }
		}
		if err := alice.Do(context.Background(), "prod", `{ edgeGateways(zone: "fra1") { nodes { id } } }`, nil, &gws); err != nil {
			t.Errorf("edgeGateways: %v", err)
		}
		for _, g := range gws.EdgeGateways.Nodes {
			if err := alice.Do(context.Background(), "prod", `mutation($id: ID!) { deleteEdgeGateway(id: $id) { id } }`, map[string]any{"id": g.ID}, nil); err != nil {
				t.Errorf("deleteEdgeGateway: %v", err)
			}
		}
	})
	if a, err := netip.ParseAddr(d.CreatePortForward.PublicAddress); err != nil || !netip.MustParsePrefix("203.0.113.0/24").Contains(a) {
		t.Fatalf("the port forward's public address %q, want one of fra1's external network", d.CreatePortForward.PublicAddress)
	}
	got := nettest.WaitReach(t, prefix+"-inet", d.CreatePortForward.PublicAddress+":8080", 45*time.Second)
	if !strings.HasPrefix(got, "web-1 from 203.0.113.254:") {
		t.Errorf("the port forward answered %q, want web-1 seeing the router 203.0.113.254", got)
	}
}
