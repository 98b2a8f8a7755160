package gateway

import (
	"net"
	"strings"
	"testing"
	"time"

	"github.com/flexplane/flexplane/pkg/dev/poll"
	"github.com/flexplane/flexplane/pkg/loadbalancer/lbconfig"
)

// TestAdminAPI checks the admin API's contract: the token is required (and
// compared exactly), /readyz turns ready with the first config, GET
// /v1/config returns it without keys, /metrics reports applies and backend
// health, and Caddy's own admin endpoint does not listen.
func TestAdminAPI(t *testing.T) {
	t.Parallel()
	gw := startGateway(t)
	hc := gw.PKI.HTTP(t, 30*time.Second)
	do := func(method, path, token, body string) (int, string) {
		t.Helper()
		code, b, err := call(t, hc, method, gw.admin+path, token, body)
		if err != nil {
			t.Fatal(err)
		}
		return code, b
	}
	if code, _ := do("GET", "/healthz", "", ""); code != 200 {
		t.Errorf("/healthz = %d", code)
	}
	if code, _ := do("GET", "/readyz", "", ""); code != 503 {
		t.Errorf("/readyz before any config = %d, want 503", code)
	}
	for _, tok := range []string{"", "wrong", testToken + "x", testToken[:len(testToken)-1]} {
		if code, _ := do("GET", "/v1/status", tok, ""); code != 401 {
			t.Errorf("/v1/status with token %q = %d, want 401", tok, code)
		}
		if code, _ := do("PUT", "/v1/config", tok, `{"revision":"x","balancers":[]}`); code != 401 {
			t.Errorf("PUT /v1/config with token %q = %d, want 401", tok, code)
		}
	}
	if code, body := do("PUT", "/v1/config", testToken, `{"revision":"x","balancers":[],"extra":1}`); code != 400 || !strings.Contains(body, "extra") {
		t.Errorf("an unknown field = %d %q, want 400 naming it", code, body)
	}

	addr := freeAddr(t)
	gw.apply(t, lbconfig.Config{Revision: "r1", Balancers: []lbconfig.Balancer{{
		ID: "lb", VDC: "prod",
		Listeners: []lbconfig.Listener{{Name: "https", Protocol: lbconfig.ProtocolHTTPS, Address: addr, Pool: "p", Certificates: []string{"web"}}},
		Pools: []lbconfig.Pool{{Name: "p", HealthCheck: healthCheck(lbconfig.HealthCheckTCP, ""),
			Backends: []lbconfig.Backend{{ID: "vm-1:80", Address: tcpBackend(t, "a")}}}},
		Certificates: []lbconfig.Certificate{testCert(t, "web", "web")},
	}}})
	if code, _ := do("GET", "/readyz", "", ""); code != 200 {
		t.Errorf("/readyz after a config = %d, want 200", code)
	}
	code, body := do("GET", "/v1/config", testToken, "")
	if code != 200 || !strings.Contains(body, `"revision": "r1"`) || !strings.Contains(body, "BEGIN CERTIFICATE") || strings.Contains(body, "PRIVATE KEY") {
		t.Errorf("GET /v1/config = %d, want r1 with its certificate and no key:\n%s", code, body)
	}
	poll.Until(t, 10*time.Second, "metrics", func() error {
		_, m := do("GET", "/metrics", "", "")
		for _, want := range []string{
			`flexplane_flexgateway_config_applies_total{result="applied"} 1`,
			`flexplane_flexgateway_config_applies_total{result="invalid"} 1`,
			`flexplane_flexgateway_backend_healthy{backend="vm-1:80",balancer="lb",pool="p"} 1`,
			`flexplane_flexgateway_config_apply_seconds_count 1`,
		} {
			if !strings.Contains(m, want) {
				return &missing{want}
			}
		}
		return nil
	})
	if c, err := net.DialTimeout("tcp", "localhost:2019", time.Second); err == nil {
		c.Close()
		t.Error("something listens on Caddy's default admin address localhost:2019")
	}
}

type missing struct{ what string }

func (m *missing) Error() string { return "no " + m.what }

// TestStatusWatch: GET /v1/status?after=<generation> answers at once when
// the generation is another, waits while it is the same, and answers as
// soon as an apply or a backend's health change moves it; a wait that
// runs out answers the same status.
func TestStatusWatch(t *testing.T) {
	t.Parallel()
	gw := startGateway(t)
	ctx := t.Context()
	st, err := gw.WatchStatus(ctx, 0, time.Minute)
	if err != nil || st.Generation == 0 || st.Revision != "" {
		t.Fatalf("first watch: %+v, %v", st, err)
	}
	// A wait that runs out.
	start := time.Now()
	if again, err := gw.WatchStatus(ctx, st.Generation, 300*time.Millisecond); err != nil || again.Generation != st.Generation || time.Since(start) < 300*time.Millisecond {
		t.Errorf("a watch with nothing new: %+v, %v after %s", again, err, time.Since(start))
	}

	type answer struct {
		st  lbconfig.Status
		err error
	}
	watch := func(after uint64) <-chan answer {
		ch := make(chan answer, 1)
		go func() {
			st, err := gw.WatchStatus(ctx, after, time.Minute)
			ch <- answer{st, err}
		}()
		return ch
	}
	await := func(ch <-chan answer, what string) lbconfig.Status {
		t.Helper()
		select {
		case a := <-ch:
			if a.err != nil {
				t.Fatalf("%s: %v", what, a.err)
			}
			return a.st
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: the watch did not answer", what)
		}
		return lbconfig.Status{}
	}

	// An apply.
	ch := watch(st.Generation)
	backend := newHTTPBackend(t, "a")
	gw.apply(t, lbconfig.Config{Revision: "r1", Balancers: []lbconfig.Balancer{{ID: "lb", VDC: "prod",
		Listeners: []lbconfig.Listener{{Name: "http", Protocol: lbconfig.ProtocolHTTP, Address: freeAddr(t), Pool: "p"}},
		Pools: []lbconfig.Pool{{Name: "p", HealthCheck: healthCheck(lbconfig.HealthCheckHTTP, "/health"),
			Backends: []lbconfig.Backend{{ID: "vm-1:80", Address: backend.addr}}}}}}})
	st = await(ch, "after an apply")
	if st.Revision != "r1" {
		t.Errorf("after an apply: %+v", st)
	}

	// A health change: every answer until the backend is out comes from
	// a change of the generation.
	backend.setSick(true)
	start = time.Now()
	for !(len(st.Backends) == 1 && !st.Backends[0].Healthy) {
		next := await(watch(st.Generation), "after a health change")
		if next.Generation == st.Generation {
			t.Fatalf("a watch answered without a change: %+v", next)
		}
		st = next
	}
	t.Logf("the health change reached the watch %s after the backend failed", time.Since(start).Round(time.Millisecond))
	if st.Backends[0].LastError == "" {
		t.Errorf("an unhealthy backend without its error: %+v", st.Backends[0])
	}
}
