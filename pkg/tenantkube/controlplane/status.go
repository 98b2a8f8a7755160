package controlplane

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// labelVersion is the chart's label holding the Kubernetes version a
// workload runs.
const labelVersion = "app.kubernetes.io/version"

// Status reads the control plane of namespace from its StatefulSet and
// Deployments: a component is ready when its workload's replicas are
// ready and run its current template. ErrNotFound when namespace holds no
// control plane.
func (m *Manager) Status(ctx context.Context, namespace string) (Status, error) {
	cl, err := m.lookup(ctx, namespace)
	if err != nil {
		return Status{}, fmt.Errorf("controlplane: status: %w", err)
	}
	apps := m.client.AppsV1()
	st := Status{Ready: true}
	add := func(c Component) {
		st.Components = append(st.Components, c)
		st.Ready = st.Ready && c.Ready
	}

	sts, err := apps.StatefulSets(namespace).Get(ctx, cl.name+"-etcd", metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		add(Component{Name: "etcd", Message: "no StatefulSet"})
	case err != nil:
		return Status{}, fmt.Errorf("controlplane: status %s: %w", namespace, err)
	default:
		add(workload("etcd", sts.Generation, sts.Status.ObservedGeneration, replicas(sts.Spec.Replicas),
			sts.Status.ReadyReplicas, sts.Status.UpdatedReplicas))
	}
	for _, name := range []string{"kube-apiserver", "kube-controller-manager", "kube-scheduler"} {
		d, err := apps.Deployments(namespace).Get(ctx, cl.name+"-"+name[len("kube-"):], metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			add(Component{Name: name, Message: "no Deployment"})
			continue
		}
		if err != nil {
			return Status{}, fmt.Errorf("controlplane: status %s: %w", namespace, err)
		}
		c := workload(name, d.Generation, d.Status.ObservedGeneration, replicas(d.Spec.Replicas),
			min(d.Status.ReadyReplicas, d.Status.AvailableReplicas), d.Status.UpdatedReplicas)
		add(c)
		if name == "kube-apiserver" && c.Ready {
			st.Version = d.Labels[labelVersion]
		}
	}
	return st, nil
}

func replicas(r *int32) int32 {
	if r == nil {
		return 1
	}
	return *r
}

// workload judges one workload from its status.
func workload(name string, generation, observed int64, want, ready, updated int32) Component {
	c := Component{Name: name}
	switch {
	case observed < generation:
		c.Message = "change not yet observed"
	case updated < want:
		c.Message = fmt.Sprintf("%d of %d replicas updated", updated, want)
	case ready < want:
		c.Message = fmt.Sprintf("%d of %d replicas ready", ready, want)
	default:
		c.Ready = true
	}
	return c
}
