package controlplane

import (
	"context"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"log/slog"
	"net/netip"
	"slices"
	"strings"

	certv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/kubernetes"
)

// nodeUserPrefix is the user name prefix of a kubelet's credentials.
const nodeUserPrefix = "system:node:"

// servingUsages are the key usages a kubelet serving certificate may ask
// for; it must ask for server auth.
var servingUsages = []certv1.KeyUsage{certv1.UsageDigitalSignature, certv1.UsageKeyEncipherment, certv1.UsageServerAuth}

// KubeletServingDecision says whether a kubernetes.io/kubelet-serving CSR
// of a tenant cluster is approved: only a node's own request, for its own
// name and addresses inside the cluster's networks. Reason says why not
// (empty when approved).
func KubeletServingDecision(csr *certv1.CertificateSigningRequest, networks []netip.Prefix) (approve bool, reason string) {
	if csr.Spec.SignerName != certv1.KubeletServingSignerName {
		return false, "not a kubelet serving request"
	}
	node, ok := strings.CutPrefix(csr.Spec.Username, nodeUserPrefix)
	if !ok || node == "" || !slices.Contains(csr.Spec.Groups, "system:nodes") {
		return false, fmt.Sprintf("requested by %q, not by a node (system:node:<name> of group system:nodes)", csr.Spec.Username)
	}
	for _, u := range csr.Spec.Usages {
		if !slices.Contains(servingUsages, u) {
			return false, fmt.Sprintf("usage %q is not a serving certificate's", u)
		}
	}
	if !slices.Contains(csr.Spec.Usages, certv1.UsageServerAuth) {
		return false, "no server auth usage"
	}
	b, _ := pem.Decode(csr.Spec.Request)
	if b == nil || b.Type != "CERTIFICATE REQUEST" {
		return false, "the request is not a PEM certificate request"
	}
	req, err := x509.ParseCertificateRequest(b.Bytes)
	if err != nil {
		return false, fmt.Sprintf("the request does not parse: %v", err)
	}
	if err := req.CheckSignature(); err != nil {
		return false, fmt.Sprintf("the request's signature: %v", err)
	}
	if req.Subject.CommonName != csr.Spec.Username || !slices.Equal(req.Subject.Organization, []string{"system:nodes"}) {
		return false, fmt.Sprintf("subject %q is not the requesting node's", req.Subject.String())
	}
	if len(req.EmailAddresses) > 0 || len(req.URIs) > 0 {
		return false, "email or URI names are not a node's"
	}
	for _, d := range req.DNSNames {
		if d != node {
			return false, fmt.Sprintf("DNS name %q is not node %s's", d, node)
		}
	}
	if len(req.IPAddresses) == 0 {
		return false, "no IP address"
	}
	for _, ip := range req.IPAddresses {
		a, ok := netip.AddrFromSlice(ip)
		a = a.Unmap()
		if !ok || !slices.ContainsFunc(networks, func(p netip.Prefix) bool { return p.Contains(a) }) {
			return false, fmt.Sprintf("address %s is outside the cluster's networks %v", ip, networks)
		}
	}
	return true, ""
}

// ApproveKubeletServing decides the pending kubelet serving CSRs of the
// tenant cluster of namespace (KubeletServingDecision with networks, the
// cluster's VDC networks, Spec.Networks): approves those that pass and
// denies the others, saying why. The cluster's controller manager then
// signs the approved ones with the cluster's CA, which the API server
// trusts for kubelets (--kubelet-certificate-authority). ErrNotReady when
// the tenant API server does not answer.
func (m *Manager) ApproveKubeletServing(ctx context.Context, namespace string, networks []string) error {
	nets := make([]netip.Prefix, 0, len(networks))
	for _, n := range networks {
		p, err := netip.ParsePrefix(n)
		if err != nil {
			return fmt.Errorf("controlplane: approve kubelet serving in %s: network %q: %w", namespace, n, ErrInvalid)
		}
		nets = append(nets, p)
	}
	cl, err := m.lookup(ctx, namespace)
	if err != nil {
		return fmt.Errorf("controlplane: approve kubelet serving in %s: %w", namespace, err)
	}
	tenant, addr, err := m.tenantClient(ctx, namespace, cl)
	if err != nil {
		return fmt.Errorf("controlplane: approve kubelet serving in %s: %w", namespace, err)
	}
	if err := DecideKubeletServing(ctx, tenant, nets, m.log.With("namespace", namespace)); err != nil {
		return fmt.Errorf("controlplane: approve kubelet serving in %s at %s: %v: %w", namespace, addr, err, ErrNotReady)
	}
	return nil
}

// DecideKubeletServing approves or denies every pending
// kubernetes.io/kubelet-serving CSR of the cluster of client, as
// KubeletServingDecision says with networks, logging each decision.
func DecideKubeletServing(ctx context.Context, client kubernetes.Interface, networks []netip.Prefix, log *slog.Logger) error {
	csrs := client.CertificatesV1().CertificateSigningRequests()
	list, err := csrs.List(ctx, metav1.ListOptions{
		FieldSelector: fields.OneTermEqualSelector("spec.signerName", certv1.KubeletServingSignerName).String()})
	if err != nil {
		return fmt.Errorf("list kubelet serving requests: %w", err)
	}
	for i := range list.Items {
		csr := &list.Items[i]
		if decided(csr) {
			continue
		}
		ok, reason := KubeletServingDecision(csr, networks)
		cond := certv1.CertificateSigningRequestCondition{Type: certv1.CertificateApproved, Status: corev1.ConditionTrue,
			Reason: "FlexplaneApproved", Message: "a node's serving certificate for its name and addresses in the cluster's networks"}
		if !ok {
			cond = certv1.CertificateSigningRequestCondition{Type: certv1.CertificateDenied, Status: corev1.ConditionTrue,
				Reason: "FlexplaneDenied", Message: reason}
		}
		csr.Status.Conditions = append(csr.Status.Conditions, cond)
		if _, err := csrs.UpdateApproval(ctx, csr.Name, csr, metav1.UpdateOptions{}); err != nil {
			return fmt.Errorf("decide %s: %w", csr.Name, err)
		}
		if ok {
			log.Info("kubelet serving certificate approved", "csr", csr.Name, "user", csr.Spec.Username)
		} else {
			log.Warn("kubelet serving certificate denied", "csr", csr.Name, "user", csr.Spec.Username, "reason", reason)
		}
	}
	return nil
}

// decided tells whether csr is approved, denied or failed already.
func decided(csr *certv1.CertificateSigningRequest) bool {
	for _, c := range csr.Status.Conditions {
		switch c.Type {
		case certv1.CertificateApproved, certv1.CertificateDenied, certv1.CertificateFailed:
			return true
		}
	}
	return false
}
