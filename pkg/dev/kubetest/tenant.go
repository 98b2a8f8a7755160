package kubetest

import (
	"context"
	"crypto/x509"
	"encoding/pem"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// NamespaceNames lists the names of the namespaces c sees: what a tenant
// cluster's credential is first tried with.
func NamespaceNames(ctx context.Context, c kubernetes.Interface) ([]string, error) {
	list, err := c.CoreV1().Namespaces().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	names := make([]string, 0, len(list.Items))
	for _, n := range list.Items {
		names = append(names, n.Name)
	}
	return names, nil
}

// ClientCertificate parses the client certificate of a kubeconfig (its
// PEM, as rest.Config.CertData holds it), failing t when there is none.
func ClientCertificate(t testing.TB, certPEM []byte) *x509.Certificate {
	t.Helper()
	b, _ := pem.Decode(certPEM)
	if b == nil {
		t.Fatal("the kubeconfig has no client certificate")
	}
	crt, err := x509.ParseCertificate(b.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return crt
}
