package flexctl

import (
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"

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
	list := &cobra.Command{Use: "list", Short: "List the VDC's load balancers", Args: args(0, "no arguments"),
		RunE: a.run(func(cmd *cobra.Command, _ []string) error {
			c, err := a.client(cmd.Context())
			if err != nil {
				return err
			}
			lbs := []api.LoadBalancerFields{}
			var after *string
			for {
				r, err := api.ListLoadBalancers(cmd.Context(), c, pageSize, after)
				if err != nil {
					return apiError("list load balancers", err)
				}
				for _, n := range r.LoadBalancers.Nodes {
					lbs = append(lbs, n.LoadBalancerFields)
				}
				pi := r.LoadBalancers.PageInfo
				if !pi.HasNextPage || pi.EndCursor == nil {
					break
				}
				after = pi.EndCursor
			}
			return Write(cmd.OutOrStdout(), a.output, lbs, lbTable(lbs))
		})}
	get := &cobra.Command{Use: "get ID", Short: "Show a load balancer", Args: args(1, "the load balancer's id"),
		RunE: a.run(func(cmd *cobra.Command, argv []string) error {
			c, err := a.client(cmd.Context())
			if err != nil {
				return err
			}
			r, err := api.GetLoadBalancer(cmd.Context(), c, argv[0])
			if err != nil {
				return apiError("get load balancer", err)
			}
			l := r.LoadBalancer.LoadBalancerFields
			return Write(cmd.OutOrStdout(), a.output, l, lbTable([]api.LoadBalancerFields{l}))
		})}
	var file string
	create := &cobra.Command{Use: "create -f FILE", Short: "Create a load balancer from a YAML or JSON file of createLoadBalancer's input (- for stdin)",
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
				return apiError("create load balancer", err)
			}
			l := r.CreateLoadBalancer.LoadBalancerFields
			return Write(cmd.OutOrStdout(), a.output, l, lbTable([]api.LoadBalancerFields{l}))
		})}
	create.Flags().StringVarP(&file, "file", "f", "", "the input: name, zone, listeners, pools, certificates (YAML or JSON)")
	required(create.Flags(), "file")
	del := &cobra.Command{Use: "delete ID", Short: "Delete a load balancer", Args: args(1, "the load balancer's id"),
		RunE: a.run(func(cmd *cobra.Command, argv []string) error {
			c, err := a.client(cmd.Context())
			if err != nil {
				return err
			}
			r, err := api.DeleteLoadBalancer(cmd.Context(), c, argv[0])
			if err != nil {
				return apiError("delete load balancer", err)
			}
			return writeDeleted(cmd, a.output, r.DeleteLoadBalancer.Id)
		})}
	lb.AddCommand(list, get, create, del)
	return lb
}
