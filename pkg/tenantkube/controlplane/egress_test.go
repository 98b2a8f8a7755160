package controlplane

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	admissionregv1 "k8s.io/api/admissionregistration/v1"
	certv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/ptr"

	"github.com/flexplane/flexplane/pkg/dev/netns"
	"github.com/flexplane/flexplane/pkg/dev/nettest"
	"github.com/flexplane/flexplane/pkg/dev/poll"
)

// vdcAddress stands for an address of a VDC network (vdcNetwork) in this
// package's network namespace (TestMain); netns.Address, on the same lo,
// stands for a management-side address that is not a loopback one (the
// API server refuses to proxy to loopback addresses by itself).
const (
	vdcAddress = "198.18.1.1"
	vdcNetwork = "198.18.1.0/24"
)

// countConns counts the connections to a listener at host.
func countConns(t *testing.T, host string) *nettest.Counter {
	return nettest.CountConns(t, net.JoinHostPort(host, "0"), false)
}

// kubeletAt serves HTTPS at host as a kubelet would, with a certificate
// for host issued by a (the cluster's CA, or another), and counts the
// requests it answers.
func kubeletAt(t *testing.T, host string, a *authority) (port int, requests *atomic.Int32) {
	t.Helper()
	crt, key, err := a.issue(leaf{cn: "system:node:worker", ips: []net.IP{net.ParseIP(host)}, server: true, lifetime: time.Hour}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	pair, err := tls.X509KeyPair(crt, key)
	if err != nil {
		t.Fatal(err)
	}
	l, err := tls.Listen("tcp", net.JoinHostPort(host, "0"), &tls.Config{Certificates: []tls.Certificate{pair}})
	if err != nil {
		t.Fatal(err)
	}
	requests = new(atomic.Int32)
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		requests.Add(1)
		fmt.Fprint(w, "kubelet in the VDC")
	}), ReadHeaderTimeout: 10 * time.Second, ErrorLog: nil}
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(func() { srv.Close() })
	return l.Addr().(*net.TCPAddr).Port, requests
}

// fakeNode registers a Node whose kubelet is at ip:port, as a tenant who
// is cluster-admin can.
func fakeNode(t *testing.T, c kubernetes.Interface, name, ip string, port int) {
	t.Helper()
	ctx := t.Context()
	n, err := c.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	n.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: ip}}
	n.Status.DaemonEndpoints.KubeletEndpoint.Port = int32(port)
	if _, err := c.CoreV1().Nodes().UpdateStatus(ctx, n, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// nodeProxy GETs nodes/<name>/proxy/ of the tenant cluster.
func nodeProxy(t *testing.T, c kubernetes.Interface, name string) (string, error) {
	t.Helper()
	b, err := c.CoreV1().RESTClient().Get().AbsPath("/api/v1/nodes/" + name + "/proxy/").DoRaw(t.Context())
	return string(b), err
}

// TestHostedControlPlaneEgress: a tenant who is cluster-admin on its hosted
// API server cannot make it reach the management side. A Node whose
// kubelet address is a management-side listener: its node proxy is
// refused and the listener sees no connection. A validating webhook whose
// URL is a management-side listener: the listener sees no connection, a
// create goes through with failurePolicy Ignore and is refused with Fail.
// A kubelet inside the cluster's VDC network is reached through the node
// proxy when its serving certificate is the cluster CA's, and not when it
// is another's (--kubelet-certificate-authority).
func TestHostedControlPlaneEgress(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	const ns = "kc-egress"
	s := spec(ns, "egress")
	s.Networks = []string{vdcNetwork}
	m, mgmt, r, _ := runControlPlane(t, s)
	t.Cleanup(func() { _ = m.Delete(context.WithoutCancel(ctx), ns) })
	kc, err := m.Kubeconfig(ctx, ns, Credential{User: "mallory", Groups: []string{"cluster-admin"}, TTL: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	admin, _ := tenantClient(t, kc)

	caSecret, err := mgmt.CoreV1().Secrets(ns).Get(ctx, "egress-ca", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ca, err := parseAuthority(caSecret.Data["tls.crt"], caSecret.Data["tls.key"])
	if err != nil {
		t.Fatal(err)
	}

	t.Run("node proxy to the management side", func(t *testing.T) {
		mgmtSide := countConns(t, netns.Address)
		fakeNode(t, admin, "mgmt", netns.Address, mgmtSide.Port())
		if body, err := nodeProxy(t, admin, "mgmt"); err == nil {
			t.Errorf("node proxy to %s answered %q", mgmtSide.Addr(), body)
		}
		// Another port of the node: the proxy transport, not the kubelet's.
		other := countConns(t, netns.Address)
		b, err := admin.CoreV1().RESTClient().Get().AbsPath("/api/v1/nodes/http:mgmt:" + strconv.Itoa(other.Port()) + "/proxy/").DoRaw(ctx)
		if err == nil {
			t.Errorf("node proxy to port %d answered %q", other.Port(), b)
		}
		if n, o := mgmtSide.Count(), other.Count(); n != 0 || o != 0 {
			t.Errorf("the management-side listeners saw %d and %d connections, want none%s", n, o, r.Tail(5))
		}
	})

	t.Run("node proxy into the VDC network", func(t *testing.T) {
		port, requests := kubeletAt(t, vdcAddress, ca)
		fakeNode(t, admin, "worker", vdcAddress, port)
		poll.Until(t, time.Minute, "the kubelet in the VDC network answers through the node proxy", func() error {
			body, err := nodeProxy(t, admin, "worker")
			if err == nil && body != "kubelet in the VDC" {
				err = fmt.Errorf("answer %q", body)
			}
			return err
		})
		if requests.Load() == 0 {
			t.Error("the kubelet saw no request")
		}

		rogue, err := newAuthority("rogue", time.Now())
		if err != nil {
			t.Fatal(err)
		}
		port, requests = kubeletAt(t, vdcAddress, rogue)
		fakeNode(t, admin, "rogue", vdcAddress, port)
		if body, err := nodeProxy(t, admin, "rogue"); err == nil {
			t.Errorf("a kubelet with another CA's certificate answered %q", body)
		}
		if n := requests.Load(); n != 0 {
			t.Errorf("the kubelet with another CA's certificate got %d requests", n)
		}
	})

	t.Run("a worker's serving certificate", func(t *testing.T) {
		// A worker's kubelet (serverTLSBootstrap) asks for its serving
		// certificate; the Manager approves it, the cluster's controller
		// manager signs it with the CA the API server trusts for kubelets.
		rc, err := clientcmd.RESTConfigFromKubeConfig(kc)
		if err != nil {
			t.Fatal(err)
		}
		rc.Impersonate = rest.ImpersonationConfig{UserName: "system:node:w1", Groups: []string{"system:nodes", "system:authenticated"}}
		asNode, err := kubernetes.NewForConfig(rc)
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range []csrCase{node("w1-serving", "w1", "198.18.1.5"), node("w1-management", "w1", netns.Address)} {
			csr := &certv1.CertificateSigningRequest{ObjectMeta: metav1.ObjectMeta{Name: c.name},
				Spec: certv1.CertificateSigningRequestSpec{Request: csrPEM(t, c), SignerName: c.signer, Usages: c.usages}}
			if _, err := asNode.CertificatesV1().CertificateSigningRequests().Create(ctx, csr, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
		}
		if err := m.ApproveKubeletServing(ctx, ns, s.Networks); err != nil {
			t.Fatal(err)
		}
		var crt *x509.Certificate
		poll.Until(t, time.Minute, "the controller manager signs the approved request", func() error {
			got, err := admin.CertificatesV1().CertificateSigningRequests().Get(ctx, "w1-serving", metav1.GetOptions{})
			if err != nil {
				return err
			}
			if len(got.Status.Certificate) == 0 {
				return fmt.Errorf("not signed: %+v", got.Status.Conditions)
			}
			crt, err = parseCertPEM(got.Status.Certificate)
			return err
		})
		roots := x509.NewCertPool()
		roots.AddCert(ca.cert)
		if _, err := crt.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err != nil ||
			crt.Subject.CommonName != "system:node:w1" || len(crt.IPAddresses) != 1 || crt.IPAddresses[0].String() != "198.18.1.5" {
			t.Errorf("the serving certificate %v %v: %v", crt.Subject, crt.IPAddresses, err)
		}
		got, err := admin.CertificatesV1().CertificateSigningRequests().Get(ctx, "w1-management", metav1.GetOptions{})
		if err != nil || len(got.Status.Conditions) != 1 || got.Status.Conditions[0].Type != certv1.CertificateDenied || len(got.Status.Certificate) != 0 {
			t.Errorf("a request for a management-side address: %+v, %v", got.Status, err)
		}
	})

	t.Run("webhooks to the management side", func(t *testing.T) {
		hook := countConns(t, "127.0.0.1")
		url := fmt.Sprintf("https://127.0.0.1:%d/validate", hook.Port())
		for _, policy := range []admissionregv1.FailurePolicyType{admissionregv1.Ignore, admissionregv1.Fail} {
			name := "egress-" + strings.ToLower(string(policy))
			_, err := admin.AdmissionregistrationV1().ValidatingWebhookConfigurations().Create(ctx, &admissionregv1.ValidatingWebhookConfiguration{
				ObjectMeta: metav1.ObjectMeta{Name: name},
				Webhooks: []admissionregv1.ValidatingWebhook{{
					Name:                    name + ".flexplane.io",
					ClientConfig:            admissionregv1.WebhookClientConfig{URL: &url, CABundle: caSecret.Data["tls.crt"]},
					Rules:                   []admissionregv1.RuleWithOperations{{Operations: []admissionregv1.OperationType{admissionregv1.Create}, Rule: admissionregv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"configmaps"}}}},
					ObjectSelector:          &metav1.LabelSelector{MatchLabels: map[string]string{"egress-test": name}},
					FailurePolicy:           ptr.To(policy),
					SideEffects:             ptr.To(admissionregv1.SideEffectClassNone),
					AdmissionReviewVersions: []string{"v1"},
					TimeoutSeconds:          ptr.To[int32](5),
				}},
			}, metav1.CreateOptions{})
			if err != nil {
				t.Fatal(err)
			}
		}
		cm := func(name, label string) *corev1.ConfigMap {
			return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"egress-test": label}}}
		}
		// The Fail webhook, registered after the Ignore one, refuses once
		// the API server has both.
		i := 0
		poll.Until(t, time.Minute, "a create refused by the Fail webhook", func() error {
			i++
			_, err := admin.CoreV1().ConfigMaps("default").Create(ctx, cm(fmt.Sprintf("fail-%d", i), "egress-fail"), metav1.CreateOptions{})
			if err == nil {
				return fmt.Errorf("create %d went through", i)
			}
			if apierrors.IsInternalError(err) || strings.Contains(err.Error(), "failed calling webhook") {
				return nil
			}
			return fmt.Errorf("create %d: %w", i, err)
		})
		if _, err := admin.CoreV1().ConfigMaps("default").Create(ctx, cm("ignored", "egress-ignore"), metav1.CreateOptions{}); err != nil {
			t.Errorf("create with the Ignore webhook: %v", err)
		}
		if n := hook.Count(); n != 0 {
			t.Errorf("the management-side webhook listener saw %d connections, want none", n)
		}
	})
}
