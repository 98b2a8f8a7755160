package controlplane

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"maps"
	"net"
	"net/netip"
	"slices"
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
	if err := m.Grant(ctx, s.Namespace); err != nil {
		return fmt.Errorf("namespace: %w", err)
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

// secret returns Secret name of s, creating it with gen's data when it
// does not exist. A Secret that exists is not changed here: that is what
// keeps the PKI across upgrades (and across Managers racing on one
// cluster: the one whose Create loses reads the winner's).
func (m *Manager) secret(ctx context.Context, s Spec, name string, gen func() (map[string][]byte, error)) (*corev1.Secret, error) {
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
	return got, nil
}

// renewedSecret is secret, and then replaces the Secret's data by gen's
// when stale says why it no longer does (an empty reason: it does). The
// replacement is conditional on the Secret's resourceVersion: of two
// Managers renewing at once one wins, and the other reads what it wrote.
func (m *Manager) renewedSecret(ctx context.Context, s Spec, name string, gen func() (map[string][]byte, error),
	stale func(map[string][]byte) string) (map[string][]byte, error) {
	got, err := m.secret(ctx, s, name, gen)
	if err != nil {
		return nil, err
	}
	reason := stale(got.Data)
	if reason == "" {
		return got.Data, nil
	}
	data, err := gen()
	if err != nil {
		return nil, fmt.Errorf("%s: renew: %w", name, err)
	}
	renewed := got.DeepCopy()
	renewed.Data = data
	secrets := m.client.CoreV1().Secrets(s.Namespace)
	renewed, err = secrets.Update(ctx, renewed, metav1.UpdateOptions{})
	if apierrors.IsConflict(err) {
		winner, gerr := secrets.Get(ctx, name, metav1.GetOptions{})
		if gerr != nil {
			return nil, fmt.Errorf("%s: renew: %w", name, gerr)
		}
		if r := stale(winner.Data); r != "" || winner.Labels[LabelCluster] != s.Cluster {
			return nil, fmt.Errorf("%s: renew: changed meanwhile: %w", name, err)
		}
		return winner.Data, nil
	}
	if err != nil {
		return nil, fmt.Errorf("%s: renew: %w", name, err)
	}
	m.log.Info("certificates renewed", "namespace", s.Namespace, "cluster", s.Cluster, "secret", name, "reason", reason)
	return renewed.Data, nil
}

// authoritySecret returns the authority kept in Secret name, creating it.
func (m *Manager) authoritySecret(ctx context.Context, s Spec, name, cn string) (*authority, error) {
	sec, err := m.secret(ctx, s, name, func() (map[string][]byte, error) {
		a, err := newAuthority(cn, m.cfg.Now())
		if err != nil {
			return nil, err
		}
		return map[string][]byte{corev1.TLSCertKey: a.certPEM, corev1.TLSPrivateKeyKey: a.keyPEM}, nil
	})
	if err != nil {
		return nil, err
	}
	a, err := parseAuthority(sec.Data[corev1.TLSCertKey], sec.Data[corev1.TLSPrivateKeyKey])
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	return a, nil
}

// adminLeaf is the certificate of the admin kubeconfig.
var adminLeaf = leaf{cn: "kubernetes-admin", orgs: []string{"system:masters"}, client: true, lifetime: leafLifetime}

// ensurePKI creates the Secrets of s that are missing, and renews the
// leaf certificates and the admin kubeconfig when they need it (see
// renewal; the authorities and the service-account key are never
// rotated). It returns the digest of the leaf certificates (pkiRevision).
func (m *Manager) ensurePKI(ctx context.Context, s Spec, endpointHost string) (string, error) {
	ca, err := m.authoritySecret(ctx, s, caSecret(s.Cluster), "kubernetes")
	if err != nil {
		return "", err
	}
	etcdCA, err := m.authoritySecret(ctx, s, etcdSecret(s.Cluster), "etcd-ca")
	if err != nil {
		return "", err
	}
	proxyCA, err := m.authoritySecret(ctx, s, proxySecret(s.Cluster), "front-proxy-ca")
	if err != nil {
		return "", err
	}
	if _, err := m.secret(ctx, s, saSecret(s.Cluster), func() (map[string][]byte, error) {
		pub, priv, err := serviceAccountKey()
		return map[string][]byte{corev1.TLSCertKey: pub, corev1.TLSPrivateKeyKey: priv}, err
	}); err != nil {
		return "", err
	}
	leaves := leafCerts(s, endpointHost, ca, etcdCA, proxyCA)
	certs, err := m.renewedSecret(ctx, s, certsSecret(s.Cluster),
		func() (map[string][]byte, error) { return issueLeaves(leaves, m.cfg.Now()) },
		func(data map[string][]byte) string { return staleLeaves(data, leaves, m.cfg.Now()) })
	if err != nil {
		return "", err
	}
	_, err = m.renewedSecret(ctx, s, kubeconfigSecret(s.Cluster), func() (map[string][]byte, error) {
		crt, key, err := ca.issue(adminLeaf, m.cfg.Now())
		if err != nil {
			return nil, err
		}
		// Cluster API's controllers, in the management cluster, reach the
		// API server at its Service there, not at the workers' endpoint.
		kc, err := kubeconfig(s.Cluster, adminLeaf.cn, serviceAddress(s.Namespace, s.Cluster, s.Endpoint), ca.certPEM, crt, key)
		return map[string][]byte{"value": kc}, err
	}, func(data map[string][]byte) string {
		return staleKubeconfig(data["value"], serviceAddress(s.Namespace, s.Cluster, s.Endpoint), ca, m.cfg.Now())
	})
	if err != nil {
		return "", err
	}
	return pkiRevision(certs), nil
}

// leafCert is one of the control plane's own certificates: its file name
// (without .crt or .key, as the chart mounts it), the authority that signs
// it and what it says.
type leafCert struct {
	file string
	by   *authority
	leaf leaf
}

// leafCerts are the control plane's own certificates of s, kept in
// <cluster>-flexkube-certs.
func leafCerts(s Spec, endpointHost string, ca, etcdCA, proxyCA *authority) []leafCert {
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
	certs := []leafCert{
		{"apiserver", ca, leaf{cn: "kube-apiserver", dns: apiDNS, ips: apiIPs, server: true}},
		{"apiserver-kubelet-client", ca, leaf{cn: "kube-apiserver-kubelet-client", orgs: []string{"system:masters"}, client: true}},
		{"controller-manager", ca, leaf{cn: "system:kube-controller-manager", client: true}},
		{"scheduler", ca, leaf{cn: "system:kube-scheduler", client: true}},
		{"front-proxy-client", proxyCA, leaf{cn: "front-proxy-client", client: true}},
		{"apiserver-etcd-client", etcdCA, leaf{cn: "kube-apiserver-etcd-client", client: true}},
		{"etcd-server", etcdCA, leaf{cn: etcdSvc, dns: etcdDNS, ips: []net.IP{net.IPv4(127, 0, 0, 1)}, server: true, client: true}},
	}
	for i := range certs {
		certs[i].leaf.lifetime = leafLifetime
	}
	return certs
}

// issueLeaves issues certs, keyed by file name as the chart mounts them.
func issueLeaves(certs []leafCert, now time.Time) (map[string][]byte, error) {
	out := map[string][]byte{}
	for _, c := range certs {
		crt, key, err := c.by.issue(c.leaf, now)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", c.file, err)
		}
		out[c.file+".crt"], out[c.file+".key"] = crt, key
	}
	return out, nil
}

// staleLeaves says why data, a <cluster>-flexkube-certs Secret's, no
// longer holds certs (renewal); empty when it does.
func staleLeaves(data map[string][]byte, certs []leafCert, now time.Time) string {
	for _, c := range certs {
		if len(data[c.file+".key"]) == 0 {
			return c.file + ".key: missing"
		}
		crt, err := parseCertPEM(data[c.file+".crt"])
		if err != nil {
			return c.file + ".crt: " + err.Error()
		}
		if r := renewal(crt, c.by, c.leaf, now); r != "" {
			return c.file + ".crt: " + r
		}
	}
	return ""
}

// staleKubeconfig says why kc, the admin kubeconfig, needs to be issued
// anew (renewal, or it is not for https://endpoint); empty when it does
// not.
func staleKubeconfig(kc []byte, endpoint string, ca *authority, now time.Time) string {
	c, err := clientcmd.Load(kc)
	if err != nil {
		return err.Error()
	}
	ctx := c.Contexts[c.CurrentContext]
	if ctx == nil || c.Clusters[ctx.Cluster] == nil || c.AuthInfos[ctx.AuthInfo] == nil {
		return "no current context"
	}
	if server := c.Clusters[ctx.Cluster].Server; server != "https://"+endpoint {
		return fmt.Sprintf("server %s, not https://%s", server, endpoint)
	}
	if !bytes.Equal(c.Clusters[ctx.Cluster].CertificateAuthorityData, ca.certPEM) {
		return "another certificate authority"
	}
	crt, err := parseCertPEM(c.AuthInfos[ctx.AuthInfo].ClientCertificateData)
	if err != nil {
		return "client certificate: " + err.Error()
	}
	if r := renewal(crt, ca, adminLeaf, now); r != "" {
		return "client certificate: " + r
	}
	return ""
}

// pkiRevision is a digest of the data of <cluster>-flexkube-certs: in the
// pods' annotations (chart value pki.revision), it changes with every
// renewal and so rolls them onto the new certificates.
func pkiRevision(data map[string][]byte) string {
	h := sha256.New()
	for _, k := range slices.Sorted(maps.Keys(data)) {
		fmt.Fprintf(h, "%s %d\n", k, len(data[k]))
		h.Write(data[k])
	}
	return hex.EncodeToString(h.Sum(nil))[:32]
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
