//go:build !race

package tfprovider_test

import (
	"context"
	"testing"
	"time"

	"github.com/flexplane/flexplane/pkg/dev/gqltest"
	"github.com/flexplane/flexplane/pkg/flexctl"
	"github.com/flexplane/flexplane/pkg/flexctl/api"
)

// BenchmarkTofuApply measures `tofu apply` of docs/examples/terraform (a
// network, a VM followed until it runs, a port forward; the provider
// built and taken through dev_overrides) against the same mutations sent
// by a Go program over HTTP (the provider's own operations, the create's
// operation polled at the provider's interval until it ends). Each side
// is torn down untimed after its run; one untimed round of each first
// stages the image in the zone. It reports the ratio of the wall times
// (x-script; the budget is 2) and each one's time per apply.
func BenchmarkTofuApply(b *testing.B) {
	tofu := tofuPath(b)
	s := startStack(b)
	token := s.serviceAccount(b, "red", "bench", "MEMBER")
	cli := devOverrides(b, buildProvider(b))
	dir := copyExample(b)
	env := []string{flexctl.EnvEndpoint + "=" + s.h.Orchestrator.URL(), flexctl.EnvToken + "=" + token, flexctl.EnvVDC + "=red"}
	tf := func(args ...string) {
		if r := runTofu(b, tofu, dir, cli, env, append(append(args, "-auto-approve", "-input=false", "-no-color"), exampleVars...)...); r.code != 0 {
			b.Fatalf("tofu %v: exit %d\n%s\n%s", args, r.code, r.stdout, r.stderr)
		}
	}
	post := func(query string, vars map[string]any, field string, out any) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		r, err := gqltest.Post(ctx, nil, s.h.GraphQLURL(), gqltest.Request{Query: query, Variables: vars, Authorization: "Bearer " + token, VDC: "red"})
		if err != nil {
			b.Fatal(err)
		}
		r.OK(b).Into(b, field, out)
	}
	var netID, vmID, pfID string
	script := func() {
		var n struct{ ID string }
		post(api.CreateNetwork_Operation, map[string]any{"input": map[string]any{"name": "lan", "zone": "alpha", "cidr": "10.20.0.0/24", "gateway": "10.20.0.1"}}, "createNetwork", &n)
		var c struct{ Operation struct{ ID string } }
		post(api.CreateVM_Operation, map[string]any{"input": map[string]any{"name": "web", "zone": "alpha", "image": "tiny", "computeProfile": "small",
			"storageProfile": "ssd", "diskGiB": 4, "user": "ubuntu", "sshKeys": []string{},
			"nics": []any{map[string]any{"network": n.ID, "address": "10.20.0.10"}}}}, "createVM", &c)
		var op struct {
			State string
			VMID  string `json:"vmId"`
		}
		deadline := time.Now().Add(10 * time.Minute)
		// poll:own-loop: the baseline asks for the operation at the provider's own fixed pace (200 ms), so that the two sides wait alike.
		for {
			post(api.GetOperation_Operation, map[string]any{"id": c.Operation.ID}, "operation", &op)
			if op.State == "FAILED" || time.Now().After(deadline) {
				b.Fatalf("create did not succeed: %+v", op)
			}
			if op.State == "SUCCEEDED" {
				break
			}
			time.Sleep(200 * time.Millisecond)
		}
		var pf struct{ ID string }
		post(api.CreatePortForward_Operation, map[string]any{"input": map[string]any{"vmId": op.VMID, "protocol": "TCP", "publicPort": 2222, "targetPort": 22}}, "createPortForward", &pf)
		netID, vmID, pfID = n.ID, op.VMID, pf.ID
	}
	unscript := func() {
		var x any
		post(api.DeletePortForward_Operation, map[string]any{"id": pfID}, "deletePortForward", &x)
		post(api.DeleteVM_Operation, map[string]any{"id": vmID}, "deleteVM", &x)
		post(api.DeleteNetwork_Operation, map[string]any{"id": netID}, "deleteNetwork", &x)
	}
	tf("apply") // warm up: stages the image
	tf("destroy")
	script()
	unscript()
	var tTofu, tScript time.Duration
	b.ResetTimer()
	for range b.N {
		start := time.Now()
		tf("apply")
		tTofu += time.Since(start)
		b.StopTimer()
		tf("destroy")
		b.StartTimer()
		start = time.Now()
		script()
		tScript += time.Since(start)
		b.StopTimer()
		unscript()
		b.StartTimer()
	}
	b.StopTimer()
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 / float64(b.N) }
	b.ReportMetric(float64(tTofu)/float64(tScript), "x-script")
	b.ReportMetric(ms(tTofu), "ms-tofu")
	b.ReportMetric(ms(tScript), "ms-script")
}
