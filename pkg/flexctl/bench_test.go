//go:build !race

package flexctl_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"testing"
	"time"

	"github.com/flexplane/flexplane/graph/server"
	"github.com/flexplane/flexplane/pkg/auth"
	"github.com/flexplane/flexplane/pkg/catalog"
	"github.com/flexplane/flexplane/pkg/dev/gqltest"
	"github.com/flexplane/flexplane/pkg/dev/meshtest"
	"github.com/flexplane/flexplane/pkg/dev/poll"
	"github.com/flexplane/flexplane/pkg/flexctl"
	"github.com/flexplane/flexplane/pkg/flexctl/api"
)

// benchVMs is how many VMs BenchmarkVMList lists.
const benchVMs = 100

// BenchmarkVMList measures `flexctl vm list -o json` of a VDC of 100 VMs
// against the same GraphQL query (flexctl's own ListVMs operation, page by
// page as flexctl asks: two pages of 50) sent by curl, a process per page
// (by net/http in-process when there is no curl binary). It reports the
// ratio of the wall times (x-curl; the budget is 1.5), the ratio over the
// same pages sent in-process by net/http, with no process start at all
// (x-inprocess), and each one's time per listing.
func BenchmarkVMList(b *testing.B) {
	vdc := &catalog.VDC{}
	vdc.Name, vdc.Description = "bench", "bench VDC"
	vdc.Quotas = catalog.VDCQuotas{VCPUs: 1000, MemoryMiB: 1 << 20, StorageGiB: 100000, VMs: 1000}
	users := meshtest.DefaultUsers()
	users[1].Roles = append(users[1].Roles, auth.VDCRoleKey("bench", auth.RoleMember)) // alice
	s := startStackWith(b, meshtest.APISpec{VDCs: []*catalog.VDC{vdc}, Users: users,
		RateLimits: server.RateLimits{MutationRate: 1000, MutationBurst: 1000}}, 2)
	token := s.h.Token(b, "alice")
	createVMs(b, s, "alice", "bench", benchVMs)

	home := b.TempDir()
	env := []string{flexctl.EnvEndpoint + "=" + s.h.Orchestrator.URL(), flexctl.EnvVDC + "=bench", flexctl.EnvToken + "=" + token}
	curl, _ := exec.LookPath("curl")
	list := func() int { // flexctl
		r := s.run(b, home, env, "vm", "list", "-o", "json")
		if r.code != 0 {
			b.Fatalf("flexctl vm list: %+v", r)
		}
		var vms []json.RawMessage
		if err := json.Unmarshal([]byte(r.stdout), &vms); err != nil {
			b.Fatal(err)
		}
		return len(vms)
	}
	pages := func(curl string) int { // the same pages by curl, or net/http for ""
		n := 0
		var after *string
		for {
			page := queryPage(b, s, curl, token, after)
			n += len(page.VmsConnection.Nodes)
			if !page.VmsConnection.PageInfo.HasNextPage {
				return n
			}
			after = page.VmsConnection.PageInfo.EndCursor
		}
	}
	baseline := func() int { return pages(curl) }
	if n, m := list(), baseline(); n != benchVMs || m != benchVMs { // warm both up
		b.Fatalf("flexctl lists %d VMs, curl %d; want %d", n, m, benchVMs)
	}
	var tFlexctl, tCurl, tHTTP time.Duration
	b.ResetTimer()
	for range b.N {
		start := time.Now()
		list()
		tFlexctl += time.Since(start)
		start = time.Now()
		baseline()
		tCurl += time.Since(start)
		start = time.Now()
		pages("")
		tHTTP += time.Since(start)
	}
	b.StopTimer()
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 / float64(b.N) }
	b.ReportMetric(float64(tFlexctl)/float64(tCurl), "x-curl")
	b.ReportMetric(float64(tFlexctl)/float64(tHTTP), "x-inprocess")
	b.ReportMetric(ms(tFlexctl), "ms-flexctl")
	b.ReportMetric(ms(tCurl), "ms-curl")
	b.ReportMetric(ms(tHTTP), "ms-inprocess")
	if curl == "" {
		b.Log("no curl binary: the baseline is net/http in-process")
	}
}

// queryPage sends flexctl's ListVMs query for the page after after, by
// curl when curl is a path, else by gqltest.Post.
func queryPage(b *testing.B, s *stack, curl, token string, after *string) api.ListVMsResponse {
	b.Helper()
	vars := map[string]any{"first": 50, "after": after}
	var page api.ListVMsResponse
	if curl == "" {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		r, err := gqltest.Post(ctx, nil, s.h.GraphQLURL(), gqltest.Request{Query: api.ListVMs_Operation, Variables: vars, Authorization: "Bearer " + token, VDC: "bench"})
		if err != nil {
			b.Fatal(err)
		}
		r.OK(b).Into(b, "vmsConnection", &page.VmsConnection)
		return page
	}
	body, err := json.Marshal(struct {
		Query     string         `json:"query"`
		Variables map[string]any `json:"variables"`
	}{api.ListVMs_Operation, vars})
	if err != nil {
		b.Fatal(err)
	}
	out, err := exec.Command(curl, "-sS", "--fail-with-body", "-X", "POST", "-H", "Content-Type: application/json",
		"-H", "Authorization: Bearer "+token, "-H", flexctl.VDCHeader+": bench", "--data-binary", string(body), s.h.GraphQLURL()).Output()
	if err != nil {
		b.Fatalf("curl: %v: %s", err, out)
	}
	var res struct {
		Data   api.ListVMsResponse `json:"data"`
		Errors []json.RawMessage   `json:"errors"`
	}
	if err := json.Unmarshal(out, &res); err != nil || len(res.Errors) > 0 {
		b.Fatalf("curl answer %s: %v", out, err)
	}
	return res.Data
}

// createVMs creates n VMs of user in vdc on a network of their own and
// waits until every one runs.
func createVMs(b *testing.B, s *stack, user, vdc string, n int) {
	b.Helper()
	var net struct{ ID string }
	s.h.GraphQL(b, user, vdc, `mutation { createNetwork(input: {name: "lan", zone: "alpha", cidr: "10.1.0.0/24", gateway: "10.1.0.1"}) { id } }`, nil).
		OK(b).Into(b, "createNetwork", &net)
	for i := range n {
		s.h.GraphQL(b, user, vdc, `mutation($in: CreateVMInput!) { createVM(input: $in) { operation { id } } }`,
			map[string]any{"in": map[string]any{"name": fmt.Sprintf("vm%03d", i), "zone": "alpha", "image": "tiny", "computeProfile": "small",
				"storageProfile": "ssd", "diskGiB": 4, "user": "ubuntu", "nics": []any{map[string]any{"network": net.ID}}}}).OK(b)
	}
	poll.True(b, 5*time.Minute, fmt.Sprintf("%d VMs running", n), func() bool {
		var c struct{ TotalCount int }
		s.h.GraphQL(b, user, vdc, `{ vmsConnection(filter: {status: RUNNING}, first: 1) { totalCount } }`, nil).OK(b).Into(b, "vmsConnection", &c)
		return c.TotalCount == n
	})
}
