package profiling

import (
	"context"
	"github.com/flexplane/flexplane/pkg/dev/poll"
	"io"
	"net/http"
	"runtime"
	"strings"
	"testing"
	"time"
)

func TestStartServesProfilesOnLoopbackOnly(t *testing.T) {
	t.Parallel()
	for _, bad := range []string{"0.0.0.0:0", ":0", "192.0.2.1:6060", "example.com:6060", "127.0.0.1"} {
		if s, err := Start(bad, nil); err == nil {
			s.Shutdown(context.Background())
			t.Errorf("Start(%q) succeeded, want a refusal", bad)
		}
	}
	s, err := Start("127.0.0.1:0", nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		s.Shutdown(ctx)
	})
	resp, err := http.Get("http://" + s.Addr() + "/debug/pprof/goroutine?debug=1")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(b), "goroutine profile:") {
		t.Fatalf("goroutine profile: status %d, body %.200s", resp.StatusCode, b)
	}
}

// TestCloseCutsAProfileShort: a process that exits while a 30 s CPU profile
// is being taken stops serving within the grace, not after 30 s.
func TestCloseCutsAProfileShort(t *testing.T) {
	t.Parallel()
	s, err := Start("127.0.0.1:0", nil)
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		resp, err := http.Get("http://" + s.Addr() + "/debug/pprof/profile?seconds=30")
		if err == nil {
			resp.Body.Close()
		}
	}()
	poll.True(t, 10*time.Second, "the profile request to reach its handler", func() bool {
		return strings.Contains(allStacks(), "net/http/pprof.Profile(")
	})
	began := time.Now()
	s.Close()
	if took := time.Since(began); took > closeGrace+3*time.Second {
		t.Fatalf("Close took %v with a profile in progress, want about %v", took, closeGrace)
	}
}

func allStacks() string {
	buf := make([]byte, 1<<20)
	return string(buf[:runtime.Stack(buf, true)])
}
