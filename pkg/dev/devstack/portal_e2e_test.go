package devstack_test

import (
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/flexplane/flexplane/pkg/dev/browsertest"
	"github.com/flexplane/flexplane/pkg/dev/devstack"
	"github.com/flexplane/flexplane/pkg/dev/poll"
)

// TestPortalOnDevStack starts the dev stack as `make dev` does and drives the
// portal it serves in a real browser (portal/tests/devstack.test.mjs,
// playwright-core and Debian's chromium): alice signs in through the dev
// provider's login form, switches VDC, creates a VM through the wizard and
// watches it reach RUNNING, stops it; bob cannot see it; the admin sees both
// zones and all five hosts online, and updates fra1/pve1's agent from the
// Hosts page to the second build the stack publishes (v0.1.1), which the
// API must then report, the other hosts still at v0.1.0. The script fails on any request that
// leaves the stack's origin other than the provider's login pages, and
// leaves a screenshot of each main page in portal/test-artifacts/devstack.
// The stack is the package's shared devStack, whose close stops it with
// SIGTERM and checks that no process is left behind.
//
// It has the first turn on the shared stack, on the stack as it started
// (portalFirst); TestStack uses it after. It runs beside the package's
// other end-to-end tests, which keep stacks of their own.
func TestPortalOnDevStack(t *testing.T) {
	portalFirst.claim(t)
	t.Parallel()
	repo := stackTestRepo(t, "the portal's dev stack browser test")
	root, _ := browsertest.Prerequisites(t, repo)
	began := time.Now()
	ss := devStack.Get(t).use(t)
	s, addr, dir := ss.s, ss.addr, ss.dir
	ready := ss.ready

	st := readStackFile(t, dir, addr)
	users := map[string]string{}
	for _, u := range devstack.DemoUsers() {
		users[u.Username] = u.Password
	}
	var zones string
	hosts := 0
	for i, c := range devstack.Clusters() {
		if i > 0 {
			zones += ","
		}
		zones += c.Name
		hosts += c.Nodes
	}
	artifacts := filepath.Join(root, "test-artifacts", "devstack")
	if err := os.MkdirAll(artifacts, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Logf("dev stack ready at %s after %s, its turn after %s (issuer %s); screenshots go to %s", st.URL, ready.Round(time.Millisecond),
		time.Since(began).Round(time.Millisecond), st.Issuer, artifacts)
	c := devstack.Clusters()[0]
	updated, untouched := c.Name+"/pve1", c.Name+"/pve2"
	start := browsertest.Run(t, root, 6*time.Minute, []string{
		"PORTAL_URL=" + st.URL,
		"OIDC_ISSUER=" + st.Issuer,
		"PORTAL_ADMIN_USER=admin", "PORTAL_ADMIN_PASSWORD=" + users["admin"],
		"PORTAL_MEMBER_USER=alice", "PORTAL_MEMBER_PASSWORD=" + users["alice"],
		"PORTAL_MEMBER_VDCS=prod,dev",
		"PORTAL_OTHER_USER=bob", "PORTAL_OTHER_PASSWORD=" + users["bob"],
		"PORTAL_ZONES=" + zones,
		"PORTAL_HOSTS=" + strconv.Itoa(hosts),
		"PORTAL_COMPUTE_PROFILE=small",
		"PORTAL_UPDATE_HOST=" + updated, "PORTAL_UPDATE_OTHER=" + untouched,
		"PORTAL_UPDATE_FROM=" + devstack.AgentVersion, "PORTAL_UPDATE_TO=" + devstack.NextAgentVersion,
		"PORTAL_ARTIFACTS=" + artifacts,
	}, "tests/devstack.test.mjs")
	browsertest.CheckScreenshots(t, artifacts, start, "signin", "home", "networks", "images", "compute-profiles", "storage-profiles",
		"vm-wizard", "vm-wizard-progress", "vm-wizard-running", "vm-detail", "vm-stopped", "vm-detail-phone", "vms", "vm-not-found", "zones", "hosts", "vdcs",
		"agent-update-available", "agent-update-running", "agent-update-done")

	// The agent the admin updated runs the second build; the others do not.
	var out struct {
		Hosts []struct {
			Name, AgentVersion string
			Zone               struct{ Name string }
			Update             *struct{ State, Version string }
		}
	}
	if err := s.client(t, "admin").Do(t.Context(), "", `{ hosts { name agentVersion zone { name } update { state version } } }`, nil, &out); err != nil {
		t.Fatal(err)
	}
	for _, x := range out.Hosts {
		want := devstack.AgentVersion
		if x.Zone.Name+"/"+x.Name == updated {
			want = devstack.NextAgentVersion
			if x.Update == nil || x.Update.State != "DONE" || x.Update.Version != want {
				t.Errorf("host %s after its update from the portal: %+v, want DONE at %s", updated, x.Update, want)
			}
		}
		if x.AgentVersion != want {
			t.Errorf("host %s/%s runs %s, want %s", x.Zone.Name, x.Name, x.AgentVersion, want)
		}
	}

	checkRequests(t, artifacts, start, st.URL, st.Issuer)

	// The update restarted fra1/pve1's agent: the stack is left with every
	// host ONLINE for the next test.
	poll.Until(t, 2*time.Minute, "every host ONLINE", func() error { return allHostsOnline(t.Context(), s.client(t, "admin")) })
	t.Logf("the whole test took %s (stack ready %s, browser %s)", time.Since(began).Round(time.Millisecond),
		ready.Round(time.Millisecond), time.Since(start).Round(time.Millisecond))
}

// checkRequests reads the requests the browser recorded (requests-*.txt in
// dir, written since start) and fails the test if there are none or any
// went to another origin than allowed.
func checkRequests(t *testing.T, dir string, start time.Time, allowed ...string) {
	t.Helper()
	files, _ := filepath.Glob(filepath.Join(dir, "requests-*.txt"))
	counts := map[string]int{}
	for _, f := range files {
		if st, err := os.Stat(f); err != nil || st.ModTime().Before(start) {
			continue
		}
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for line := range strings.Lines(string(b)) {
			_, raw, ok := strings.Cut(strings.TrimSpace(line), " ")
			if !ok {
				continue
			}
			u, err := url.Parse(raw)
			if err != nil {
				t.Errorf("%s: %q: %v", f, line, err)
				continue
			}
			origin := u.Scheme + "://" + u.Host
			counts[origin]++
			if !slices.Contains(allowed, origin) {
				t.Errorf("the browser requested %s, outside %v", raw, allowed)
			}
		}
	}
	if len(counts) == 0 {
		t.Fatalf("no requests recorded in %s", dir)
	}
	t.Logf("requests by origin: %v", counts)
}
