package flexctl

import (
	"fmt"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"github.com/flexplane/flexplane/pkg/flexctl/api"
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
	list := &cobra.Command{Use: "list", Short: "List the VDC's Kubernetes clusters", Args: args(0, "no arguments"),
		RunE: a.run(func(cmd *cobra.Command, _ []string) error {
			c, err := a.client(cmd.Context())
			if err != nil {
				return err
			}
			cs := []api.KubernetesClusterFields{}
			var after *string
			for {
				r, err := api.ListKubernetesClusters(cmd.Context(), c, pageSize, after)
				if err != nil {
					return apiError("list Kubernetes clusters", err)
				}
				for _, n := range r.KubernetesClusters.Nodes {
					cs = append(cs, n.KubernetesClusterFields)
				}
				pi := r.KubernetesClusters.PageInfo
				if !pi.HasNextPage || pi.EndCursor == nil {
					break
				}
				after = pi.EndCursor
			}
			return Write(cmd.OutOrStdout(), a.output, cs, clusterTable(cs))
		})}
	get := &cobra.Command{Use: "get ID", Short: "Show a Kubernetes cluster", Args: args(1, "the cluster's id"),
		RunE: a.run(func(cmd *cobra.Command, argv []string) error {
			c, err := a.client(cmd.Context())
			if err != nil {
				return err
			}
			r, err := api.GetKubernetesCluster(cmd.Context(), c, argv[0])
			if err != nil {
				return apiError("get Kubernetes cluster", err)
			}
			kc := r.KubernetesCluster.KubernetesClusterFields
			return Write(cmd.OutOrStdout(), a.output, kc, clusterTable([]api.KubernetesClusterFields{kc}))
		})}
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
				return apiError("create Kubernetes cluster", err)
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
	del := &cobra.Command{Use: "delete ID", Short: "Delete a Kubernetes cluster and its workers", Args: args(1, "the cluster's id"),
		RunE: a.run(func(cmd *cobra.Command, argv []string) error {
			c, err := a.client(cmd.Context())
			if err != nil {
				return err
			}
			r, err := api.DeleteKubernetesCluster(cmd.Context(), c, argv[0])
			if err != nil {
				return apiError("delete Kubernetes cluster", err)
			}
			return writeDeleted(cmd, a.output, r.DeleteKubernetesCluster.Id)
		})}
	var file string
	kubeconfig := &cobra.Command{Use: "kubeconfig ID", Short: "Issue a kubeconfig for a cluster: to stdout, or with --file to a file (mode 0600)", Args: args(1, "the cluster's id"),
		RunE: a.run(func(cmd *cobra.Command, argv []string) error {
			c, err := a.client(cmd.Context())
			if err != nil {
				return err
			}
			r, err := api.IssueKubeconfig(cmd.Context(), c, argv[0])
			if err != nil {
				return apiError("issue kubeconfig", err)
			}
			if file == "" {
				_, err := fmt.Fprint(cmd.OutOrStdout(), r.IssueKubeconfig.Kubeconfig)
				return err
			}
			if err := os.WriteFile(file, []byte(r.IssueKubeconfig.Kubeconfig), 0o600); err != nil {
				return fmt.Errorf("write kubeconfig: %w", err)
			}
			fmt.Fprintf(cmd.ErrOrStderr(), "kubeconfig written to %s (expires %s)\n", file, r.IssueKubeconfig.ExpiresAt)
			return nil
		})}
	kubeconfig.Flags().StringVarP(&file, "file", "f", "", "write the kubeconfig to this file instead of stdout")
	k.AddCommand(list, get, create, del, kubeconfig)
	return k
}
