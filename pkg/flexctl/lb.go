package flexctl

import (
	"context"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/Khan/genqlient/graphql"
	"github.com/spf13/cobra"
	"sigs.k8s.io/yaml"

	"github.com/flexplane/flexplane/pkg/flexctl/api"
)

func lbTable(lbs []api.LoadBalancerFields) func() Table {
	return func() Table {
		t := Table{Header: []string{"ID", "NAME", "ZONE", "ADDRESS", "LISTENERS", "POOLS"}}
		for _, l := range lbs {
			var ls, ps []string
			for _, x := range l.Listeners {
				ls = append(ls, fmt.Sprintf("%s:%d/%s", x.Name, x.Port, x.Protocol))
			}
			for _, p := range l.Pools {
				ps = append(ps, p.Name+"("+strconv.Itoa(len(p.Backends))+")")
			}
			t.Rows = append(t.Rows, []string{l.Id, l.Name, l.Zone.Name, l.PublicAddress, strings.Join(ls, ","), strings.Join(ps, ",")})
		}
		return t
	}
}

func (a *app) lbCommand() *cobra.Command {
	lb := group("lb", "Load balancers of the VDC: list, get, create, delete")
	list := listCommand(a, "List the VDC's load balancers", "list load balancers",
		func(ctx context.Context, c graphql.Client, after *string) ([]api.LoadBalancerFields, pageInfo, error) {
			r, err := api.ListLoadBalancers(ctx, c, pageSize, after)
			if err != nil {
				return nil, nil, err
			}
			var out []api.LoadBalancerFields
			for _, n := range r.LoadBalancers.Nodes {
				out = append(out, n.LoadBalancerFields)
			}
			return out, &r.LoadBalancers.PageInfo, nil
		}, lbTable)
	get := getCommand(a, "Show a load balancer", "ID", func(ctx context.Context, c graphql.Client, id string) (api.LoadBalancerFields, error) {
		r, err := api.GetLoadBalancer(ctx, c, id)
		if err != nil {
			return api.LoadBalancerFields{}, AsAPIError("get load balancer", err)
		}
		return r.LoadBalancer.LoadBalancerFields, nil
	}, lbTable)
	var file string
	var wait bool
	create := &cobra.Command{Use: "create -f FILE", Short: "Create a load balancer from a YAML or JSON file of createLoadBalancer's input (- for stdin; with --wait, until its checked backends are healthy)",
		Args: args(0, "no arguments (the input is read from -f)"),
		RunE: a.run(func(cmd *cobra.Command, _ []string) error {
			var b []byte
			var err error
			if file == "-" {
				b, err = io.ReadAll(cmd.InOrStdin())
			} else {
				b, err = os.ReadFile(file)
			}
			if err != nil {
				return usageErrorf("read %s: %v", file, err)
			}
			var in api.CreateLoadBalancerInput
			if err := yaml.UnmarshalStrict(b, &in); err != nil {
				return usageErrorf("%s is not a createLoadBalancer input: %v", file, err)
			}
			c, err := a.client(cmd.Context())
			if err != nil {
				return err
			}
			r, err := api.CreateLoadBalancer(cmd.Context(), c, in)
			if err != nil {
				return AsAPIError("create load balancer", err)
			}
			l := r.CreateLoadBalancer.LoadBalancerFields
			if wait {
				if l, err = a.waitHealthy(cmd, c, l); err != nil {
					return err
				}
			}
			return Write(cmd.OutOrStdout(), a.output, l, lbTable([]api.LoadBalancerFields{l}))
		})}
	create.Flags().StringVarP(&file, "file", "f", "", "the input: name, zone, listeners, pools, certificates (YAML or JSON)")
	create.Flags().BoolVar(&wait, "wait", false, "follow the balancer until every backend of its pools with a health check is HEALTHY, with a progress line on stderr")
	required(create.Flags(), "file")
	del := deleteCommand(a, "Delete a load balancer", "delete load balancer", func(ctx context.Context, c graphql.Client, id string) (string, error) {
		r, err := api.DeleteLoadBalancer(ctx, c, id)
		if err != nil {
			return "", err
		}
		return r.DeleteLoadBalancer.Id, nil
	})
	lb.AddCommand(list, get, create, del)
	return lb
}

// checkedHealthy counts the backends of l's pools with a health check, and
// those of them the zone's replicas report HEALTHY (a pool without a
// check has no health to wait for).
func checkedHealthy(l api.LoadBalancerFields) (healthy, checked int) {
	for _, p := range l.Pools {
		if p.HealthCheck == nil {
			continue
		}
		for _, b := range p.Backends {
			checked++
			if b.Health == api.BackendHealthHealthy {
				healthy++
			}
		}
	}
	return healthy, checked
}

// waitHealthy polls the balancer l until every backend of its pools with
// a health check is HEALTHY, printing a line on stderr whenever the count
// changes.
func (a *app) waitHealthy(cmd *cobra.Command, c graphql.Client, l api.LoadBalancerFields) (api.LoadBalancerFields, error) {
	ctx := cmd.Context()
	last := ""
	start := time.Now()
	for {
		healthy, checked := checkedHealthy(l)
		line := fmt.Sprintf("load balancer %s: %d/%d checked backends healthy", l.Name, healthy, checked)
		if line != last {
			fmt.Fprintf(cmd.ErrOrStderr(), "%s (%s)\n", line, time.Since(start).Round(100*time.Millisecond))
			last = line
		}
		if healthy == checked {
			return l, nil
		}
		// poll:own-loop: the balancer is polled at a fixed pace until its backends are healthy.
		select {
		case <-ctx.Done():
			return l, fmt.Errorf("wait for load balancer %s: %w", l.Id, ctx.Err())
		case <-time.After(a.env.PollInterval):
		}
		r, err := api.GetLoadBalancer(ctx, c, l.Id)
		if err != nil {
			return l, AsAPIError("wait for load balancer "+l.Id, err)
		}
		l = r.LoadBalancer.LoadBalancerFields
	}
}
