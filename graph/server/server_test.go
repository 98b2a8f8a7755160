package server_test

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"html"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/flexplane/flexplane/graph"
	"github.com/flexplane/flexplane/graph/server"
	"github.com/flexplane/flexplane/pkg/auth"
	"github.com/flexplane/flexplane/pkg/catalog"
	"github.com/flexplane/flexplane/pkg/dev/devidp"
	"github.com/flexplane/flexplane/pkg/dev/poll"
	"github.com/flexplane/flexplane/pkg/estate"
	"github.com/flexplane/flexplane/pkg/vdc"
)

func TestAuthentication(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOptions{})
	const q = `{ me { subject } }`

	// A token of another provider with the same client id and users.
	stranger := newHarness(t, harnessOptions{})
	foreign := stranger.token(t, "admin")

	wrongAud, err := h.idp.Login(context.Background(), otherApp, "admin", "admin-pw")
	if err != nil {
		t.Fatal(err)
	}
	good := h.token(t, "alice")
	parts := strings.Split(good, ".")
	payload, _ := base64.RawURLEncoding.DecodeString(parts[1])
	forged := strings.Replace(string(payload), `"vdc:dev:viewer"`, `"platform-admin"`, 1)
	tampered := parts[0] + "." + base64.RawURLEncoding.EncodeToString([]byte(forged)) + "." + parts[2]

	for name, authz := range map[string]string{
		"no token":         "",
		"not bearer":       "Basic YWRtaW46YWRtaW4tcHc=",
		"garbage":          "Bearer not.a.jwt",
		"wrong audience":   "Bearer " + wrongAud.AccessToken,
		"tampered":         "Bearer " + tampered,
		"foreign provider": "Bearer " + foreign,
	} {
		r := post(t, h.url, authz, "", q, nil)
		if r.Status != http.StatusUnauthorized || r.Code(t) != "UNAUTHENTICATED" || r.Data != nil {
			t.Errorf("%s: status %d, %s", name, r.Status, r.Raw)
		}
	}
	var me struct{ Subject string }
	h.do(t, "alice", "", q, nil).OK(t).Into(t, "me", &me)
	if me.Subject != "alice" {
		t.Fatalf("me: %+v", me)
	}
}

func TestExpiredToken(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOptions{lifetime: 3 * time.Second})
	tok := h.token(t, "alice")
	h.do(t, "alice", "", `{ tenant { name } }`, nil).OK(t)
	poll.True(t, 15*time.Second, "the token refused after its 3s lifetime", func() bool {
		r := post(t, h.url, "Bearer "+tok, "", `{ tenant { name } }`, nil)
		if r.Status != http.StatusUnauthorized {
			r.OK(t)
			return false
		}
		// The body tells why, not the server's clock or uptime.
		if r.Code(t) != "UNAUTHENTICATED" || r.Errors[0].Message != "unauthenticated: the token has expired" {
			t.Fatalf("expired token: %s", r.Raw)
		}
		return true
	})
	// The subscription websocket refuses it with the same reason.
	msgs, err := wsQuery(t, h.url, map[string]any{"Authorization": "Bearer " + tok}, `{ tenant { name } }`)
	var ce websocket.CloseError
	if len(msgs) != 0 || !errors.As(err, &ce) || ce.Code != 4403 || ce.Reason != "UNAUTHENTICATED: unauthenticated: the token has expired" {
		t.Fatalf("expired token on the websocket: messages %+v, end %v", msgs, err)
	}
}

func TestMeAndTenant(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOptions{})
	const q = `{ me { subject name email platformAdmin roles vdcs { role vdc { name quotas { vcpus } } } } tenant { name domain } }`
	type access struct {
		Role string
		Vdc  struct {
			Name   string
			Quotas struct{ Vcpus int }
		}
	}
	var me struct {
		Subject, Name string
		Email         *string
		PlatformAdmin bool
		Roles         []string
		Vdcs          []access
	}
	r := h.do(t, "alice", "", q, nil).OK(t)
	r.Into(t, "me", &me)
	got := fmt.Sprint(me.Vdcs)
	// ghost is in alice's token but does not exist: left out.
	if me.Subject != "alice" || me.Name != "Alice" || me.Email == nil || *me.Email != "alice@example.test" || me.PlatformAdmin ||
		got != "[{VIEWER {dev {64}}} {MEMBER {prod {64}}}]" ||
		strings.Join(me.Roles, ",") != "vdc:dev:viewer,vdc:ghost:member,vdc:prod:member" {
		t.Fatalf("alice: %+v", me)
	}
	var tenant struct{ Name, Domain string }
	r.Into(t, "tenant", &tenant)
	if tenant.Name != "ACME Cloud" || tenant.Domain != "cloud.acme.test" {
		t.Fatalf("tenant: %+v", tenant)
	}

	me.Vdcs = nil
	h.do(t, "admin", "", q, nil).OK(t).Into(t, "me", &me)
	if !me.PlatformAdmin || fmt.Sprint(me.Vdcs) != "[{ADMIN {dev {64}}} {ADMIN {prod {64}}} {ADMIN {staging {64}}}]" || me.Email != nil {
		t.Fatalf("admin: %+v", me)
	}

	var vdcs []struct{ Name string }
	h.do(t, "bob", "", `{ vdcs { name } }`, nil).OK(t).Into(t, "vdcs", &vdcs)
	if fmt.Sprint(vdcs) != "[{staging}]" {
		t.Fatalf("bob's vdcs: %+v", vdcs)
	}
}

// Every operation that takes the VDC header, tried with a VDC the caller
// may not use and with one that does not exist, answers NOT_FOUND with the
// same message shape and changes nothing.
func TestVDCHeaderIsolation(t *testing.T) {
	t.Parallel()
	// alice sends 36 mutations at once, more than her rate limit lets
	// through (TestMutationRateLimit): this test is about the header.
	h := newHarness(t, harnessOptions{rateLimits: server.RateLimits{MutationRate: -1}})
	ops := []string{
		`{ me { subject } }`,
		`{ tenant { name } }`,
		`{ vdcs { name } }`,
		`{ vdc(name: "prod") { name } }`,
		`{ currentVDC { name } }`,
		`{ computeProfiles { name } }`,
		`{ computeProfile(name: "x") { name } }`,
		`{ storageProfiles { name } }`,
		`{ storageProfile(name: "x") { name } }`,
		`{ images { name } }`,
		`{ image(name: "x") { name } }`,
		`mutation { createVDC(input: {name: "new", quotas: {vcpus: 1, memoryMiB: 1, storageGiB: 1, vms: 1}}) { name } }`,
		`mutation { updateVDC(input: {name: "staging", description: "x"}) { name } }`,
		`mutation { deleteVDC(name: "staging") { name } }`,
		`mutation { createComputeProfile(input: {name: "c", vcpus: 1, memoryMiB: 1024}) { name } }`,
		`mutation { updateComputeProfile(input: {name: "c", vcpus: 2}) { name } }`,
		`mutation { deleteComputeProfile(name: "c") { name } }`,
		`mutation { createStorageProfile(input: {name: "s", tier: "ssd", pools: [{zone: "fra1", pool: "local"}]}) { name } }`,
		`mutation { updateStorageProfile(input: {name: "s", tier: "hdd"}) { name } }`,
		`mutation { deleteStorageProfile(name: "s") { name } }`,
		`mutation { createImage(input: {name: "i", version: "1", url: "https://x/i", checksum: "sha256:` + strings.Repeat("0", 64) + `", cloudInit: true}) { name } }`,
		`mutation { updateImage(input: {name: "i", version: "2"}) { name } }`,
		`mutation { deleteImage(name: "i") { name } }`,
	}
	before := h.snapshot(t)
	for _, c := range []struct{ user, vdc string }{
		{"alice", "staging"}, // exists, not alice's
		{"alice", "nowhere"}, // does not exist
		{"alice", "ghost"},   // in alice's token, does not exist
		{"bob", "prod"},
		{"admin", "nowhere"}, // platform admins may use every VDC that exists
	} {
		for _, op := range ops {
			r := h.do(t, c.user, c.vdc, op, nil)
			if r.Code(t) != "NOT_FOUND" || r.Errors[0].Message != fmt.Sprintf("VDC %q not found", c.vdc) || r.Data != nil {
				t.Errorf("%s with %s: %s: %s", c.user, c.vdc, op, r.Raw)
			}
		}
	}
	if after := h.snapshot(t); after != before {
		t.Fatalf("refused requests changed the catalog:\n%s\n%s", before, after)
	}

	// Naming another VDC in an argument answers exactly as a missing one.
	for _, name := range []string{"staging", "nowhere"} {
		r := h.do(t, "alice", "", fmt.Sprintf(`{ vdc(name: %q) { name } }`, name), nil)
		if r.Code(t) != "NOT_FOUND" || r.Errors[0].Message != fmt.Sprintf("VDC %q not found", name) {
			t.Errorf("vdc(%s): %s", name, r.Raw)
		}
	}

	// Allowed VDCs work; the scoped field needs the header.
	var cur struct{ Name string }
	h.do(t, "alice", "dev", `{ currentVDC { name } }`, nil).OK(t).Into(t, "currentVDC", &cur)
	if cur.Name != "dev" {
		t.Fatalf("currentVDC: %+v", cur)
	}
	h.do(t, "admin", "staging", `{ currentVDC { name } }`, nil).OK(t)
	r := h.do(t, "alice", "", `{ currentVDC { name } }`, nil)
	if r.Code(t) != "BAD_USER_INPUT" || r.Errors[0].Extensions["field"] != "FlexPlane-VDC-ID" {
		t.Fatalf("currentVDC without header: %s", r.Raw)
	}
}

func TestAdminOnlyMutations(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOptions{})
	checksum := "sha256:" + strings.Repeat("ab", 32)
	mutations := []string{
		`mutation { createVDC(input: {name: "new", quotas: {vcpus: 1, memoryMiB: 1, storageGiB: 1, vms: 1}}) { name } }`,
		`mutation { updateVDC(input: {name: "prod", description: "mine now"}) { name } }`,
		`mutation { deleteVDC(name: "prod") { name } }`,
		`mutation { createComputeProfile(input: {name: "medium", vcpus: 4, memoryMiB: 8192}) { name } }`,
		`mutation { updateComputeProfile(input: {name: "small", vcpus: 64}) { name } }`,
		`mutation { deleteComputeProfile(name: "small") { name } }`,
		`mutation { createStorageProfile(input: {name: "fast", tier: "nvme", pools: [{zone: "fra1", pool: "nvme"}]}) { name } }`,
		`mutation { updateStorageProfile(input: {name: "ssd-standard", readMBps: 1}) { name } }`,
		`mutation { deleteStorageProfile(name: "ssd-standard") { name } }`,
		`mutation { createImage(input: {name: "debian-12", version: "1", url: "https://x/d", checksum: "` + checksum + `", cloudInit: true}) { name } }`,
		`mutation { updateImage(input: {name: "ubuntu-24.04", url: "https://evil/x"}) { name } }`,
		`mutation { deleteImage(name: "ubuntu-24.04") { name } }`,
	}
	// The admin creates what the updates and deletes refer to.
	for _, m := range []string{
		`mutation { createComputeProfile(input: {name: "small", vcpus: 1, memoryMiB: 2048}) { name } }`,
		`mutation { createStorageProfile(input: {name: "ssd-standard", tier: "ssd", readMBps: 500, writeMBps: 250, pools: [{zone: "fra1", pool: "local-lvm"}, {zone: "hel1", pool: "ssd"}]}) { name } }`,
		`mutation { createImage(input: {name: "ubuntu-24.04", version: "20251117", url: "https://images.test/noble.img", checksum: "` + checksum + `", cloudInit: true}) { name } }`,
	} {
		h.do(t, "admin", "", m, nil).OK(t)
	}
	before := h.snapshot(t)
	for _, user := range []string{"alice", "bob"} {
		for _, vdc := range []string{"", map[string]string{"alice": "prod", "bob": "staging"}[user]} {
			for _, m := range mutations {
				r := h.do(t, user, vdc, m, nil)
				// As if the operation did not exist: nothing says who
				// may use it.
				field := strings.TrimPrefix(strings.Fields(m)[2], "{")
				field, _, _ = strings.Cut(field, "(")
				if r.Code(t) != "NOT_FOUND" || r.Errors[0].Message != `"`+field+`" does not exist` {
					t.Errorf("%s (vdc %q): %s: %s", user, vdc, m, r.Raw)
				}
			}
		}
	}
	if after := h.snapshot(t); after != before {
		t.Fatalf("refused mutations changed the catalog:\n%s\n%s", before, after)
	}
	// Everyone signed in reads the catalog.
	var sps []struct {
		Name     string
		ReadMBps int
		Pools    []struct{ Zone, Pool string }
	}
	h.do(t, "bob", "", `{ storageProfiles { name readMBps pools { zone pool } } }`, nil).OK(t).Into(t, "storageProfiles", &sps)
	if fmt.Sprint(sps) != "[{ssd-standard 500 [{fra1 local-lvm} {hel1 ssd}]}]" {
		t.Fatalf("storage profiles: %+v", sps)
	}
	// And the admin may do all of it.
	for _, m := range mutations {
		h.do(t, "admin", "", m, nil).OK(t)
	}
}

func TestBadInputChangesNothing(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOptions{})
	h.do(t, "admin", "", `mutation { createComputeProfile(input: {name: "small", vcpus: 1, memoryMiB: 2048}) { name } }`, nil).OK(t)
	before := h.snapshot(t)
	cases := []struct{ query, field string }{
		{`mutation { createVDC(input: {name: "Bad_Name", quotas: {vcpus: 1, memoryMiB: 1, storageGiB: 1, vms: 1}}) { name } }`, "input.name"},
		{`mutation { createVDC(input: {name: "ok", quotas: {vcpus: -1, memoryMiB: 1, storageGiB: 1, vms: 1}}) { name } }`, "input.quotas.vcpus"},
		{`mutation { updateVDC(input: {name: "prod", quotas: {vcpus: 1, memoryMiB: 1, storageGiB: -5, vms: 1}}) { name } }`, "input.quotas.storageGiB"},
		{`mutation { updateVDC(input: {name: "prod", resourceVersion: ""}) { name } }`, "input.resourceVersion"},
		{`mutation { createComputeProfile(input: {name: "huge", vcpus: 0, memoryMiB: 1024}) { name } }`, "input.vcpus"},
		{`mutation { updateComputeProfile(input: {name: "small", memoryMiB: 1}) { name } }`, "input.memoryMiB"},
		{`mutation { createStorageProfile(input: {name: "s", tier: "ssd", pools: [{zone: "fra1", pool: "pool-a"}, {zone: "fra1", pool: "pool-b"}]}) { name } }`, "input.pools[1].zone"},
		{`mutation { createStorageProfile(input: {name: "s", tier: "ssd", pools: []}) { name } }`, "input.pools"},
		{`mutation { createImage(input: {name: "img", version: "1", url: "file:///etc/passwd", checksum: "sha256:00", cloudInit: false}) { name } }`, "input.url"},
		{`mutation { createImage(input: {name: "img", version: "1", url: "https://x/y", checksum: "md5:abc", cloudInit: false}) { name } }`, "input.checksum"},
	}
	for _, c := range cases {
		r := h.do(t, "admin", "", c.query, nil)
		if r.Code(t) != "BAD_USER_INPUT" || r.Errors[0].Extensions["field"] != c.field || !strings.HasPrefix(r.Errors[0].Message, c.field+": ") {
			t.Errorf("%s: want BAD_USER_INPUT on %s, got %s", c.query, c.field, r.Raw)
		}
	}
	// Requests the schema refuses are bad input too.
	for _, q := range []string{
		`mutation { createVDC(input: {name: "x"}) { name } }`,
		`{ nosuchfield }`,
		`{ me { subject `,
		`mutation { createComputeProfile(input: {name: "x", vcpus: "four", memoryMiB: 1}) { name } }`,
	} {
		r := h.do(t, "admin", "", q, nil)
		if len(r.Errors) == 0 || r.Errors[0].Extensions["code"] != "BAD_USER_INPUT" || r.Errors[0].Extensions["reason"] == nil {
			t.Errorf("%s: %s", q, r.Raw)
		}
	}
	// Variables of the wrong type as well.
	r := h.do(t, "admin", "", `mutation($n: Int!) { createComputeProfile(input: {name: "x", vcpus: $n, memoryMiB: 1024}) { name } }`, map[string]any{"n": "many"})
	if len(r.Errors) == 0 || r.Errors[0].Extensions["code"] != "BAD_USER_INPUT" {
		t.Errorf("bad variable: %s", r.Raw)
	}
	if after := h.snapshot(t); after != before {
		t.Fatalf("bad input changed the catalog:\n%s\n%s", before, after)
	}
	// Unknown objects are NOT_FOUND.
	for _, q := range []string{`{ image(name: "nope") { name } }`, `mutation { updateImage(input: {name: "nope", version: "2"}) { name } }`, `mutation { deleteVDC(name: "nope") { name } }`} {
		if r := h.do(t, "admin", "", q, nil); r.Code(t) != "NOT_FOUND" {
			t.Errorf("%s: %s", q, r.Raw)
		}
	}
}

func TestConditionalUpdates(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOptions{})
	var v struct {
		ResourceVersion string
		Description     string
		Quotas          struct{ Vcpus int }
	}
	h.do(t, "admin", "", `{ vdc(name: "prod") { resourceVersion description quotas { vcpus } } }`, nil).OK(t).Into(t, "vdc", &v)
	read := v.ResourceVersion

	const upd = `mutation($rv: String, $d: String) { updateVDC(input: {name: "prod", resourceVersion: $rv, description: $d}) { resourceVersion description quotas { vcpus } } }`
	h.do(t, "admin", "", upd, map[string]any{"rv": read, "d": "first"}).OK(t).Into(t, "updateVDC", &v)
	if v.Description != "first" || v.ResourceVersion == read || v.Quotas.Vcpus != 64 {
		t.Fatalf("update: %+v", v)
	}
	r := h.do(t, "admin", "", upd, map[string]any{"rv": read, "d": "second"})
	if r.Code(t) != "CONFLICT" || !strings.Contains(r.Errors[0].Message, "stale") {
		t.Fatalf("stale update: %s", r.Raw)
	}
	if r := h.do(t, "admin", "", `mutation($rv: String) { deleteVDC(name: "prod", resourceVersion: $rv) { name } }`, map[string]any{"rv": read}); r.Code(t) != "CONFLICT" {
		t.Fatalf("stale delete: %s", r.Raw)
	}
	if r := h.do(t, "admin", "", `mutation { createVDC(input: {name: "prod", quotas: {vcpus: 1, memoryMiB: 1, storageGiB: 1, vms: 1}}) { name } }`, nil); r.Code(t) != "CONFLICT" {
		t.Fatalf("duplicate create: %s", r.Raw)
	}
	got, err := catalog.Get[*catalog.VDC](context.Background(), h.store, "prod")
	if err != nil || got.Description != "first" {
		t.Fatalf("stored: %+v %v", got, err)
	}
	// Without a resourceVersion the update applies to the latest version.
	h.do(t, "admin", "", upd, map[string]any{"d": "third"}).OK(t)
	h.do(t, "admin", "", `mutation { deleteVDC(name: "prod") { name } }`, nil).OK(t)
}

// Two API replicas with their own stores on one catalog directory: of N
// concurrent conditional updates from one read, exactly one wins.
func TestReplicasRaceOnOneDirectory(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOptions{})
	urls := []string{h.url, h.startAPI(t)}
	var cur struct{ ResourceVersion string }
	h.do(t, "admin", "", `{ vdc(name: "staging") { resourceVersion } }`, nil).OK(t).Into(t, "vdc", &cur)
	tok := "Bearer " + h.token(t, "admin")
	const n = 16
	codes := make([]string, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := post(t, urls[i%2], tok, "", `mutation($rv: String, $v: Int!) { updateVDC(input: {name: "staging", resourceVersion: $rv, quotas: {vcpus: $v, memoryMiB: 1, storageGiB: 1, vms: 1}}) { quotas { vcpus } } }`,
				map[string]any{"rv": cur.ResourceVersion, "v": 100 + i})
			if len(r.Errors) == 0 {
				codes[i] = "OK"
			} else {
				codes[i], _ = r.Errors[0].Extensions["code"].(string)
			}
		}()
	}
	wg.Wait()
	winner, conflicts := -1, 0
	for i, c := range codes {
		switch c {
		case "OK":
			if winner >= 0 {
				t.Fatalf("two winners: %v", codes)
			}
			winner = i
		case "CONFLICT":
			conflicts++
		default:
			t.Fatalf("unexpected result %q: %v", c, codes)
		}
	}
	if winner < 0 || conflicts != n-1 {
		t.Fatalf("results: %v", codes)
	}
	got, err := catalog.Get[*catalog.VDC](context.Background(), h.store, "staging")
	if err != nil || got.Quotas.VCPUs != 100+winner {
		t.Fatalf("stored %+v, winner %d (%v)", got, winner, err)
	}
}

func TestLimits(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOptions{maxDepth: 3, maxComplexity: 40})
	h.do(t, "alice", "", `{ me { vdcs { role } } }`, nil).OK(t)
	r := h.do(t, "alice", "", `{ me { vdcs { vdc { name } } } }`, nil)
	if r.Code(t) != "BAD_USER_INPUT" || r.Errors[0].Message != "operation has depth 4, which exceeds the limit of 3" {
		t.Fatalf("depth: %s", r.Raw)
	}
	// Fragments count where they are spread.
	r = h.do(t, "alice", "", `query { me { ...M } } fragment M on Me { vdcs { vdc { name } } }`, nil)
	if r.Code(t) != "BAD_USER_INPUT" || !strings.Contains(r.Errors[0].Message, "depth 4") {
		t.Fatalf("depth via fragment: %s", r.Raw)
	}
	var wide strings.Builder
	wide.WriteString("{")
	for i := range 30 {
		fmt.Fprintf(&wide, " t%d: tenant { name }", i)
	}
	wide.WriteString(" }")
	r = h.do(t, "alice", "", wide.String(), nil)
	if r.Code(t) != "BAD_USER_INPUT" || !strings.Contains(r.Errors[0].Message, "exceeds the limit of 40") || r.Errors[0].Extensions["reason"] != "COMPLEXITY_LIMIT_EXCEEDED" {
		t.Fatalf("complexity: %s", r.Raw)
	}
}

func TestIntrospectionAndGraphiQL(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOptions{})
	// A full introspection query (as GraphiQL sends) passes the default limits.
	r := h.do(t, "alice", "", introspectionQuery, nil).OK(t)
	if !strings.Contains(r.Raw, `"createVDC"`) || !strings.Contains(r.Raw, `"platformAdmin"`) {
		t.Fatalf("introspection lacks the schema: %.300s", r.Raw)
	}

	req, _ := http.NewRequest(http.MethodGet, h.url, nil)
	req.Header.Set("Accept", "text/html,application/xhtml+xml")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	page, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/html") {
		t.Fatalf("GraphiQL page: %s %s", resp.Status, resp.Header.Get("Content-Type"))
	}
	checkGraphiQLAssets(t, h.url, string(page))

	// A CORS preflight needs no token and learns only the methods.
	req, _ = http.NewRequest(http.MethodOptions, h.url, nil)
	resp, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(resp.Header.Get("Allow"), "POST") {
		t.Fatalf("OPTIONS: %s %v", resp.Status, resp.Header)
	}

	get := func(query string) *http.Response {
		req, _ := http.NewRequest(http.MethodGet, h.url+"?query="+query, nil)
		req.Header.Set("Authorization", "Bearer "+h.token(t, "admin"))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	resp = get("%7Btenant%7Bname%7D%7D")
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("GET query: %s", resp.Status)
	}
	// GET cannot mutate.
	resp = get("mutation%7BdeleteVDC(name:%22prod%22)%7Bname%7D%7D")
	resp.Body.Close()
	if _, err := catalog.Get[*catalog.VDC](context.Background(), h.store, "prod"); err != nil {
		t.Fatalf("GET mutation deleted prod: %v (%s)", err, resp.Status)
	}
}

// An internal failure shows as INTERNAL without its details, which are
// logged instead.
func TestInternalErrorsDoNotLeak(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOptions{})
	if err := os.WriteFile(filepath.Join(h.dir, "vdcs", "broken.yaml"), []byte("metadata: [unclosed\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	r := h.do(t, "admin", "", `{ vdcs { name } }`, nil)
	if r.Code(t) != "INTERNAL" || r.Errors[0].Message != "internal error" || strings.Contains(r.Raw, h.dir) {
		t.Fatalf("internal error: %s", r.Raw)
	}
	if !strings.Contains(h.logs.String(), "broken.yaml") {
		t.Fatalf("cause not logged: %s", h.logs.String())
	}
}

// The development provider's own login, used as the portal would.
func TestPortalLoginFlow(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOptions{})
	tok, err := devidp.CodeFlow(context.Background(), nil, devidp.FlowParams{
		Issuer: h.idp.Issuer(), ClientID: portal, RedirectURI: cbURL, Username: "bob", Password: "bob-pw",
	})
	if err != nil {
		t.Fatal(err)
	}
	var me struct{ Subject string }
	post(t, h.url, "Bearer "+tok.AccessToken, "staging", `{ me { subject } }`, nil).OK(t).Into(t, "me", &me)
	if me.Subject != "bob" {
		t.Fatalf("me: %+v", me)
	}
}

const introspectionQuery = `query IntrospectionQuery {
  __schema {
    queryType { name } mutationType { name } subscriptionType { name }
    types { ...FullType }
    directives { name description locations args { ...InputValue } }
  }
}
fragment FullType on __Type {
  kind name description
  fields(includeDeprecated: true) { name description args { ...InputValue } type { ...TypeRef } isDeprecated deprecationReason }
  inputFields { ...InputValue }
  interfaces { ...TypeRef }
  enumValues(includeDeprecated: true) { name description isDeprecated deprecationReason }
  possibleTypes { ...TypeRef }
}
fragment InputValue on __InputValue { name description type { ...TypeRef } defaultValue }
fragment TypeRef on __Type {
  kind name
  ofType { kind name ofType { kind name ofType { kind name ofType { kind name ofType { kind name ofType { kind name ofType { kind name } } } } } } }
}`

// TestIssuerDown: while the identity provider cannot be reached, a request
// with a token is neither served nor told to sign in again: 503
// UNAVAILABLE, and it changes nothing.
func TestIssuerDown(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	issuer := "http://" + ln.Addr().String()
	ln.Close()
	v, err := auth.NewLazyVerifier(auth.Config{Issuer: issuer, Audience: portal})
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	store, err := catalog.OpenDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	vdcs, err := vdc.New(vdc.Config{Store: store})
	if err != nil {
		t.Fatal(err)
	}
	handler, err := server.New(server.Config{Verifier: v, Resolver: &graph.Resolver{Catalog: store, Estate: estate.New(estate.Config{Catalog: store}), VDCs: vdcs}})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(handler)
	t.Cleanup(srv.Close)

	r := post(t, srv.URL, "Bearer a.b.c", "", `mutation { createVDC(input: {name: "x", quotas: {vcpus: 1, memoryMiB: 1, storageGiB: 1, vms: 1}}) { name } }`, nil)
	if r.Status != http.StatusServiceUnavailable || r.Code(t) != "UNAVAILABLE" || r.Data != nil {
		t.Fatalf("issuer down: status %d, %s", r.Status, r.Raw)
	}
	if strings.Contains(r.Raw, ln.Addr().String()) {
		t.Errorf("the answer names the issuer's address: %s", r.Raw)
	}
	if vdcs, err := catalog.List[*catalog.VDC](context.Background(), store); err != nil || len(vdcs) != 0 {
		t.Fatalf("the catalog changed: %v %v", vdcs, err)
	}
	// Without a token it is still plainly unauthenticated.
	if r := post(t, srv.URL, "", "", `{ me { subject } }`, nil); r.Status != http.StatusUnauthorized || r.Code(t) != "UNAUTHENTICATED" {
		t.Fatalf("no token: status %d, %s", r.Status, r.Raw)
	}
}

// A body that is not a GraphQL request is refused without echoing it.
func TestUndecodableBodyIsNotEchoed(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOptions{})
	const marker = "secret-looking-marker"
	for name, body := range map[string]string{
		"not JSON":         `{"query": "{ tenant { name } }", "` + marker + ``,
		"query not string": `{"query": 5, "variables": {"x": "` + marker + `"}}`,
		"variables array":  `{"query": "{ tenant { name } }", "variables": ["` + marker + `"]}`,
	} {
		req, _ := http.NewRequest(http.MethodPost, h.url, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer "+h.token(t, "alice"))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		raw, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		var r response
		if err := json.Unmarshal(raw, &r); err != nil || resp.StatusCode != http.StatusBadRequest || len(r.Errors) != 1 ||
			r.Errors[0].Extensions["code"] != "BAD_USER_INPUT" || strings.Contains(string(raw), marker) {
			t.Errorf("%s: %d %s", name, resp.StatusCode, raw)
		}
	}
}

// Scalars are strict: no string for an Int, no number for a String, no
// string for a Boolean; what each accepts still works.
func TestStrictScalars(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOptions{})
	const qi, qs = `query($n: Int) { zones(first: $n) { name } }`, `query($s: String!) { vdc(name: $s) { name } }`
	for name, tc := range map[string]struct {
		query string
		value any
	}{
		"Int as a string":     {qi, "10"},
		"Int as a float":      {qi, 10.5},
		"Int out of range":    {qi, json.Number("99999999999999999999")},
		"Int as a boolean":    {qi, true},
		"String as an Int":    {qs, 5},
		"String as a bool":    {qs, true},
		"String as a list":    {qs, []any{"prod"}},
		"String as an object": {qs, map[string]any{"name": "prod"}},
	} {
		key := "n"
		if tc.query == qs {
			key = "s"
		}
		r := h.do(t, "alice", "", tc.query, map[string]any{key: tc.value})
		if len(r.Errors) != 1 || r.Errors[0].Extensions["code"] != "BAD_USER_INPUT" || strings.Contains(r.Raw, `"prod"`) {
			t.Errorf("%s: %s", name, r.Raw)
		}
	}
	const q = `query($n: Int, $s: String!) { zones(first: $n) { name } vdc(name: $s) { name } }`
	h.do(t, "alice", "", q, map[string]any{"n": 10, "s": "prod"}).OK(t)
	h.do(t, "alice", "", `{ zones(first: 3) { name } vdc(name: "prod") { name } }`, nil).OK(t)
}

// checkGraphiQLAssets: the GraphiQL page loads every script and style from
// the API's own origin (an air-gapped site has no CDN), each served with
// the integrity the page states; nothing else is served under the assets'
// path.
func checkGraphiQLAssets(t *testing.T, apiURL, page string) {
	t.Helper()
	api, err := url.Parse(apiURL)
	if err != nil {
		t.Fatal(err)
	}
	refs := regexp.MustCompile(`(?:src|href)="([^"]*)"\s+integrity="([^"]*)"`).FindAllStringSubmatch(page, -1)
	if len(refs) != 4 {
		t.Fatalf("GraphiQL page loads %d assets with integrity, want 4 (GraphiQL's script and style, React, ReactDOM):\n%s", len(refs), page)
	}
	if n := strings.Count(page, "https://") + strings.Count(page, "http://"); n > 0 {
		t.Errorf("GraphiQL page names %d absolute URLs, want none:\n%s", n, page)
	}
	for _, ref := range refs {
		u, err := api.Parse(ref[1])
		if err != nil || u.Host != api.Host {
			t.Fatalf("asset %q is not on the API's origin %s", ref[1], api.Host)
		}
		resp, err := http.Get(u.String())
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		sum := sha256.Sum256(body)
		if resp.StatusCode != http.StatusOK || "sha256-"+base64.StdEncoding.EncodeToString(sum[:]) != html.UnescapeString(ref[2]) || len(body) < 1000 {
			t.Errorf("GET %s: %s, %d bytes, integrity %s", u, resp.Status, len(body), ref[2])
		}
	}
	for _, p := range []string{"graphiql/LICENSE.react", "graphiql/nothing.js", "graphiql/../graphiql.go"} {
		resp, err := http.Get(apiURL + "/" + p)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode == http.StatusOK {
			t.Errorf("GET %s: %s, want no such asset", p, resp.Status)
		}
	}
}
