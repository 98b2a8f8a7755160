package loadbalancer_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/flexplane/flexplane/pkg/catalog"
	"github.com/flexplane/flexplane/pkg/dev/lbtest"
	"github.com/flexplane/flexplane/pkg/loadbalancer"
)

func setup(t *testing.T) (*loadbalancer.Service, *catalog.DirStore) {
	t.Helper()
	s, err := catalog.OpenDir(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	en := &catalog.ExternalNetwork{}
	en.Name, en.Bridge, en.CIDR, en.Gateway, en.PoolStart, en.PoolEnd = "alpha", "vmbr0", "203.0.113.0/24", "203.0.113.1", "203.0.113.10", "203.0.113.11"
	if _, err := catalog.Create(t.Context(), s, en); err != nil {
		t.Fatal(err)
	}
	return &loadbalancer.Service{Store: s, Secrets: s}, s
}

func web() *catalog.LoadBalancer {
	lb := &catalog.LoadBalancer{}
	lb.Name, lb.VDC, lb.Zone = catalog.LoadBalancerName("prod", "web"), "prod", "alpha"
	lb.Pools = []catalog.LBPool{{Name: "app", Backends: []catalog.LBBackend{{VMID: 100, Port: 80}, {VMID: 101, Port: 80}}}}
	lb.Listeners = []catalog.LBListener{{Name: "https", Protocol: catalog.LBProtocolHTTPS, Port: 443, Pool: "app",
		Certificates: []string{"shop"}, ServerNames: []string{"shop.example", "www.shop.example"}}}
	return lb
}

func allocations(t *testing.T, s catalog.Store) int {
	en, err := catalog.Get[*catalog.ExternalNetwork](t.Context(), s, "alpha")
	if err != nil {
		t.Fatal(err)
	}
	return len(en.Status.Allocations)
}

// TestBadInputChangesNothing: a certificate whose key is another's, one that
// does not cover a listener's server name, overlapping listeners, a pool
// no one defined and a port out of range are refused naming the field, and
// leave the pool and the secrets as they were.
func TestBadInputChangesNothing(t *testing.T) {
	t.Parallel()
	svc, s := setup(t)
	cert, key := lbtest.Certificate(t, "shop.example", "*.shop.example")
	_, otherKey := lbtest.Certificate(t, "shop.example")
	narrow, narrowKey := lbtest.Certificate(t, "shop.example")
	good := []loadbalancer.CertificatePEM{{Name: "shop", CertPEM: cert, KeyPEM: key}}
	cases := []struct {
		name  string
		edit  func(*catalog.LoadBalancer)
		certs []loadbalancer.CertificatePEM
		field string
	}{
		{"key of another certificate", nil, []loadbalancer.CertificatePEM{{Name: "shop", CertPEM: cert, KeyPEM: otherKey}}, "certificates[0].privateKeyPem"},
		{"not PEM", nil, []loadbalancer.CertificatePEM{{Name: "shop", CertPEM: "hello", KeyPEM: key}}, "certificates[0].certificatePem"},
		{"SNI not covered", nil, []loadbalancer.CertificatePEM{{Name: "shop", CertPEM: narrow, KeyPEM: narrowKey}}, "listeners[0].serverNames[1]"},
		{"overlapping listeners", func(lb *catalog.LoadBalancer) {
			lb.Listeners = append(lb.Listeners, catalog.LBListener{Name: "raw", Protocol: catalog.LBProtocolTCP, Port: 443, Pool: "app"})
		}, good, "listeners[1].port"},
		{"port out of range", func(lb *catalog.LoadBalancer) { lb.Listeners[0].Port = 70000 }, good, "listeners[0].port"},
		{"backend port out of range", func(lb *catalog.LoadBalancer) { lb.Pools[0].Backends[0].Port = 0 }, good, "pools[0].backends[0].port"},
		{"unknown pool", func(lb *catalog.LoadBalancer) { lb.Listeners[0].Pool = "nope" }, good, "listeners[0].pool"},
		{"unknown certificate", func(lb *catalog.LoadBalancer) { lb.Listeners[0].Certificates = []string{"nope"} }, good, "listeners[0].certificates[0]"},
	}
	for _, c := range cases {
		lb := web()
		if c.edit != nil {
			c.edit(lb)
		}
		_, err := svc.Create(t.Context(), lb, c.certs)
		var ve *catalog.ValidationError
		if !errors.As(err, &ve) || ve.Field != c.field {
			t.Errorf("%s: %v, want a validation error on %s", c.name, err, c.field)
		}
	}
	if n := allocations(t, s); n != 0 {
		t.Errorf("refused creates allocated %d addresses", n)
	}
	if _, err := s.GetSecret(t.Context(), catalog.LoadBalancerSecretName(web().Name)); !errors.Is(err, catalog.ErrNotFound) {
		t.Errorf("refused creates left a secret: %v", err)
	}
}

// TestLifecycle: a balancer gets the lowest free address after its VDC's
// edge gateway's, keeps its key
// in the secret only, keeps a certificate an update names without PEM,
// is NOT_FOUND for another VDC, and gives its address back when deleted.
func TestLifecycle(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	svc, s := setup(t)
	cert, key := lbtest.Certificate(t, "shop.example", "*.shop.example")
	lb, err := svc.Create(ctx, web(), []loadbalancer.CertificatePEM{{Name: "shop", CertPEM: cert, KeyPEM: key}})
	if err != nil {
		t.Fatal(err)
	}
	if lb.PublicAddress != "203.0.113.11" || len(lb.Certificates) != 1 || lb.Certificates[0].DNSNames[1] != "*.shop.example" {
		t.Fatalf("created %+v", lb)
	}
	var exported strings.Builder
	if _, err := catalog.Export(ctx, s, &exported); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(exported.String(), "PRIVATE KEY") {
		t.Error("the catalog holds the private key")
	}
	if _, err := svc.Get(ctx, "other", lb.Name); !errors.Is(err, loadbalancer.ErrNotFound) {
		t.Errorf("another VDC's get: %v", err)
	}
	if _, err := svc.Delete(ctx, "other", lb.Name); !errors.Is(err, loadbalancer.ErrNotFound) {
		t.Errorf("another VDC's delete: %v", err)
	}
	want := web()
	want.Listeners = append(want.Listeners, catalog.LBListener{Name: "raw", Protocol: catalog.LBProtocolTCP, Port: 5432, Pool: "app"})
	up, err := svc.Update(ctx, "prod", lb.Name, want, []loadbalancer.CertificatePEM{{Name: "shop"}})
	if err != nil {
		t.Fatal(err)
	}
	if len(up.Listeners) != 2 || up.Certificates[0].Fingerprint != lb.Certificates[0].Fingerprint || up.PublicAddress != lb.PublicAddress {
		t.Fatalf("updated %+v", up)
	}
	sec, err := s.GetSecret(ctx, catalog.LoadBalancerSecretName(lb.Name))
	if err != nil || string(sec["shop.key"]) != key {
		t.Fatalf("the secret after the update: %v", err)
	}
	if _, err := svc.Update(ctx, "prod", lb.Name, want, []loadbalancer.CertificatePEM{{Name: "new"}}); err == nil {
		t.Error("a new certificate without PEM was taken")
	}
	if _, err := svc.Delete(ctx, "prod", lb.Name); err != nil {
		t.Fatal(err)
	}
	if n := allocations(t, s); n != 1 { // the edge gateway's
		t.Errorf("the deleted balancer's address is still allocated (%d)", n)
	}
	if _, err := s.GetSecret(ctx, catalog.LoadBalancerSecretName(lb.Name)); !errors.Is(err, catalog.ErrNotFound) {
		t.Errorf("the deleted balancer's secret: %v", err)
	}
}
