package controlplane

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// Names of a cluster's Secrets: Cluster API's (<cluster>-ca, -etcd, -sa,
// -proxy with tls.crt and tls.key, -kubeconfig with value) and the
// control plane's own leaf certificates.
func caSecret(cluster string) string         { return cluster + "-ca" }
func etcdSecret(cluster string) string       { return cluster + "-etcd" }
func saSecret(cluster string) string         { return cluster + "-sa" }
func proxySecret(cluster string) string      { return cluster + "-proxy" }
func kubeconfigSecret(cluster string) string { return cluster + "-kubeconfig" }
func certsSecret(cluster string) string      { return cluster + "-flexkube-certs" }

// ensureNamespace creates s.Namespace labelled for s.Cluster, or checks that
// the one there is.
func (m *Manager) ensureNamespace(ctx context.Context, s Spec) error {
	want := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{
		Name:        s.Namespace,
		Labels:      map[string]string{LabelCluster: s.Cluster, LabelVDC: s.VDC, LabelManaged: ManagedBy},
		Annotations: map[string]string{annotationEndpoint: s.Endpoint},
	}}
	ns, err := m.client.CoreV1().Namespaces().Create(ctx, want, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		ns, err = m.client.CoreV1().Namespaces().Get(ctx, s.Namespace, metav1.GetOptions{})
	}
	if err != nil {
		return fmt.Errorf("namespace: %w", err)
	}
	if ns.DeletionTimestamp != nil {
		return fmt.Errorf("namespace %s is being deleted: %w", s.Namespace, ErrConflict)
	}
	if ns.Labels[LabelManaged] != ManagedBy || ns.Labels[LabelCluster] != s.Cluster || ns.Labels[LabelVDC] != s.VDC {
		return fmt.Errorf("namespace %s belongs to another cluster: %w", s.Namespace, ErrConflict)
	}
	if ns.Annotations[annotationEndpoint] != s.Endpoint {
		if ns.Annotations == nil {
			ns.Annotations = map[string]string{}
		}
		ns.Annotations[annotationEndpoint] = s.Endpoint
		if _, err := m.client.CoreV1().Namespaces().Update(ctx, ns, metav1.UpdateOptions{}); err != nil {
			return fmt.Errorf("namespace: %w", err)
		}
	}
	return nil
}

// cluster is what the namespace of a control plane says about it.
type cluster struct {
	name, endpoint string
}

// lookup reads the cluster of namespace ns; ErrNotFound when there is none.
func (m *Manager) lookup(ctx context.Context, ns string) (cluster, error) {
	n, err := m.client.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{})
	if apierrors.IsNotFound(err) || (err == nil && n.Labels[LabelManaged] != ManagedBy) {
		return cluster{}, fmt.Errorf("namespace %s: %w", ns, ErrNotFound)
	}
	if err != nil {
		return cluster{}, err
	}
	return cluster{name: n.Labels[LabelCluster], endpoint: n.Annotations[annotationEndpoint]}, nil
}

// secret returns the data of Secret name of s, creating it with gen when
// it does not exist. A Secret that exists is never changed: that is what
// keeps the PKI across upgrades (and across Managers racing on one
// cluster: the one whose Create loses reads the winner's).
func (m *Manager) secret(ctx context.Context, s Spec, name string, gen func() (map[string][]byte, error)) (map[string][]byte, error) {
	secrets := m.client.CoreV1().Secrets(s.Namespace)
	got, err := secrets.Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		data, gerr := gen()
		if gerr != nil {
			return nil, fmt.Errorf("%s: %w", name, gerr)
		}
		got, err = secrets.Create(ctx, &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{LabelCluster: s.Cluster, LabelManaged: ManagedBy}},
			Type:       secretType,
			Data:       data,
		}, metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(err) {
			got, err = secrets.Get(ctx, name, metav1.GetOptions{})
		}
	}
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	if got.Labels[LabelCluster] != s.Cluster {
		return nil, fmt.Errorf("secret %s belongs to another cluster: %w", name, ErrConflict)
	}
	return got.Data, nil
}

// authoritySecret returns the authority kept in Secret name, creating it.
func (m *Manager) authoritySecret(ctx context.Context, s Spec, name, cn string) (*authority, error) {
	data, err := m.secret(ctx, s, name, func() (map[string][]byte, error) {
		a, err := newAuthority(cn, time.Now())
		if err != nil {
			return nil, err
		}
		return map[string][]byte{corev1.TLSCertKey: a.certPEM, corev1.TLSPrivateKeyKey: a.keyPEM}, nil
	})
	if err != nil {
		return nil, err
	}
	a, err := parseAuthority(data[corev1.TLSCertKey], data[corev1.TLSPrivateKeyKey])
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	return a, nil
}

// ensurePKI creates the Secrets of s that are missing.
func (m *Manager) ensurePKI(ctx context.Context, s Spec, endpointHost string) error {
	ca, err := m.authoritySecret(ctx, s, caSecret(s.Cluster), "kubernetes")
	if err != nil {
		return err
	}
	etcdCA, err := m.authoritySecret(ctx, s, etcdSecret(s.Cluster), "etcd-ca")
	if err != nil {
		return err
	}
	proxyCA, err := m.authoritySecret(ctx, s, proxySecret(s.Cluster), "front-proxy-ca")
	if err != nil {
		return err
	}
	if _, err := m.secret(ctx, s, saSecret(s.Cluster), func() (map[string][]byte, error) {
		pub, priv, err := serviceAccountKey()
		return map[string][]byte{corev1.TLSCertKey: pub, corev1.TLSPrivateKeyKey: priv}, err
	}); err != nil {
		return err
	}
	if _, err := m.secret(ctx, s, certsSecret(s.Cluster), func() (map[string][]byte, error) {
		return leafCerts(s, endpointHost, ca, etcdCA, proxyCA)
	}); err != nil {
		return err
	}
	_, err = m.secret(ctx, s, kubeconfigSecret(s.Cluster), func() (map[string][]byte, error) {
		crt, key, err := ca.issue(leaf{cn: "kubernetes-admin", orgs: []string{"system:masters"}, client: true, lifetime: leafLifetime}, time.Now())
		if err != nil {
			return nil, err
		}
		// Cluster API's controllers, in the management cluster, reach the
		// API server at its Service there, not at the workers' endpoint.
		kc, err := kubeconfig(s.Cluster, "kubernetes-admin", serviceAddress(s.Namespace, s.Cluster, s.Endpoint), ca.certPEM, crt, key)
		return map[string][]byte{"value": kc}, err
	})
	return err
}

// leafCerts issues the control plane's own certificates, keyed by file
// name as the chart mounts them.
func leafCerts(s Spec, endpointHost string, ca, etcdCA, proxyCA *authority) (map[string][]byte, error) {
	svc := s.Cluster + "-apiserver"
	apiDNS := []string{"kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc.cluster.local",
		svc, svc + "." + s.Namespace, svc + "." + s.Namespace + ".svc", svc + "." + s.Namespace + ".svc.cluster.local", "localhost"}
	apiIPs := []net.IP{net.IPv4(127, 0, 0, 1)}
	if p, err := netip.ParsePrefix(s.ServiceCIDR); err == nil {
		apiIPs = append(apiIPs, net.IP(p.Addr().Next().AsSlice()))
	}
	if ip := net.ParseIP(endpointHost); ip != nil {
		apiIPs = append(apiIPs, ip)
	} else {
		apiDNS = append(apiDNS, endpointHost)
	}
	etcdSvc := s.Cluster + "-etcd"
	etcdDNS := []string{etcdSvc, etcdSvc + "." + s.Namespace + ".svc", "*." + etcdSvc + "." + s.Namespace + ".svc", "localhost"}
	certs := []struct {
		file string
		by   *authority
		leaf leaf
	}{
		{"apiserver", ca, leaf{cn: "kube-apiserver", dns: apiDNS, ips: apiIPs, server: true}},
		{"apiserver-kubelet-client", ca, leaf{cn: "kube-apiserver-kubelet-client", orgs: []string{"system:masters"}, client: true}},
		{"controller-manager", ca, leaf{cn: "system:kube-controller-manager", client: true}},
		{"scheduler", ca, leaf{cn: "system:kube-scheduler", client: true}},
		{"front-proxy-client", proxyCA, leaf{cn: "front-proxy-client", client: true}},
		{"apiserver-etcd-client", etcdCA, leaf{cn: "kube-apiserver-etcd-client", client: true}},
		{"etcd-server", etcdCA, leaf{cn: etcdSvc, dns: etcdDNS, ips: []net.IP{net.IPv4(127, 0, 0, 1)}, server: true, client: true}},
	}
	out := map[string][]byte{}
	now := time.Now()
	for _, c := range certs {
		c.leaf.lifetime = leafLifetime
		crt, key, err := c.by.issue(c.leaf, now)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", c.file, err)
		}
		out[c.file+".crt"], out[c.file+".key"] = crt, key
	}
	return out, nil
}

// kubeconfig returns a kubeconfig for server https://endpoint
// authenticating with a client certificate.
func kubeconfig(clusterName, user, endpoint string, caPEM, crt, key []byte) ([]byte, error) {
	c := clientcmdapi.NewConfig()
	c.Clusters[clusterName] = &clientcmdapi.Cluster{Server: "https://" + endpoint, CertificateAuthorityData: caPEM}
	c.AuthInfos[user] = &clientcmdapi.AuthInfo{ClientCertificateData: crt, ClientKeyData: key}
	ctxName := user + "@" + clusterName
	c.Contexts[ctxName] = &clientcmdapi.Context{Cluster: clusterName, AuthInfo: user}
	c.CurrentContext = ctxName
	return clientcmd.Write(*c)
}
