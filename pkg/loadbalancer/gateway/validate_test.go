package gateway

import (
	"errors"
	"strings"
	"testing"

	"github.com/flexplane/flexplane/pkg/loadbalancer/lbconfig"
)

// validBase is a valid config of every kind of listener that the cases of
// invalidConfigs each break in one place.
func validBase(t testing.TB, addr func(i int) string) lbconfig.Config {
	return lbconfig.Config{Revision: "base", Balancers: []lbconfig.Balancer{{
		ID: "lb", VDC: "prod",
		Listeners: []lbconfig.Listener{
			{Name: "tcp", Protocol: lbconfig.ProtocolTCP, Address: addr(0), Pool: "p"},
			{Name: "http", Protocol: lbconfig.ProtocolHTTP, Address: addr(1), Pool: "p", Routes: []lbconfig.Route{{PathPrefix: "/api", Pool: "q"}}},
			{Name: "https", Protocol: lbconfig.ProtocolHTTPS, Address: addr(2), Pool: "p", Certificates: []string{"web"}},
			{Name: "tls", Protocol: lbconfig.ProtocolTLSPassthrough, Address: addr(3), SNIRoutes: []lbconfig.SNIRoute{{ServerName: "a.pass.example.test", Pool: "q"}}},
		},
		Pools: []lbconfig.Pool{
			{Name: "p", Backends: []lbconfig.Backend{{ID: "a", Address: "127.0.0.1:1"}}},
			{Name: "q", Backends: []lbconfig.Backend{{ID: "b", Address: "127.0.0.1:2"}}, HealthCheck: healthCheck(lbconfig.HealthCheckTCP, "")},
		},
		Certificates: []lbconfig.Certificate{testCert(t, "web", "web")},
	}}}
}

// invalidConfigs are configs Validate must refuse, each with a word its
// error must carry.
func invalidConfigs(t testing.TB, addr func(i int) string) map[string]struct {
	edit func(*lbconfig.Balancer)
	want string
} {
	shop := testCert(t, "shop", "shop")
	return map[string]struct {
		edit func(*lbconfig.Balancer)
		want string
	}{
		"certificate with another's key": {func(b *lbconfig.Balancer) { b.Certificates[0].KeyPEM = shop.KeyPEM }, "private key does not match"},
		"certificate not PEM":            {func(b *lbconfig.Balancer) { b.Certificates[0].CertPEM = "hello" }, "no PEM certificate"},
		"HTTPS without certificate":      {func(b *lbconfig.Balancer) { b.Listeners[2].Certificates = nil }, "needs at least one certificate"},
		"HTTPS names a missing one":      {func(b *lbconfig.Balancer) { b.Listeners[2].Certificates = []string{"nope"} }, `certificate "nope" does not exist`},
		"port out of range":              {func(b *lbconfig.Balancer) { b.Listeners[0].Address = "127.0.0.1:65536" }, "port must be 1..65535"},
		"port zero":                      {func(b *lbconfig.Balancer) { b.Listeners[0].Address = "127.0.0.1:0" }, "port must be 1..65535"},
		"backend port out of range":      {func(b *lbconfig.Balancer) { b.Pools[0].Backends[0].Address = "10.0.0.1:70000" }, "port must be 1..65535"},
		"overlapping listeners":          {func(b *lbconfig.Balancer) { b.Listeners[1].Address = b.Listeners[0].Address }, "overlaps"},
		"overlapping wildcard": {func(b *lbconfig.Balancer) {
			_, port, _ := strings.Cut(b.Listeners[0].Address, ":")
			b.Listeners[1].Address = "0.0.0.0:" + port
		}, "overlaps"},
		"missing pool":            {func(b *lbconfig.Balancer) { b.Listeners[0].Pool = "nope" }, `pool "nope" does not exist`},
		"route to missing pool":   {func(b *lbconfig.Balancer) { b.Listeners[1].Routes[0].Pool = "nope" }, `pool "nope" does not exist`},
		"route without slash":     {func(b *lbconfig.Balancer) { b.Listeners[1].Routes[0].PathPrefix = "api" }, "must start with /"},
		"SNI not a name":          {func(b *lbconfig.Balancer) { b.Listeners[3].SNIRoutes[0].ServerName = "a b" }, "not a DNS name"},
		"unknown protocol":        {func(b *lbconfig.Balancer) { b.Listeners[0].Protocol = "UDP" }, "unknown protocol"},
		"duplicate listener name": {func(b *lbconfig.Balancer) { b.Listeners[1].Name = "tcp" }, "appears twice"},
		"zero threshold":          {func(b *lbconfig.Balancer) { b.Pools[1].HealthCheck.HealthyThreshold = 0 }, "thresholds"},
		"no interval":             {func(b *lbconfig.Balancer) { b.Pools[1].HealthCheck.Interval = 0 }, "positive"},
	}
}

// TestValidateRefuses checks that each broken config is refused with an
// ErrInvalid naming what is wrong, and that the base config passes.
func TestValidateRefuses(t *testing.T) {
	t.Parallel()
	addr := func(i int) string {
		return []string{"127.0.0.1:7000", "127.0.0.1:7001", "127.0.0.1:7002", "127.0.0.1:7003"}[i]
	}
	if err := Validate(validBase(t, addr)); err != nil {
		t.Fatalf("the base config is refused: %v", err)
	}
	for name, c := range invalidConfigs(t, addr) {
		cfg := validBase(t, addr)
		c.edit(&cfg.Balancers[0])
		err := Validate(cfg)
		if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want ErrInvalid naming %q", name, err, c.want)
		}
	}
	two := validBase(t, addr)
	other := validBase(t, addr).Balancers[0]
	other.ID = "lb2"
	two.Balancers = append(two.Balancers, other)
	if err := Validate(two); err == nil || !strings.Contains(err.Error(), "overlaps") {
		t.Errorf("two balancers on one address: %v, want an overlap", err)
	}
}
