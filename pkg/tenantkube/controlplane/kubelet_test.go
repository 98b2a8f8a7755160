package controlplane

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"log/slog"
	"net"
	"net/netip"
	"testing"
	"time"

	certv1 "k8s.io/api/certificates/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/flexplane/flexplane/pkg/dev/poll"
)

// csrCase is one certificate signing request and the decision it gets.
type csrCase struct {
	name      string
	requester string // user name of the request
	groups    []string
	signer    string
	cn        string
	orgs      []string
	dns       []string
	ips       []string
	usages    []certv1.KeyUsage
	want      certv1.RequestConditionType // "" when left undecided
}

// node is a kubelet serving request of node requester, named name.
func node(name, requester string, ips ...string) csrCase {
	return csrCase{name: name, requester: "system:node:" + requester, groups: []string{"system:nodes", "system:authenticated"},
		signer: certv1.KubeletServingSignerName, cn: "system:node:" + requester, orgs: []string{"system:nodes"},
		dns: []string{requester}, ips: ips,
		usages: []certv1.KeyUsage{certv1.UsageDigitalSignature, certv1.UsageKeyEncipherment, certv1.UsageServerAuth}}
}

func csrPEM(t *testing.T, c csrCase) []byte {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.CertificateRequest{Subject: pkix.Name{CommonName: c.cn, Organization: c.orgs}, DNSNames: c.dns}
	for _, ip := range c.ips {
		tmpl.IPAddresses = append(tmpl.IPAddresses, net.ParseIP(ip))
	}
	der, err := x509.CreateCertificateRequest(rand.Reader, tmpl, k)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der})
}

// TestKubeletServingApproval: in a real API server, the approver approves
// a node's kubelet serving request for its own name and addresses inside
// the cluster's network, and denies every other kubelet serving request:
// an address outside the network (the management side's among them),
// another node's name, someone else's request, a client usage; it leaves
// requests of other signers alone.
func TestKubeletServingApproval(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	admin, err := kubernetes.NewForConfig(kube.RESTConfig())
	if err != nil {
		t.Fatal(err)
	}
	// Nodes and mallory may ask for certificates, as nodes can in a
	// cluster (kubeadm binds the same role to its bootstrap tokens).
	crb := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "csr-approval-test-requesters"},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.GroupKind, APIGroup: rbacv1.GroupName, Name: "system:nodes"},
			{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: "mallory"}},
		RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "system:node-bootstrapper"}}
	if _, err := admin.RbacV1().ClusterRoleBindings().Create(ctx, crb, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = admin.RbacV1().ClusterRoleBindings().Delete(context.WithoutCancel(ctx), crb.Name, metav1.DeleteOptions{})
	})

	cases := []csrCase{
		node("good", "w1", "10.20.0.5"),
		node("outside", "w1", "10.20.0.5", "192.168.7.1"),
		node("management", "w1", "127.0.0.1"),
		node("no-address", "w1"),
		func() csrCase { c := node("other-name", "w1", "10.20.0.5"); c.dns = []string{"w1", "w2"}; return c }(),
		func() csrCase { c := node("other-subject", "w1", "10.20.0.5"); c.cn = "system:node:w2"; return c }(),
		func() csrCase {
			c := node("not-a-node", "w1", "10.20.0.5")
			c.requester, c.groups = "mallory", []string{"system:authenticated"}
			return c
		}(),
		func() csrCase {
			c := node("client-usage", "w1", "10.20.0.5")
			c.usages = append(c.usages, certv1.UsageClientAuth)
			return c
		}(),
		func() csrCase {
			c := node("client-signer", "w1")
			c.signer, c.dns, c.usages = certv1.KubeAPIServerClientKubeletSignerName, nil,
				[]certv1.KeyUsage{certv1.UsageDigitalSignature, certv1.UsageKeyEncipherment, certv1.UsageClientAuth}
			return c
		}(),
	}
	cases[0].want = certv1.CertificateApproved
	for i := 1; i < len(cases)-1; i++ {
		cases[i].want = certv1.CertificateDenied
	}
	for _, c := range cases {
		rc := kube.RESTConfig()
		rc.Impersonate = rest.ImpersonationConfig{UserName: c.requester, Groups: c.groups}
		as, err := kubernetes.NewForConfig(rc)
		if err != nil {
			t.Fatal(err)
		}
		csr := &certv1.CertificateSigningRequest{ObjectMeta: metav1.ObjectMeta{Name: "approval-" + c.name},
			Spec: certv1.CertificateSigningRequestSpec{Request: csrPEM(t, c), SignerName: c.signer, Usages: c.usages}}
		// The API server's RBAC authorizer learns the binding above from
		// its informer: a request right after it may still be forbidden.
		poll.Until(t, 30*time.Second, c.name+"'s request created", func() error {
			_, err := as.CertificatesV1().CertificateSigningRequests().Create(ctx, csr, metav1.CreateOptions{})
			if err != nil && !apierrors.IsForbidden(err) {
				t.Fatalf("%s: %v", c.name, err)
			}
			return err
		})
		t.Cleanup(func() {
			_ = admin.CertificatesV1().CertificateSigningRequests().Delete(context.WithoutCancel(ctx), csr.Name, metav1.DeleteOptions{})
		})
	}

	nets := []netip.Prefix{netip.MustParsePrefix("10.20.0.0/24")}
	if err := DecideKubeletServing(ctx, admin, nets, slog.New(slog.DiscardHandler)); err != nil {
		t.Fatal(err)
	}
	for _, c := range cases {
		got, err := admin.CertificatesV1().CertificateSigningRequests().Get(ctx, "approval-"+c.name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		var decision certv1.RequestConditionType
		for _, cond := range got.Status.Conditions {
			decision = cond.Type
		}
		if decision != c.want {
			t.Errorf("%s: %q (%+v), want %q", c.name, decision, got.Status.Conditions, c.want)
		}
	}
	// Decided requests are not decided again.
	if err := DecideKubeletServing(ctx, admin, nil, slog.New(slog.DiscardHandler)); err != nil {
		t.Fatal(err)
	}
	got, err := admin.CertificatesV1().CertificateSigningRequests().Get(ctx, "approval-good", metav1.GetOptions{})
	if err != nil || len(got.Status.Conditions) != 1 {
		t.Errorf("the approved request after a second pass: %+v, %v", got.Status.Conditions, err)
	}
}
