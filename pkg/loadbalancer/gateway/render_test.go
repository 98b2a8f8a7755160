package gateway

import (
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"

	"github.com/flexplane/flexplane/pkg/loadbalancer/lbconfig"
)

var update = flag.Bool("update", false, "rewrite the golden files of TestRenderGolden")

// testCert is a certificate of testdata/certs (made for these tests by a
// throwaway CA, valid until 2126) as an lbconfig.Certificate.
func testCert(t testing.TB, name, file string) lbconfig.Certificate {
	t.Helper()
	cert, err := os.ReadFile(filepath.Join("testdata", "certs", file+".pem"))
	if err != nil {
		t.Fatal(err)
	}
	key, err := os.ReadFile(filepath.Join("testdata", "certs", file+"-key.pem"))
	if err != nil {
		t.Fatal(err)
	}
	return lbconfig.Certificate{Name: name, CertPEM: string(cert), KeyPEM: string(key)}
}

func pool(name string, addrs ...string) lbconfig.Pool {
	p := lbconfig.Pool{Name: name}
	for _, a := range addrs {
		p.Backends = append(p.Backends, lbconfig.Backend{ID: "vm-" + a, Address: a})
	}
	return p
}

func healthCheck(proto lbconfig.HealthCheckProtocol, path string) *lbconfig.HealthCheck {
	return &lbconfig.HealthCheck{Protocol: proto, Path: path, Interval: lbconfig.Duration(100 * time.Millisecond),
		Timeout: lbconfig.Duration(100 * time.Millisecond), HealthyThreshold: 2, UnhealthyThreshold: 2}
}

// renderMatrix is the configs TestRenderGolden pins, one per feature.
func renderMatrix(t *testing.T) map[string]lbconfig.Config {
	return map[string]lbconfig.Config{
		"empty": {Revision: "r0"},
		"tcp": {Revision: "r1", Balancers: []lbconfig.Balancer{{
			ID: "lb1", VDC: "prod",
			Listeners: []lbconfig.Listener{{Name: "db", Protocol: lbconfig.ProtocolTCP, Address: "0.0.0.0:5432", Pool: "db"}},
			Pools:     []lbconfig.Pool{pool("db", "10.0.0.11:5432", "10.0.0.12:5432")},
		}}},
		"http-routes": {Revision: "r2", Balancers: []lbconfig.Balancer{{
			ID: "lb2", VDC: "prod",
			Listeners: []lbconfig.Listener{{Name: "web", Protocol: lbconfig.ProtocolHTTP, Address: "203.0.113.10:80", Pool: "web",
				Routes: []lbconfig.Route{{PathPrefix: "/api", Pool: "api"}, {PathPrefix: "/api/v2", Pool: "api2"}}}},
			Pools: []lbconfig.Pool{pool("web", "10.0.0.21:8080"), pool("api", "10.0.0.31:8080", "10.0.0.32:8080"), pool("api2", "10.0.0.41:8080")},
		}}},
		"http-no-default": {Revision: "r3", Balancers: []lbconfig.Balancer{{
			ID: "lb3", VDC: "dev",
			Listeners: []lbconfig.Listener{{Name: "web", Protocol: lbconfig.ProtocolHTTP, Address: ":8080",
				Routes: []lbconfig.Route{{PathPrefix: "/", Pool: "web"}}}},
			Pools: []lbconfig.Pool{pool("web", "10.0.0.21:8080")},
		}}},
		"https-sni": {Revision: "r4", Balancers: []lbconfig.Balancer{{
			ID: "lb4", VDC: "prod",
			Listeners: []lbconfig.Listener{{Name: "https", Protocol: lbconfig.ProtocolHTTPS, Address: "203.0.113.10:443", Pool: "web",
				Routes: []lbconfig.Route{{PathPrefix: "/shop", Pool: "shop"}}, Certificates: []string{"web", "shop"}}},
			Pools:        []lbconfig.Pool{pool("web", "10.0.0.21:8080"), pool("shop", "10.0.0.22:8080")},
			Certificates: []lbconfig.Certificate{testCert(t, "web", "web"), testCert(t, "shop", "shop")},
		}}},
		"tls-passthrough": {Revision: "r5", Balancers: []lbconfig.Balancer{{
			ID: "lb5", VDC: "prod",
			Listeners: []lbconfig.Listener{{Name: "tls", Protocol: lbconfig.ProtocolTLSPassthrough, Address: "203.0.113.10:8443",
				SNIRoutes: []lbconfig.SNIRoute{{ServerName: "a.pass.example.test", Pool: "a"}, {ServerName: "*.b.example.test", Pool: "b"}}}},
			Pools: []lbconfig.Pool{pool("a", "10.0.0.51:443"), pool("b", "10.0.0.52:443")},
		}}},
		"health-down": {Revision: "r6", Balancers: []lbconfig.Balancer{{
			ID: "lb6", VDC: "prod",
			Listeners: []lbconfig.Listener{
				{Name: "web", Protocol: lbconfig.ProtocolHTTP, Address: "203.0.113.10:80", Pool: "web"},
				{Name: "db", Protocol: lbconfig.ProtocolTCP, Address: "203.0.113.10:5432", Pool: "db"},
			},
			Pools: []lbconfig.Pool{
				{Name: "web", HealthCheck: healthCheck(lbconfig.HealthCheckHTTP, "/healthz"), Backends: []lbconfig.Backend{
					{ID: "vm-1:8080", Address: "10.0.0.61:8080"}, {ID: "vm-2:8080", Address: "10.0.0.62:8080"}}},
				{Name: "db", HealthCheck: healthCheck(lbconfig.HealthCheckTCP, ""), Backends: []lbconfig.Backend{
					{ID: "vm-3:5432", Address: "10.0.0.63:5432"}}},
			},
		}}},
		"two-balancers": {Revision: "r7", Balancers: []lbconfig.Balancer{
			{ID: "lba", VDC: "prod", Listeners: []lbconfig.Listener{{Name: "tcp", Protocol: lbconfig.ProtocolTCP, Address: "203.0.113.10:9000", Pool: "p"}},
				Pools: []lbconfig.Pool{pool("p", "10.0.0.71:9000")}},
			{ID: "lbb", VDC: "dev", Listeners: []lbconfig.Listener{{Name: "tcp", Protocol: lbconfig.ProtocolTCP, Address: "203.0.113.11:9000", Pool: "p"}},
				Pools: []lbconfig.Pool{pool("p", "10.1.0.71:9000")}},
		}},
	}
}

// TestRenderGolden renders each config of the matrix and compares it with
// testdata/render/<name>.json (go test -run TestRenderGolden -update
// rewrites them): a change of Caddy's or caddy-l4's schema, or of the
// rendering, shows up as a diff to review. In "health-down" the web
// pool's vm-2 and the db pool's only backend are down.
func TestRenderGolden(t *testing.T) {
	t.Parallel()
	for name, cfg := range renderMatrix(t) {
		if err := Validate(cfg); err != nil {
			t.Errorf("%s: the matrix config is invalid: %v", name, err)
			continue
		}
		got, err := render(cfg, renderOptions{
			StorageDir: "/var/lib/flexgateway/caddy",
			Down: func(k backendKey) bool {
				return k == backendKey{"lb6", "web", "vm-2:8080"} || k == backendKey{"lb6", "db", "vm-3:5432"}
			},
		})
		if err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		// Caddy and caddy-l4 decode every module strictly: a field they no
		// longer know fails here.
		var parsed caddy.Config
		if err := json.Unmarshal(got, &parsed); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if err := caddy.Validate(&parsed); err != nil {
			t.Errorf("%s: Caddy refuses the rendering: %v", name, err)
		}
		golden := filepath.Join("testdata", "render", name+".json")
		if *update {
			if err := os.MkdirAll(filepath.Dir(golden), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(golden, append(got, '\n'), 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		want, err := os.ReadFile(golden)
		if err != nil {
			t.Errorf("%s: %v (go test -run TestRenderGolden -update writes it)", name, err)
			continue
		}
		if strings.TrimSpace(string(want)) != string(got) {
			t.Errorf("%s: the rendering differs from %s (-update rewrites it after review):\n%s", name, golden, got)
		}
	}
}
