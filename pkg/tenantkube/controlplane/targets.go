package controlplane

import (
	"context"
	"fmt"
	"net/netip"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// apiServerSelector selects the API servers' Services of every release of
// the chart.
const apiServerSelector = "app.kubernetes.io/name=flexkube,app.kubernetes.io/component=kube-apiserver"

// Targets returns, by namespace, where the management cluster serves each
// hosted API server to the zones' external networks: the first IPv4
// address its LoadBalancer Service was given, at the Service's port. The
// edge gateways forward the workers' connections to their cluster's
// endpoint there. A Service not given an address yet is left out.
func (m *Manager) Targets(ctx context.Context) (map[string]netip.AddrPort, error) {
	return ListTargets(ctx, m.client)
}

// ListTargets is Targets over the management cluster of c. It reads the
// clusters' namespaces (labelled LabelManaged=ManagedBy) and the API
// servers' Services in each: the orchestrator may read Services only
// there. It is read every pass of the edge gateways' sync, so the lists
// are served from the API server's watch cache (resourceVersion 0), not
// by quorum reads.
func ListTargets(ctx context.Context, c kubernetes.Interface) (map[string]netip.AddrPort, error) {
	nss, err := c.CoreV1().Namespaces().List(ctx, metav1.ListOptions{LabelSelector: LabelManaged + "=" + ManagedBy, ResourceVersion: "0"})
	if err != nil {
		return nil, fmt.Errorf("controlplane: targets: %w", err)
	}
	out := map[string]netip.AddrPort{}
	for _, ns := range nss.Items {
		if ns.Status.Phase == corev1.NamespaceTerminating {
			continue
		}
		svcs, err := c.CoreV1().Services(ns.Name).List(ctx, metav1.ListOptions{LabelSelector: apiServerSelector, ResourceVersion: "0"})
		if apierrors.IsForbidden(err) {
			// A namespace just made, not granted yet (Manager.Grant):
			// nothing of the control plane is there yet.
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("controlplane: targets: %w", err)
		}
		for _, svc := range svcs.Items {
			if t, ok := target(&svc); ok {
				out[svc.Namespace] = t
			}
		}
	}
	return out, nil
}

// target is where svc is served outside the management cluster.
func target(svc *corev1.Service) (netip.AddrPort, bool) {
	if svc.Spec.Type != corev1.ServiceTypeLoadBalancer || len(svc.Spec.Ports) == 0 {
		return netip.AddrPort{}, false
	}
	port := svc.Spec.Ports[0].Port
	for _, in := range svc.Status.LoadBalancer.Ingress {
		if a, err := netip.ParseAddr(in.IP); err == nil && a.Is4() && port > 0 && port < 65536 {
			return netip.AddrPortFrom(a, uint16(port)), true
		}
	}
	return netip.AddrPort{}, false
}
