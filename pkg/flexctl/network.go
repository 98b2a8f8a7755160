package flexctl

import (
	"github.com/spf13/cobra"

	"github.com/flexplane/flexplane/pkg/flexctl/api"
)

func networkTable(nets []api.NetworkFields) func() Table {
	return func() Table {
		t := Table{Header: []string{"ID", "NAME", "ZONE", "CIDR", "GATEWAY", "VNET"}}
		for _, n := range nets {
			t.Rows = append(t.Rows, []string{n.Id, n.Name, n.Zone.Name, n.Cidr, n.Gateway, n.Vnet})
		}
		return t
	}
}

func (a *app) networkCommand() *cobra.Command {
	network := group("network", "Networks of the VDC: list, get, create, delete", "net")

	list := &cobra.Command{Use: "list", Short: "List the VDC's networks", Args: args(0, "no arguments"),
		RunE: a.run(func(cmd *cobra.Command, _ []string) error {
			c, err := a.client(cmd.Context())
			if err != nil {
				return err
			}
			nets := []api.NetworkFields{}
			var after *string
			for {
				r, err := api.ListNetworks(cmd.Context(), c, pageSize, after)
				if err != nil {
					return apiError("list networks", err)
				}
				for _, n := range r.NetworksConnection.Nodes {
					nets = append(nets, n.NetworkFields)
				}
				pi := r.NetworksConnection.PageInfo
				if !pi.HasNextPage || pi.EndCursor == nil {
					break
				}
				after = pi.EndCursor
			}
			return Write(cmd.OutOrStdout(), a.output, nets, networkTable(nets))
		})}

	get := &cobra.Command{Use: "get ID", Short: "Show a network", Args: args(1, "the network's id"),
		RunE: a.run(func(cmd *cobra.Command, argv []string) error {
			c, err := a.client(cmd.Context())
			if err != nil {
				return err
			}
			r, err := api.GetNetwork(cmd.Context(), c, argv[0])
			if err != nil {
				return apiError("get network", err)
			}
			var n *api.GetNetworkNodeNetwork
			if r.Node != nil {
				n, _ = (*r.Node).(*api.GetNetworkNodeNetwork)
			}
			if n == nil {
				return &APIError{Message: "no network " + argv[0], Code: "NOT_FOUND"}
			}
			return Write(cmd.OutOrStdout(), a.output, n.NetworkFields, networkTable([]api.NetworkFields{n.NetworkFields}))
		})}

	var in api.CreateNetworkInput
	create := &cobra.Command{Use: "create NAME", Short: "Create a network in a zone", Args: args(1, "the network's name"),
		RunE: a.run(func(cmd *cobra.Command, argv []string) error {
			in.Name = argv[0]
			c, err := a.client(cmd.Context())
			if err != nil {
				return err
			}
			r, err := api.CreateNetwork(cmd.Context(), c, in)
			if err != nil {
				return apiError("create network", err)
			}
			n := r.CreateNetwork.NetworkFields
			return Write(cmd.OutOrStdout(), a.output, n, networkTable([]api.NetworkFields{n}))
		})}
	cf := create.Flags()
	cf.StringVar(&in.Zone, "zone", "", "the zone")
	cf.StringVar(&in.Cidr, "cidr", "", "the IPv4 network, e.g. 10.1.0.0/24")
	cf.StringVar(&in.Gateway, "gateway", "", "the gateway address in it, e.g. 10.1.0.1")
	required(cf, "zone", "cidr", "gateway")

	del := &cobra.Command{Use: "delete ID", Short: "Delete a network", Args: args(1, "the network's id"),
		RunE: a.run(func(cmd *cobra.Command, argv []string) error {
			c, err := a.client(cmd.Context())
			if err != nil {
				return err
			}
			r, err := api.DeleteNetwork(cmd.Context(), c, argv[0])
			if err != nil {
				return apiError("delete network", err)
			}
			return writeDeleted(cmd, a.output, r.DeleteNetwork.Id)
		})}

	network.AddCommand(list, get, create, del)
	return network
}

// writeDeleted prints the id of what a delete removed.
func writeDeleted(cmd *cobra.Command, format, id string) error {
	out := struct {
		ID string `json:"id"`
	}{id}
	return Write(cmd.OutOrStdout(), format, out, func() Table {
		return Table{Header: []string{"DELETED"}, Rows: [][]string{{id}}}
	})
}
