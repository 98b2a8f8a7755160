package controlplane

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	authnv1 "k8s.io/api/authentication/v1"
	authzv1 "k8s.io/api/authorization/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
)

// grantWait bounds how long Grant waits for the API server's authorizer
// to apply a RoleBinding it made.
const grantWait = 30 * time.Second

func grant(ctx context.Context, kube kubernetes.Interface, ns, role, user string) error {
	subject := rbacv1.Subject{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: user}
	if rest, ok := strings.CutPrefix(user, "system:serviceaccount:"); ok {
		if saNS, saName, ok := strings.Cut(rest, ":"); ok {
			subject = rbacv1.Subject{Kind: rbacv1.ServiceAccountKind, Namespace: saNS, Name: saName}
		}
	}
	rb := &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: role, Namespace: ns, Labels: map[string]string{LabelManaged: ManagedBy}},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role},
		Subjects:   []rbacv1.Subject{subject},
	}
	_, err := kube.RbacV1().RoleBindings(ns).Create(ctx, rb, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("grant %s: %w", ns, err)
	}
	// The authorizer reads RoleBindings from a watch: wait for it, asking
	// for one of the rights the binding gives.
	inEffect := func(ctx context.Context) (bool, error) {
		rev, err := kube.AuthorizationV1().SelfSubjectAccessReviews().Create(ctx, &authzv1.SelfSubjectAccessReview{Spec: authzv1.SelfSubjectAccessReviewSpec{
			ResourceAttributes: &authzv1.ResourceAttributes{Namespace: ns, Verb: "create", Resource: "secrets"},
		}}, metav1.CreateOptions{})
		if err != nil {
			return false, err
		}
		return rev.Status.Allowed, nil
	}
	if timedOut, err := awaitAllowed(ctx, inEffect); timedOut {
		return fmt.Errorf("grant %s: the RoleBinding to %s is not in effect after %s", ns, role, grantWait)
	} else if err != nil {
		return fmt.Errorf("grant %s: %w", ns, err)
	}
	return nil
}

// awaitAllowed polls allowed, an access review of a binding just made,
// for up to grantWait: API servers' authorizers read bindings from a
// watch. timedOut says the review never allowed it in that time.
func awaitAllowed(ctx context.Context, allowed func(context.Context) (bool, error)) (timedOut bool, err error) {
	err = wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, grantWait, true, allowed)
	if err != nil && wait.Interrupted(err) && ctx.Err() == nil {
		return true, err
	}
	return false, err
}

// whoami caches the Manager's user name (SelfSubjectReview).
type whoami struct {
	mu   sync.Mutex
	user string
}

// Grant gives the Manager's identity (the orchestrator's service account)
// its rights in namespace ns, one of the clusters' namespaces: a
// RoleBinding, named as Config.NamespaceRole, of that ClusterRole
// (charts/flexplane's <fullname>-controlplane, which holds every right the
// orchestrator uses in a cluster's namespace and is bound nowhere else). A
// binding that exists is left alone; a new one is waited for until the
// authorizer applies it, so that what comes next in ns is allowed. The
// chart lets the orchestrator create such a RoleBinding (the bind verb on
// that one ClusterRole) only in namespaces labelled
// LabelManaged=ManagedBy. Without a NamespaceRole Grant does nothing (the
// Manager's identity has its rights cluster-wide).
func (m *Manager) Grant(ctx context.Context, ns string) error {
	if m.cfg.NamespaceRole == "" {
		return nil
	}
	m.who.mu.Lock()
	user := m.who.user
	m.who.mu.Unlock()
	if user == "" {
		who, err := m.client.AuthenticationV1().SelfSubjectReviews().Create(ctx, &authnv1.SelfSubjectReview{}, metav1.CreateOptions{})
		if err != nil {
			return fmt.Errorf("grant %s: who am I: %w", ns, err)
		}
		user = who.Status.UserInfo.Username
		m.who.mu.Lock()
		m.who.user = user
		m.who.mu.Unlock()
	}
	return grant(ctx, m.client, ns, m.cfg.NamespaceRole, user)
}

// GrantAll is Grant for every namespace labelled LabelManaged=ManagedBy
// and not being deleted: the namespaces made before the orchestrator's
// rights were scoped to them get their RoleBinding when it starts.
func (m *Manager) GrantAll(ctx context.Context) error {
	if m.cfg.NamespaceRole == "" {
		return nil
	}
	nss, err := m.client.CoreV1().Namespaces().List(ctx, metav1.ListOptions{LabelSelector: LabelManaged + "=" + ManagedBy})
	if err != nil {
		return fmt.Errorf("controlplane: grant: %w", err)
	}
	for _, ns := range nss.Items {
		if ns.DeletionTimestamp != nil {
			continue
		}
		if err := m.Grant(ctx, ns.Name); err != nil {
			return fmt.Errorf("controlplane: %w", err)
		}
	}
	return nil
}
