package graph

import (
	"context"
	"slices"
	"strings"

	"github.com/flexplane/flexplane/graph/model"
	"github.com/flexplane/flexplane/graph/server/apierr"
	"github.com/flexplane/flexplane/pkg/auth"
	"github.com/flexplane/flexplane/pkg/tenantkube"
)

// The managed Kubernetes fields (graph/kubernetes.graphqls) over
// Resolver.Kubernetes; a nil one answers UNAVAILABLE (tenantkube's nil
// Service does).

// kubeErr maps an error of tenantkube; the fields of inputs are under
// input.
func kubeErr(err error) error {
	if err == nil {
		return nil
	}
	return apierr.From(err, "input")
}

// kubeArgErr is kubeErr for a mutation whose bad field is an argument
// (scaleNodePool's size, upgradeKubernetesCluster's version), not a field
// of an input object.
func kubeArgErr(err error) error {
	if ae := apierr.From(err, ""); ae.Code == apierr.BadUserInput {
		return ae
	}
	return kubeErr(err)
}

// kubePhases maps Cluster API's phases of a Cluster.
var kubePhases = map[string]model.KubernetesClusterPhase{
	"":             model.KubernetesClusterPhasePending,
	"Pending":      model.KubernetesClusterPhasePending,
	"Provisioning": model.KubernetesClusterPhaseProvisioning,
	"Provisioned":  model.KubernetesClusterPhaseProvisioned,
	"Deleting":     model.KubernetesClusterPhaseDeleting,
	"Failed":       model.KubernetesClusterPhaseFailed,
}

func (r *Resolver) kubeClusterModel(c *tenantkube.Cluster) *model.KubernetesCluster {
	phase, ok := kubePhases[c.Phase]
	if !ok {
		phase = model.KubernetesClusterPhaseUnknown
	}
	if c.Deleting {
		phase = model.KubernetesClusterPhaseDeleting
	}
	zm := &model.Zone{ID: c.Zone, Name: c.Zone}
	if z, ok := r.zoneNamed(c.Zone); ok {
		zm = zoneModel(z, r.agentTarget())
	}
	m := &model.KubernetesCluster{ID: c.ID, Name: c.Name, Zone: zm, NetworkID: c.Network, Version: c.Version,
		ServiceCidr: c.ServiceCIDR, PodCidr: c.PodCIDR, Endpoint: optString(c.Endpoint), Phase: phase,
		ControlPlaneReady: c.ControlPlaneReady, ControlPlane: []*model.ControlPlaneComponent{}, Conditions: []*model.KubernetesCondition{},
		NodePools: []*model.NodePool{}, CreatedAt: c.Created}
	if c.ControlPlaneReady && c.RunningVersion != "" {
		m.RunningVersion = &c.RunningVersion
	}
	for _, cp := range c.Components {
		m.ControlPlane = append(m.ControlPlane, &model.ControlPlaneComponent{Name: cp.Name, Ready: cp.Ready, Message: optString(cp.Message)})
	}
	for _, cd := range c.Conditions {
		m.Conditions = append(m.Conditions, &model.KubernetesCondition{Type: cd.Type, Status: cd.Status, Reason: optString(cd.Reason), Message: optString(cd.Message)})
	}
	for i := range c.Pools {
		m.NodePools = append(m.NodePools, nodePoolModel(&c.Pools[i]))
	}
	return m
}

// taintEffects maps Kubernetes' taint effects to the schema's.
var taintEffects = map[string]model.TaintEffect{
	"NoSchedule":       model.TaintEffectNoSchedule,
	"PreferNoSchedule": model.TaintEffectPreferNoSchedule,
	"NoExecute":        model.TaintEffectNoExecute,
}

func nodePoolModel(p *tenantkube.NodePool) *model.NodePool {
	m := &model.NodePool{ID: p.ID, ClusterID: p.Cluster, Name: p.Name, ComputeProfile: p.ComputeProfile, StorageProfile: p.StorageProfile,
		Size: p.Size, Workers: p.Workers, ReadyWorkers: p.Ready, Version: p.Version, UpToDateWorkers: p.UpToDate, Labels: []*model.NodeLabel{}, Taints: []*model.NodeTaint{}, Deleting: p.Deleting}
	keys := make([]string, 0, len(p.Labels))
	for k := range p.Labels {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		m.Labels = append(m.Labels, &model.NodeLabel{Key: k, Value: p.Labels[k]})
	}
	for _, t := range p.Taints {
		m.Taints = append(m.Taints, &model.NodeTaint{Key: t.Key, Value: t.Value, Effect: taintEffects[t.Effect]})
	}
	return m
}

func (r *Resolver) kubernetesClusters(ctx context.Context, first *int, after *string) (*model.KubernetesClusterConnection, error) {
	scope, _ := VDCScopeFrom(ctx) // @vdc guarantees it
	cs, err := r.Kubernetes.Clusters(ctx, scope.VDC.Name)
	if err != nil {
		return nil, kubeErr(err)
	}
	p, err := paginate(cs, func(c *tenantkube.Cluster) string { return sortKey(c.Name, c.ID) }, first, 50, after)
	if err != nil {
		return nil, err
	}
	out := &model.KubernetesClusterConnection{Edges: []*model.KubernetesClusterEdge{}, Nodes: []*model.KubernetesCluster{},
		PageInfo: p.info, TotalCount: p.total}
	for i, c := range p.items {
		m := r.kubeClusterModel(c)
		out.Nodes = append(out.Nodes, m)
		out.Edges = append(out.Edges, &model.KubernetesClusterEdge{Cursor: p.cursors[i], Node: m})
	}
	return out, nil
}

func (r *Resolver) kubernetesCluster(ctx context.Context, id string) (*model.KubernetesCluster, error) {
	scope, _ := VDCScopeFrom(ctx)
	c, err := r.Kubernetes.Cluster(ctx, scope.VDC.Name, id)
	if err != nil {
		return nil, kubeErr(err)
	}
	return r.kubeClusterModel(c), nil
}

func (r *Resolver) nodePool(ctx context.Context, id string) (*model.NodePool, error) {
	scope, _ := VDCScopeFrom(ctx)
	p, err := r.Kubernetes.NodePool(ctx, scope.VDC.Name, id)
	if err != nil {
		return nil, kubeErr(err)
	}
	return nodePoolModel(p), nil
}

func (r *Resolver) createKubernetesCluster(ctx context.Context, in model.CreateKubernetesClusterInput) (*model.KubernetesCluster, error) {
	scope, _ := VDCScopeFrom(ctx)
	c, err := r.Kubernetes.CreateKubernetesCluster(ctx, tenantkube.CreateClusterInput{VDC: scope.VDC.Name, Name: in.Name, Zone: in.Zone,
		Network: in.Network, Version: in.Version, ServiceCIDR: deref(in.ServiceCidr), PodCIDR: deref(in.PodCidr)})
	if err != nil {
		return nil, kubeErr(err)
	}
	return r.kubeClusterModel(c), nil
}

func (r *Resolver) deleteKubernetesCluster(ctx context.Context, id string) (*model.DeletedKubernetesCluster, error) {
	scope, _ := VDCScopeFrom(ctx)
	if err := r.Kubernetes.DeleteKubernetesCluster(ctx, scope.VDC.Name, id); err != nil {
		return nil, kubeErr(err)
	}
	return &model.DeletedKubernetesCluster{ID: id}, nil
}

func (r *Resolver) upgradeKubernetesCluster(ctx context.Context, id, version string) (*model.KubernetesCluster, error) {
	scope, _ := VDCScopeFrom(ctx)
	c, err := r.Kubernetes.UpgradeKubernetesCluster(ctx, scope.VDC.Name, id, version)
	if err != nil {
		return nil, kubeArgErr(err)
	}
	return r.kubeClusterModel(c), nil
}

// taintInputs maps the schema's taint effects back.
func taintInputs(in []*model.NodeTaintInput) []tenantkube.Taint {
	var out []tenantkube.Taint
	for _, t := range in {
		eff := ""
		for k, v := range taintEffects {
			if v == t.Effect {
				eff = k
			}
		}
		out = append(out, tenantkube.Taint{Key: t.Key, Value: deref(t.Value), Effect: eff})
	}
	return out
}

func (r *Resolver) createNodePool(ctx context.Context, in model.CreateNodePoolInput) (*model.NodePool, error) {
	scope, _ := VDCScopeFrom(ctx)
	labels := map[string]string{}
	for _, l := range in.Labels {
		if _, dup := labels[l.Key]; dup {
			return nil, apierr.BadInput("input.labels", "input.labels: label %q given twice", l.Key)
		}
		labels[l.Key] = l.Value
	}
	p, err := r.Kubernetes.CreateNodePool(ctx, tenantkube.NodePoolInput{VDC: scope.VDC.Name, Cluster: in.Cluster, Name: in.Name,
		ComputeProfile: in.ComputeProfile, StorageProfile: in.StorageProfile, Size: in.Size, Labels: labels, Taints: taintInputs(in.Taints)})
	if err != nil {
		return nil, kubeErr(err)
	}
	return nodePoolModel(p), nil
}

func (r *Resolver) scaleNodePool(ctx context.Context, id string, size int) (*model.NodePool, error) {
	scope, _ := VDCScopeFrom(ctx)
	p, err := r.Kubernetes.ScaleNodePool(ctx, scope.VDC.Name, id, size)
	if err != nil {
		return nil, kubeArgErr(err)
	}
	return nodePoolModel(p), nil
}

func (r *Resolver) deleteNodePool(ctx context.Context, id string) (*model.DeletedNodePool, error) {
	scope, _ := VDCScopeFrom(ctx)
	if err := r.Kubernetes.DeleteNodePool(ctx, scope.VDC.Name, id); err != nil {
		return nil, kubeErr(err)
	}
	return &model.DeletedNodePool{ID: id}, nil
}

// kubeUser is the user name of the caller's kubeconfigs in tenant clusters.
func kubeUser(p *auth.Principal) string {
	if p.Email != "" && !strings.ContainsAny(p.Email, "\n\x00") {
		return p.Email
	}
	return "oidc:" + p.Subject
}

// issueKubeconfig issues the caller's kubeconfig: cluster-admin for a
// member or admin of the VDC, read-only for a viewer.
func (r *Resolver) issueKubeconfig(ctx context.Context, cluster string) (*model.Kubeconfig, error) {
	scope, _ := VDCScopeFrom(ctx)
	p, err := caller(ctx)
	if err != nil {
		return nil, err
	}
	readOnly := !scope.Role.AtLeast(auth.RoleMember)
	kc, exp, err := r.Kubernetes.Kubeconfig(ctx, scope.VDC.Name, cluster, kubeUser(p), readOnly)
	if err != nil {
		return nil, kubeErr(err)
	}
	return &model.Kubeconfig{Kubeconfig: string(kc), ExpiresAt: exp, ReadOnly: readOnly}, nil
}
