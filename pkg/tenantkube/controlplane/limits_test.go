package controlplane

import (
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/flexplane/flexplane/pkg/dev/poll"
)

// TestNamespaceLimits: Ensure gives a control plane's namespace a
// ResourceQuota of twice the chart's requests and limits (two API servers
// of 250m and 512Mi limited to 1Gi, a controller manager of 100m and
// 128Mi to 512Mi, a scheduler of 50m and 64Mi to 256Mi, etcd of 100m and
// 256Mi to 1Gi with a 2Gi volume) and a LimitRange capping a container at
// the largest limit (1Gi). The real API server's admission then refuses a
// container over the LimitRange and a pod beyond the quota, and admits
// one within both, given the LimitRange's defaults. Ensure again changes
// neither.
func TestNamespaceLimits(t *testing.T) {
	t.Parallel()
	m, client := newManager(t, Config{})
	ctx := t.Context()
	s := spec("kc-limits", "lim")
	if err := m.Ensure(ctx, s); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Delete(ctx, s.Namespace) })

	rq, err := client.CoreV1().ResourceQuotas(s.Namespace).Get(ctx, LimitsName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	want := map[corev1.ResourceName]string{
		corev1.ResourceRequestsCPU: "1540m", corev1.ResourceRequestsMemory: "3072Mi", corev1.ResourceLimitsMemory: "8192Mi",
		corev1.ResourcePods: "10", corev1.ResourcePersistentVolumeClaims: "2", corev1.ResourceRequestsStorage: "4Gi",
	}
	if len(rq.Spec.Hard) != len(want) {
		t.Errorf("quota %v, want %v", rq.Spec.Hard, want)
	}
	for name, v := range want {
		if got, ok := rq.Spec.Hard[name]; !ok || got.Cmp(resource.MustParse(v)) != 0 {
			t.Errorf("quota %s = %s, want %s", name, got.String(), v)
		}
	}
	lr, err := client.CoreV1().LimitRanges(s.Namespace).Get(ctx, LimitsName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(lr.Spec.Limits) != 1 {
		t.Fatalf("limit range %+v", lr.Spec)
	}
	l := lr.Spec.Limits[0]
	for _, c := range []struct {
		what string
		got  resource.Quantity
		want string
	}{
		{"max memory", l.Max[corev1.ResourceMemory], "1Gi"},
		{"default memory limit", l.Default[corev1.ResourceMemory], "1Gi"},
		{"default cpu request", l.DefaultRequest[corev1.ResourceCPU], "50m"},
		{"default memory request", l.DefaultRequest[corev1.ResourceMemory], "64Mi"},
	} {
		if l.Type != corev1.LimitTypeContainer || c.got.Cmp(resource.MustParse(c.want)) != 0 {
			t.Errorf("limit range %s: %s (type %s), want %s", c.what, c.got.String(), l.Type, c.want)
		}
	}

	// Ensure again changes nothing.
	if err := m.Ensure(ctx, s); err != nil {
		t.Fatal(err)
	}
	again, err := client.CoreV1().ResourceQuotas(s.Namespace).Get(ctx, LimitsName, metav1.GetOptions{})
	if err != nil || again.ResourceVersion != rq.ResourceVersion {
		t.Errorf("the quota after a second Ensure: %v, %v", again, err)
	}

	// The quota's status as the management cluster's quota controller
	// (which this API server runs without) writes it: its hard limits,
	// nothing used.
	rq.Status = corev1.ResourceQuotaStatus{Hard: rq.Spec.Hard, Used: corev1.ResourceList{}}
	for name := range rq.Spec.Hard {
		rq.Status.Used[name] = resource.MustParse("0")
	}
	if _, err := client.CoreV1().ResourceQuotas(s.Namespace).UpdateStatus(ctx, rq, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	pod := func(name, cpu, memory, limit string) *corev1.Pod {
		res := corev1.ResourceRequirements{Requests: corev1.ResourceList{}, Limits: corev1.ResourceList{}}
		if cpu != "" {
			res.Requests[corev1.ResourceCPU] = resource.MustParse(cpu)
		}
		if memory != "" {
			res.Requests[corev1.ResourceMemory] = resource.MustParse(memory)
		}
		if limit != "" {
			res.Limits[corev1.ResourceMemory] = resource.MustParse(limit)
		}
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: s.Namespace},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "registry.k8s.io/pause:3.10", Resources: res}}}}
	}
	pods := client.CoreV1().Pods(s.Namespace)
	for _, c := range []struct {
		pod  *corev1.Pod
		want string
	}{
		{pod("too-much-memory", "100m", "128Mi", "2Gi"), "maximum memory usage per Container is 1Gi"},
		{pod("too-much-cpu", "2", "128Mi", "256Mi"), "exceeded quota"},
	} {
		// The API server's admission reads the LimitRange and the quota
		// (with the status written above) from its caches: a pod admitted
		// before they caught up is deleted and asked again.
		poll.Until(t, 30*time.Second, "pod "+c.pod.Name+" refused saying "+c.want, func() error {
			_, err := pods.Create(ctx, c.pod, metav1.CreateOptions{})
			if err == nil {
				if derr := pods.Delete(ctx, c.pod.Name, metav1.DeleteOptions{}); derr != nil {
					return derr
				}
				return fmt.Errorf("pod %s admitted", c.pod.Name)
			}
			if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), c.want) {
				return fmt.Errorf("pod %s: %v, want a refusal saying %q", c.pod.Name, err, c.want)
			}
			return nil
		})
	}
	// A pod without requests or limits gets the LimitRange's defaults and
	// fits.
	got, err := pods.Create(ctx, pod("fits", "", "", ""), metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("a pod within the limits: %v", err)
	}
	r := got.Spec.Containers[0].Resources
	if r.Limits.Memory().Cmp(resource.MustParse("1Gi")) != 0 || r.Requests.Cpu().Cmp(resource.MustParse("50m")) != 0 {
		t.Errorf("the defaults of a pod without resources: %+v", r)
	}
}
