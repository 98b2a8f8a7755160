package flexctl

import (
	"context"

	"github.com/Khan/genqlient/graphql"
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

	list := listCommand(a, "List the VDC's networks", "list networks",
		func(ctx context.Context, c graphql.Client, after *string) ([]api.NetworkFields, pageInfo, error) {
			r, err := api.ListNetworks(ctx, c, pageSize, after)
			if err != nil {
				return nil, nil, err
			}
			var out []api.NetworkFields
			for _, n := range r.NetworksConnection.Nodes {
				out = append(out, n.NetworkFields)
			}
			return out, &r.NetworksConnection.PageInfo, nil
		}, networkTable)
	get := getCommand(a, "Show a network", "ID", func(ctx context.Context, c graphql.Client, id string) (api.NetworkFields, error) {
		r, err := api.GetNetwork(ctx, c, id)
		if err != nil {
			return api.NetworkFields{}, AsAPIError("get network", err)
		}
		var n *api.GetNetworkNodeNetwork
		if r.Node != nil {
			n, _ = (*r.Node).(*api.GetNetworkNodeNetwork)
		}
		if n == nil {
			return api.NetworkFields{}, &APIError{Message: "no network " + id, Code: "NOT_FOUND"}
		}
		return n.NetworkFields, nil
	}, networkTable)

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
				return AsAPIError("create network", err)
			}
			n := r.CreateNetwork.NetworkFields
			return Write(cmd.OutOrStdout(), a.output, n, networkTable([]api.NetworkFields{n}))
		})}
	cf := create.Flags()
	cf.StringVar(&in.Zone, "zone", "", "the zone")
	cf.StringVar(&in.Cidr, "cidr", "", "the IPv4 network, e.g. 10.1.0.0/24")
	cf.StringVar(&in.Gateway, "gateway", "", "the gateway address in it, e.g. 10.1.0.1")
	required(cf, "zone", "cidr", "gateway")

	del := deleteCommand(a, "Delete a network", "delete network", func(ctx context.Context, c graphql.Client, id string) (string, error) {
		r, err := api.DeleteNetwork(ctx, c, id)
		if err != nil {
			return "", err
		}
		return r.DeleteNetwork.Id, nil
	})

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
