package flexctl

import (
	"context"
	"fmt"
	"strings"

	"github.com/Khan/genqlient/graphql"
	"github.com/spf13/cobra"

	"github.com/flexplane/flexplane/pkg/flexctl/api"
	"github.com/flexplane/flexplane/pkg/support/atomicfile"
)

func clusterTable(cs []api.KubernetesClusterFields) func() Table {
	return func() Table {
		t := Table{Header: []string{"ID", "NAME", "ZONE", "VERSION", "PHASE", "ENDPOINT", "NODE POOLS"}}
		for _, k := range cs {
			var pools []string
			for _, p := range k.NodePools {
				pools = append(pools, p.Name)
			}
			t.Rows = append(t.Rows, []string{k.Id, k.Name, k.Zone.Name, k.Version, string(k.Phase), str(k.Endpoint), strings.Join(pools, ",")})
		}
		return t
	}
}

func (a *app) kubernetesCommand() *cobra.Command {
	k := group("kubernetes", "Managed Kubernetes clusters of the VDC: list, get, create, delete, kubeconfig", "k8s")
	list := listCommand(a, "List the VDC's Kubernetes clusters", "list Kubernetes clusters",
		func(ctx context.Context, c graphql.Client, after *string) ([]api.KubernetesClusterFields, pageInfo, error) {
			r, err := api.ListKubernetesClusters(ctx, c, pageSize, after)
			if err != nil {
				return nil, nil, err
			}
			var out []api.KubernetesClusterFields
			for _, n := range r.KubernetesClusters.Nodes {
				out = append(out, n.KubernetesClusterFields)
			}
			return out, &r.KubernetesClusters.PageInfo, nil
		}, clusterTable)
	get := getCommand(a, "Show a Kubernetes cluster", "ID", func(ctx context.Context, c graphql.Client, id string) (api.KubernetesClusterFields, error) {
		r, err := api.GetKubernetesCluster(ctx, c, id)
		if err != nil {
			return api.KubernetesClusterFields{}, AsAPIError("get Kubernetes cluster", err)
		}
		return r.KubernetesCluster.KubernetesClusterFields, nil
	}, clusterTable)
	var in api.CreateKubernetesClusterInput
	var serviceCIDR, podCIDR string
	create := &cobra.Command{Use: "create NAME", Short: "Create a Kubernetes cluster (its control plane; add node pools in the portal)", Args: args(1, "the cluster's name"),
		RunE: a.run(func(cmd *cobra.Command, argv []string) error {
			in.Name = argv[0]
			in.ServiceCidr, in.PodCidr = nil, nil
			if serviceCIDR != "" {
				in.ServiceCidr = &serviceCIDR
			}
			if podCIDR != "" {
				in.PodCidr = &podCIDR
			}
			c, err := a.client(cmd.Context())
			if err != nil {
				return err
			}
			r, err := api.CreateKubernetesCluster(cmd.Context(), c, in)
			if err != nil {
				return AsAPIError("create Kubernetes cluster", err)
			}
			kc := r.CreateKubernetesCluster.KubernetesClusterFields
			return Write(cmd.OutOrStdout(), a.output, kc, clusterTable([]api.KubernetesClusterFields{kc}))
		})}
	cf := create.Flags()
	cf.StringVar(&in.Zone, "zone", "", "the zone")
	cf.StringVar(&in.Version, "version", "", "the Kubernetes version (one the API offers)")
	cf.StringVar(&in.Network, "network", "", "the id of the VDC's network in the zone")
	cf.StringVar(&serviceCIDR, "service-cidr", "", "the services' CIDR (default: the API's)")
	cf.StringVar(&podCIDR, "pod-cidr", "", "the pods' CIDR (default: the API's)")
	required(cf, "zone", "version", "network")
	del := deleteCommand(a, "Delete a Kubernetes cluster and its workers", "delete Kubernetes cluster", func(ctx context.Context, c graphql.Client, id string) (string, error) {
		r, err := api.DeleteKubernetesCluster(ctx, c, id)
		if err != nil {
			return "", err
		}
		return r.DeleteKubernetesCluster.Id, nil
	})
	var file string
	kubeconfig := &cobra.Command{Use: "kubeconfig ID", Short: "Issue a kubeconfig for a cluster: to stdout, or with --file to a file (mode 0600)", Args: args(1, "the cluster's id"),
		RunE: a.run(func(cmd *cobra.Command, argv []string) error {
			c, err := a.client(cmd.Context())
			if err != nil {
				return err
			}
			r, err := api.IssueKubeconfig(cmd.Context(), c, argv[0])
			if err != nil {
				return AsAPIError("issue kubeconfig", err)
			}
			if file == "" {
				_, err := fmt.Fprint(cmd.OutOrStdout(), r.IssueKubeconfig.Kubeconfig)
				return err
			}
			if err := atomicfile.WriteFile(file, []byte(r.IssueKubeconfig.Kubeconfig), 0o600); err != nil {
				return fmt.Errorf("write kubeconfig: %w", err)
			}
			fmt.Fprintf(cmd.ErrOrStderr(), "kubeconfig written to %s (expires %s)\n", file, r.IssueKubeconfig.ExpiresAt)
			return nil
		})}
	kubeconfig.Flags().StringVarP(&file, "file", "f", "", "write the kubeconfig to this file instead of stdout")
	k.AddCommand(list, get, create, del, kubeconfig)
	return k
}
