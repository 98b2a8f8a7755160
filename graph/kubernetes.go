package graph

import (
	"github.com/flexplane/flexplane/graph/model"
	"github.com/flexplane/flexplane/graph/server/apierr"
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

// kubePhases maps a cluster's State.
var kubePhases = map[string]model.KubernetesClusterPhase{
	"Pending": model.KubernetesClusterPhasePending, "Provisioning": model.KubernetesClusterPhaseProvisioning,
	"Provisioned": model.KubernetesClusterPhaseProvisioned, "Deleting": model.KubernetesClusterPhaseDeleting,
	"Failed": model.KubernetesClusterPhaseFailed, "Unknown": model.KubernetesClusterPhaseUnknown,
}

func (r *Resolver) kubeClusterModel(c *tenantkube.Cluster) *model.KubernetesCluster {
	zm := &model.Zone{ID: c.Zone, Name: c.Zone}
	if z, ok := r.Estate.ZoneNamed(c.Zone); ok {
		zm = zoneModel(z, r.agentTarget())
	}
	m := &model.KubernetesCluster{ID: c.ID, Name: c.Name, Zone: zm, NetworkID: c.Network, Version: c.Version,
		ServiceCidr: c.ServiceCIDR, PodCidr: c.PodCIDR, Endpoint: optional(c.Endpoint), Phase: kubePhases[c.State()],
		ControlPlaneReady: c.ControlPlaneReady, ControlPlane: []*model.ControlPlaneComponent{}, Conditions: []*model.KubernetesCondition{},
		NodePools: []*model.NodePool{}, CreatedAt: c.Created}
	if c.ControlPlaneReady && c.RunningVersion != "" {
		m.RunningVersion = &c.RunningVersion
	}
	for _, cp := range c.Components {
		m.ControlPlane = append(m.ControlPlane, &model.ControlPlaneComponent{Name: cp.Name, Ready: cp.Ready, Message: optional(cp.Message)})
	}
	for _, cd := range c.Conditions {
		m.Conditions = append(m.Conditions, &model.KubernetesCondition{Type: cd.Type, Status: cd.Status, Reason: optional(cd.Reason), Message: optional(cd.Message)})
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
	for _, l := range p.SortedLabels() {
		m.Labels = append(m.Labels, &model.NodeLabel{Key: l[0], Value: l[1]})
	}
	for _, t := range p.Taints {
		m.Taints = append(m.Taints, &model.NodeTaint{Key: t.Key, Value: t.Value, Effect: taintEffects[t.Effect]})
	}
	return m
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
