package tcpfront_test

import (
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/flexplane/flexplane/pkg/dev/tcpfront"
)

// backend is an HTTP server answering its name at / and ready (200) or
// not (503) at /ready.
func backend(t *testing.T, name string, ready *atomic.Bool) string {
	t.Helper()
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/ready" && !ready.Load() {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
		io.WriteString(w, name)
	}))
	t.Cleanup(s.Close)
	return s.Listener.Addr().String()
}

func get(t *testing.T, url string) string {
	t.Helper()
	hc := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	resp, err := hc.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

// TestSpreadsSkipsDeadAndFollowsReadiness: connections go round robin to
// every backend; one that refuses connections is skipped; with a
// readiness path only the ready ones get new connections, all of them
// again while none is ready.
func TestSpreadsSkipsDeadAndFollowsReadiness(t *testing.T) {
	var aReady, bReady atomic.Bool
	a, b := backend(t, "a", &aReady), backend(t, "b", &bReady)
	dead, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	deadAddr := dead.Addr().String()
	dead.Close()
	f, err := tcpfront.Listen("127.0.0.1:0", a, deadAddr, b)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	seen := map[string]int{}
	for range 6 {
		seen[get(t, f.URL())]++
	}
	if seen["a"] == 0 || seen["b"] == 0 || seen["a"]+seen["b"] != 6 {
		t.Fatalf("answers %v, want a and b only, both", seen)
	}

	aReady.Store(true)
	f.WatchReady("/ready")
	deadline := time.Now().Add(10 * time.Second)
	for n := 0; n < 6; {
		if got := get(t, f.URL()); got == "a" {
			n++
		} else {
			n = 0 // b, until the first probe
			if time.Now().After(deadline) {
				t.Fatal("b still gets connections though it is not ready")
			}
		}
	}
	aReady.Store(false) // none ready: all again
	deadline = time.Now().Add(10 * time.Second)
	for get(t, f.URL()) != "b" {
		if time.Now().After(deadline) {
			t.Fatal("no connection to b while no backend is ready")
		}
	}
}
