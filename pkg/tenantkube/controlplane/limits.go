package controlplane

import (
	"context"
	"fmt"

	"helm.sh/helm/v3/pkg/chartutil"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// A control plane's namespace is bounded by a ResourceQuota and a
// LimitRange, both named LimitsName, sized from what the control plane's
// own workloads ask for (the chart's values as the release gets them):
//
//   - the ResourceQuota holds QuotaHeadroom times the sum of their CPU and
//     memory requests, of their memory limits, of their pods, of their
//     volume claims and of the claims' storage: room for every workload to
//     roll at once (a Deployment surges a pod while it replaces one), as
//     an upgrade or a renewal of the certificates does;
//   - the LimitRange caps each container's memory limit at the largest
//     of the workloads' own, gives a container without one that limit,
//     and a container without requests the smallest workload's requests.
//
// So the control plane fits, and nothing else of that size does: a pod
// beyond them is refused by the management cluster's admission.

// LimitsName names the ResourceQuota and the LimitRange of a control
// plane's namespace.
const LimitsName = "flexkube"

// QuotaHeadroom is the factor of the ResourceQuota over the control
// plane's own requests and limits.
const QuotaHeadroom = 2

// footprint is what a control plane's workloads ask for.
type footprint struct {
	cpu, memory, memoryLimit resource.Quantity // summed over the pods
	maxMemoryLimit           resource.Quantity // the largest container's
	minCPU, minMemory        resource.Quantity // the smallest requests
	pods, claims             int64
	storage                  resource.Quantity
}

// footprintOf reads the footprint from vals, the release's values over the
// chart's defaults.
func footprintOf(vals chartutil.Values) (footprint, error) {
	var f footprint
	first := true
	for _, c := range []struct {
		key      string
		replicas bool
		sidecar  bool // a container of the API server's pods
	}{{"apiServer", true, false}, {"egressProxy", true, true}, {"controllerManager", false, false}, {"scheduler", false, false}, {"etcd", false, false}} {
		n := int64(1)
		if c.replicas {
			r, err := vals.PathValue("apiServer.replicas")
			if err != nil {
				return f, fmt.Errorf("apiServer.replicas: %w", err)
			}
			switch v := r.(type) {
			case float64:
				n = int64(v)
			case int:
				n = int64(v)
			case int64:
				n = v
			default:
				return f, fmt.Errorf("apiServer.replicas: %v is no number", r)
			}
		}
		q := func(path string) (resource.Quantity, error) {
			v, err := vals.PathValue(c.key + ".resources." + path)
			if err != nil {
				return resource.Quantity{}, nil // none asked for
			}
			return resource.ParseQuantity(fmt.Sprint(v))
		}
		cpu, err := q("requests.cpu")
		if err != nil {
			return f, fmt.Errorf("%s requests.cpu: %w", c.key, err)
		}
		mem, err := q("requests.memory")
		if err != nil {
			return f, fmt.Errorf("%s requests.memory: %w", c.key, err)
		}
		lim, err := q("limits.memory")
		if err != nil {
			return f, fmt.Errorf("%s limits.memory: %w", c.key, err)
		}
		for range n {
			f.cpu.Add(cpu)
			f.memory.Add(mem)
			f.memoryLimit.Add(lim)
		}
		if c.sidecar {
			continue
		}
		f.pods += n
		if lim.Cmp(f.maxMemoryLimit) > 0 {
			f.maxMemoryLimit = lim
		}
		if first || cpu.Cmp(f.minCPU) < 0 {
			f.minCPU = cpu
		}
		if first || mem.Cmp(f.minMemory) < 0 {
			f.minMemory = mem
		}
		first = false
	}
	size, err := vals.PathValue("etcd.storage.size")
	if err != nil {
		return f, fmt.Errorf("etcd.storage.size: %w", err)
	}
	if f.storage, err = resource.ParseQuantity(fmt.Sprint(size)); err != nil {
		return f, fmt.Errorf("etcd.storage.size: %w", err)
	}
	f.claims = 1
	return f, nil
}

// times is q times n.
func times(q resource.Quantity, n int64) resource.Quantity {
	out := resource.Quantity{Format: q.Format}
	for range n {
		out.Add(q)
	}
	return out
}

// quotaOf is the ResourceQuota's hard limits for f.
func quotaOf(f footprint) corev1.ResourceList {
	return corev1.ResourceList{
		corev1.ResourceRequestsCPU:            times(f.cpu, QuotaHeadroom),
		corev1.ResourceRequestsMemory:         times(f.memory, QuotaHeadroom),
		corev1.ResourceLimitsMemory:           times(f.memoryLimit, QuotaHeadroom),
		corev1.ResourcePods:                   *resource.NewQuantity(f.pods*QuotaHeadroom, resource.DecimalSI),
		corev1.ResourcePersistentVolumeClaims: *resource.NewQuantity(f.claims*QuotaHeadroom, resource.DecimalSI),
		corev1.ResourceRequestsStorage:        times(f.storage, QuotaHeadroom),
	}
}

// limitRangeOf is the LimitRange's item for f's containers.
func limitRangeOf(f footprint) corev1.LimitRangeItem {
	return corev1.LimitRangeItem{
		Type:           corev1.LimitTypeContainer,
		Max:            corev1.ResourceList{corev1.ResourceMemory: f.maxMemoryLimit},
		Default:        corev1.ResourceList{corev1.ResourceMemory: f.maxMemoryLimit},
		DefaultRequest: corev1.ResourceList{corev1.ResourceCPU: f.minCPU, corev1.ResourceMemory: f.minMemory},
	}
}

// ensureLimits creates or updates the ResourceQuota and the LimitRange of
// s's namespace for the release's values.
func (m *Manager) ensureLimits(ctx context.Context, s Spec) error {
	vals, err := chartutil.CoalesceValues(m.cfg.Chart, m.values(s, ""))
	if err != nil {
		return fmt.Errorf("limits: values: %w", err)
	}
	f, err := footprintOf(vals)
	if err != nil {
		return fmt.Errorf("limits: %w", err)
	}
	meta := metav1.ObjectMeta{Name: LimitsName, Namespace: s.Namespace, Labels: map[string]string{LabelManaged: ManagedBy}}
	quotas := m.client.CoreV1().ResourceQuotas(s.Namespace)
	rq := &corev1.ResourceQuota{ObjectMeta: meta, Spec: corev1.ResourceQuotaSpec{Hard: quotaOf(f)}}
	got, err := quotas.Get(ctx, LimitsName, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		_, err = quotas.Create(ctx, rq, metav1.CreateOptions{})
	case err == nil && !equality.Semantic.DeepEqual(got.Spec.Hard, rq.Spec.Hard):
		got.Spec.Hard = rq.Spec.Hard
		_, err = quotas.Update(ctx, got, metav1.UpdateOptions{})
	}
	if err != nil {
		return fmt.Errorf("limits: resource quota: %w", err)
	}
	ranges := m.client.CoreV1().LimitRanges(s.Namespace)
	lr := &corev1.LimitRange{ObjectMeta: *meta.DeepCopy(), Spec: corev1.LimitRangeSpec{Limits: []corev1.LimitRangeItem{limitRangeOf(f)}}}
	gotLR, err := ranges.Get(ctx, LimitsName, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		_, err = ranges.Create(ctx, lr, metav1.CreateOptions{})
	case err == nil && !equality.Semantic.DeepEqual(gotLR.Spec, lr.Spec):
		gotLR.Spec = lr.Spec
		_, err = ranges.Update(ctx, gotLR, metav1.UpdateOptions{})
	}
	if err != nil {
		return fmt.Errorf("limits: limit range: %w", err)
	}
	return nil
}
