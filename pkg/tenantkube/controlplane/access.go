package controlplane

import (
	"context"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
	"time"

	authzv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
)

func (c Credential) validate() error {
	if c.User == "" || strings.HasPrefix(c.User, "system:") || strings.ContainsAny(c.User, "\n\x00") {
		return invalid("user %q: a name, not a system: user", c.User)
	}
	if len(c.Groups) == 0 {
		return invalid("groups: at least one of %v", Roles)
	}
	for _, g := range c.Groups {
		if !slices.Contains(Roles, g) {
			return invalid("group %q: want one of %v", g, Roles)
		}
	}
	if c.TTL <= 0 || c.TTL > MaxTTL {
		return invalid("ttl %s: want more than 0 and at most %s", c.TTL, MaxTTL)
	}
	return nil
}

// Kubeconfig returns a kubeconfig for c on the cluster of namespace: a new
// client certificate signed by the cluster's CA, valid for c.TTL, with
// c.Groups as its organizations. It first binds each of c.Groups to its
// ClusterRole in the tenant cluster (once; the tenant API server must be
// up, else ErrNotReady). The cluster's admin certificate is never handed
// out.
func (m *Manager) Kubeconfig(ctx context.Context, namespace string, c Credential) ([]byte, error) {
	if err := c.validate(); err != nil {
		return nil, fmt.Errorf("controlplane: kubeconfig: %w", err)
	}
	cl, err := m.lookup(ctx, namespace)
	if err != nil {
		return nil, fmt.Errorf("controlplane: kubeconfig: %w", err)
	}
	secrets := m.client.CoreV1().Secrets(namespace)
	caSec, err := secrets.Get(ctx, caSecret(cl.name), metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("controlplane: kubeconfig %s: %w", namespace, notFound(err))
	}
	ca, err := parseAuthority(caSec.Data[corev1.TLSCertKey], caSec.Data[corev1.TLSPrivateKeyKey])
	if err != nil {
		return nil, fmt.Errorf("controlplane: kubeconfig %s: ca: %w", namespace, err)
	}
	if err := m.bindRoles(ctx, namespace, cl, c.Groups); err != nil {
		return nil, fmt.Errorf("controlplane: kubeconfig %s: %w", namespace, err)
	}
	now := m.cfg.Now()
	crt, key, err := ca.issue(leaf{cn: c.User, orgs: c.Groups, client: true, lifetime: c.TTL}, now)
	if err != nil {
		return nil, fmt.Errorf("controlplane: kubeconfig %s: %w", namespace, err)
	}
	kc, err := kubeconfig(cl.name, c.User, cl.endpoint, ca.certPEM, crt, key)
	if err != nil {
		return nil, fmt.Errorf("controlplane: kubeconfig %s: %w", namespace, err)
	}
	m.log.Info("kubeconfig issued", "namespace", namespace, "cluster", cl.name, "user", c.User,
		"groups", c.Groups, "expires", now.Add(c.TTL).UTC().Format(time.RFC3339))
	return kc, nil
}

func notFound(err error) error {
	if apierrors.IsNotFound(err) {
		return fmt.Errorf("%v: %w", err, ErrNotFound)
	}
	return err
}

// roleBinding names the ClusterRoleBinding of group role in a tenant
// cluster.
func roleBinding(role string) string { return "flexplane:" + role }

// serviceAddress is host:port of the API server's Service of cluster in
// namespace ns, in the management cluster: the Service serves at the
// endpoint's port.
func serviceAddress(ns, cluster, endpoint string) string {
	return net.JoinHostPort(cluster+"-apiserver."+ns+".svc", strconv.Itoa(endpointPort(endpoint)))
}

// endpointPort is the port of endpoint (host:port), 6443 when it has none.
func endpointPort(endpoint string) int {
	if _, ps, err := net.SplitHostPort(endpoint); err == nil {
		if p, err := strconv.Atoi(ps); err == nil {
			return p
		}
	}
	return 6443
}

// bindRoles creates, in the tenant cluster, a ClusterRoleBinding of each
// group to the ClusterRole of its name, with the admin kubeconfig of
// <cluster>-kubeconfig pointed at Config.TenantAddress.
func (m *Manager) bindRoles(ctx context.Context, ns string, cl cluster, groups []string) error {
	tenant, addr, err := m.tenantClient(ctx, ns, cl)
	if err != nil {
		return err
	}
	for _, g := range groups {
		crb := &rbacv1.ClusterRoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: roleBinding(g), Labels: map[string]string{LabelManaged: ManagedBy}},
			Subjects:   []rbacv1.Subject{{Kind: rbacv1.GroupKind, APIGroup: rbacv1.GroupName, Name: g}},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: g},
		}
		_, err := tenant.RbacV1().ClusterRoleBindings().Create(ctx, crb, metav1.CreateOptions{})
		switch {
		case err == nil || apierrors.IsAlreadyExists(err):
		case apierrors.IsForbidden(err) || apierrors.IsUnauthorized(err) || apierrors.IsInvalid(err):
			return fmt.Errorf("bind %s in the tenant cluster: %w", g, err)
		default:
			return fmt.Errorf("bind %s in the tenant cluster at %s: %v: %w", g, addr, err, ErrNotReady)
		}
		if err := bindingInEffect(ctx, tenant, g); err != nil {
			return err
		}
	}
	return nil
}

// bindingInEffect waits until the tenant API server's authorizer, which
// reads ClusterRoleBindings from a watch, applies the binding of group
// role: a credential handed out before then would be refused its first
// requests. Every one of Roles may list pods in every namespace.
func bindingInEffect(ctx context.Context, tenant kubernetes.Interface, role string) error {
	inEffect := func(ctx context.Context) (bool, error) {
		rev, err := tenant.AuthorizationV1().SubjectAccessReviews().Create(ctx, &authzv1.SubjectAccessReview{Spec: authzv1.SubjectAccessReviewSpec{
			User:               "flexplane:binding-check",
			Groups:             []string{role},
			ResourceAttributes: &authzv1.ResourceAttributes{Verb: "list", Resource: "pods"},
		}}, metav1.CreateOptions{})
		if err != nil {
			return false, err
		}
		return rev.Status.Allowed, nil
	}
	if timedOut, err := awaitAllowed(ctx, inEffect); timedOut {
		return fmt.Errorf("bind %s in the tenant cluster: not in effect after %s: %w", role, grantWait, ErrNotReady)
	} else if err != nil {
		return fmt.Errorf("bind %s in the tenant cluster: %w", role, err)
	}
	return nil
}

// tenantClient is a client of the tenant cluster of ns with its admin
// kubeconfig (<cluster>-kubeconfig), pointed at Config.TenantAddress, and
// that address.
func (m *Manager) tenantClient(ctx context.Context, ns string, cl cluster) (kubernetes.Interface, string, error) {
	sec, err := m.client.CoreV1().Secrets(ns).Get(ctx, kubeconfigSecret(cl.name), metav1.GetOptions{})
	if err != nil {
		return nil, "", notFound(err)
	}
	rc, err := clientcmd.RESTConfigFromKubeConfig(sec.Data["value"])
	if err != nil {
		return nil, "", fmt.Errorf("admin kubeconfig: %w", err)
	}
	addr := serviceAddress(ns, cl.name, cl.endpoint)
	if m.cfg.TenantAddress != nil {
		addr = m.cfg.TenantAddress(ns, cl.name)
	}
	rc.Host = "https://" + addr
	if host, _, err := net.SplitHostPort(addr); err == nil && net.ParseIP(host) == nil {
		rc.ServerName = host
	}
	rc.Timeout = 15 * time.Second
	tenant, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return nil, "", err
	}
	return tenant, addr, nil
}

// Delete removes the control plane of namespace: the release (its
// workloads and Services), the etcd volumes, the Secrets and the
// namespace (not with a Config.NamespaceRole: then the namespace is its
// owner's to delete). A namespace without a control plane is no error (Delete can be
// repeated); a namespace the Manager did not create is never touched.
func (m *Manager) Delete(ctx context.Context, namespace string) error {
	cl, err := m.lookup(ctx, namespace)
	if err != nil {
		if isNotFound(err) {
			return nil
		}
		return fmt.Errorf("controlplane: delete: %w", err)
	}
	if err := m.uninstall(namespace, cl.name); err != nil {
		return fmt.Errorf("controlplane: delete %s: uninstall: %w", namespace, err)
	}
	core := m.client.CoreV1()
	all := metav1.ListOptions{}
	if err := core.PersistentVolumeClaims(namespace).DeleteCollection(ctx, metav1.DeleteOptions{}, all); err != nil {
		return fmt.Errorf("controlplane: delete %s: volumes: %w", namespace, err)
	}
	if err := core.Secrets(namespace).DeleteCollection(ctx, metav1.DeleteOptions{},
		metav1.ListOptions{LabelSelector: LabelManaged + "=" + ManagedBy}); err != nil {
		return fmt.Errorf("controlplane: delete %s: secrets: %w", namespace, err)
	}
	if m.cfg.NamespaceRole != "" {
		// The namespace's RoleBinding is what lets the orchestrator
		// finish the objects still in it (their finalizers): the namespace
		// is its owner's to delete (Config.NamespaceRole).
		m.log.Info("control plane deleted", "namespace", namespace, "cluster", cl.name)
		return nil
	}
	if err := core.Namespaces().Delete(ctx, namespace, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("controlplane: delete %s: namespace: %w", namespace, err)
	}
	m.log.Info("control plane deleted", "namespace", namespace, "cluster", cl.name)
	return nil
}
