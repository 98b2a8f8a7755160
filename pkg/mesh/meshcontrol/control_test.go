package meshcontrol_test

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/flexplane/flexplane/pkg/mesh/meshcontrol"
	"github.com/flexplane/flexplane/pkg/mesh/meshnode"
)

// server is a control server behind a real HTTP listener, as the
// orchestrator runs it.
type server struct {
	url  string
	dir  string
	ctrl *meshcontrol.Control
	http *http.Server
}

func shortTempDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "fpmc")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

func startServer(t *testing.T, dir string) *server {
	t.Helper()
	return startServerAt(t, dir, "127.0.0.1:0", nil)
}

// startServerAt starts a control server listening on addr, its state in
// pg when that is set.
func startServerAt(t *testing.T, dir, addr string, pg *meshcontrol.PostgresConfig) *server {
	t.Helper()
	l, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	s := &server{url: "http://" + l.Addr().String(), dir: dir}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s.ctrl, err = meshcontrol.Start(ctx, meshcontrol.Config{
		DataDir:   dir,
		ServerURL: s.url,
		STUNAddr:  "127.0.0.1:0",
		Postgres:  pg,
		Logger:    slog.New(slog.DiscardHandler),
	})
	if err != nil {
		l.Close()
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	s.ctrl.Mount(mux)
	s.http = &http.Server{Handler: mux, ConnState: s.ctrl.TrackConn}
	go s.http.Serve(l)
	t.Cleanup(s.stop)
	return s
}

func (s *server) stop() {
	s.ctrl.Close(context.Background())
	s.http.Close()
}

func TestKeys(t *testing.T) {
	t.Parallel()
	dir := shortTempDir(t)
	s := startServer(t, dir)
	ctx := t.Context()

	single, err := s.ctrl.CreateKey(ctx, meshcontrol.KeyOptions{TTL: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	reusable, err := s.ctrl.CreateKey(ctx, meshcontrol.KeyOptions{Reusable: true, TTL: 24 * time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	if single.Secret == "" || single.Reusable || !reusable.Reusable {
		t.Fatalf("created keys: %+v %+v", single, reusable)
	}
	if got := single.Tags; len(got) != 1 || got[0] != meshcontrol.TagAgent {
		t.Fatalf("key tags = %v, want [%s]", got, meshcontrol.TagAgent)
	}
	if d := time.Until(reusable.Expiration); d < 23*time.Hour || d > 25*time.Hour {
		t.Fatalf("reusable key expires in %v, want about 24h", d)
	}

	// Bad input is refused and creates nothing.
	for name, opts := range map[string]meshcontrol.KeyOptions{
		"negative ttl": {TTL: -time.Second},
		"ttl too long": {TTL: 2 * meshcontrol.MaxKeyTTL},
		"foreign tag":  {Tags: []string{"tag:admin"}},
	} {
		if _, err := s.ctrl.CreateKey(ctx, opts); err == nil {
			t.Errorf("%s: CreateKey succeeded", name)
		}
	}
	keys, err := s.ctrl.ListKeys(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(keys) != 2 {
		t.Fatalf("listed %d keys, want 2: %+v", len(keys), keys)
	}
	for _, k := range keys {
		if k.Secret == single.Secret || k.Secret == reusable.Secret {
			t.Errorf("listing shows the secret of key %d", k.ID)
		}
	}

	if err := s.ctrl.RevokeKey(ctx, single.ID); err != nil {
		t.Fatal(err)
	}
	if err := s.ctrl.RevokeKey(ctx, 4711); !errors.Is(err, meshcontrol.ErrKeyNotFound) {
		t.Fatalf("revoking an unknown key: %v, want ErrKeyNotFound", err)
	}

	// Restart on the same data directory (in this process): the keys stay.
	s.stop()
	s2 := startServer(t, dir)
	keys, err = s2.ctrl.ListKeys(ctx)
	if err != nil {
		t.Fatal(err)
	}
	states := map[uint64]bool{}
	for _, k := range keys {
		states[k.ID] = k.Expired(time.Now())
	}
	if len(states) != 2 || !states[single.ID] || states[reusable.ID] {
		t.Fatalf("after restart: expired by id = %v, want %d expired and %d valid", states, single.ID, reusable.ID)
	}

	// The local API socket works for a separate client (orchestrator keys).
	c, err := meshcontrol.Dial(s2.ctrl.SocketPath())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.ListKeys(ctx); err != nil {
		t.Fatal(err)
	}
}

func TestEnrollment(t *testing.T) {
	t.Parallel()
	meshnode.PrepareProcess("http://")
	s := startServer(t, shortTempDir(t))
	ctx := t.Context()

	good, err := s.ctrl.CreateKey(ctx, meshcontrol.KeyOptions{TTL: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	revoked, err := s.ctrl.CreateKey(ctx, meshcontrol.KeyOptions{Reusable: true, TTL: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.ctrl.RevokeKey(ctx, revoked.ID); err != nil {
		t.Fatal(err)
	}
	expiring, err := s.ctrl.CreateKey(ctx, meshcontrol.KeyOptions{Reusable: true, TTL: time.Second})
	if err != nil {
		t.Fatal(err)
	}

	join := func(name, key string, timeout time.Duration) (*meshnode.Node, error) {
		ctx, cancel := context.WithTimeout(ctx, timeout)
		defer cancel()
		n, err := meshnode.Start(ctx, meshnode.Config{
			Hostname: name, Dir: t.TempDir(), ControlURL: s.url, AuthKey: key,
			Logger: slog.New(slog.DiscardHandler),
		})
		if err == nil {
			t.Cleanup(func() { n.Close(context.Background()) })
		}
		return n, err
	}

	type result struct {
		name string
		err  error
	}
	results := make(chan result, 3)
	go func() {
		_, err := join("good", good.Secret, 30*time.Second)
		results <- result{"good", err}
	}()
	go func() {
		_, err := join("revoked", revoked.Secret, 15*time.Second)
		results <- result{"revoked", err}
	}()
	go func() {
		// Wait until the key has expired (by the server's clock).
		time.Sleep(time.Until(expiring.Expiration.Add(100 * time.Millisecond)))
		_, err := join("expired", expiring.Secret, 15*time.Second)
		results <- result{"expired", err}
	}()
	for range 3 {
		r := <-results
		switch {
		case r.name == "good" && r.err != nil:
			t.Errorf("join with a valid key: %v", r.err)
		case r.name != "good" && r.err == nil:
			t.Errorf("join with %s key succeeded", r.name)
		case r.name != "good":
			t.Logf("join with %s key: %v", r.name, r.err)
		}
	}

	nodes, err := s.ctrl.Nodes(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, n := range nodes {
		names = append(names, n.Name)
		if !n.HasTag(meshcontrol.TagAgent) {
			t.Errorf("node %s tags %v, want %s", n.Name, n.Tags, meshcontrol.TagAgent)
		}
	}
	if strings.Join(names, ",") != "good" {
		t.Fatalf("nodes = %v, want only [good]", names)
	}
}

// TestStartErrors checks that configurations headscale would die on (it
// exits the process on an unusable STUN address) are errors of Start.
func TestStartErrors(t *testing.T) {
	t.Parallel()
	busy, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	for name, cfg := range map[string]meshcontrol.Config{
		"no data dir":    {ServerURL: "http://127.0.0.1:1"},
		"bad server url": {DataDir: shortTempDir(t), ServerURL: "127.0.0.1:1"},
		"stun port busy": {DataDir: shortTempDir(t), ServerURL: "http://127.0.0.1:1", STUNAddr: busy.LocalAddr().String()},
		"stun bad host":  {DataDir: shortTempDir(t), ServerURL: "http://127.0.0.1:1", STUNAddr: "192.0.2.1:3478"},
		"long socket":    {DataDir: shortTempDir(t), ServerURL: "http://127.0.0.1:1", SocketPath: "/tmp/" + strings.Repeat("x", 120)},
	} {
		cfg.Logger = slog.New(slog.DiscardHandler)
		if c, err := meshcontrol.Start(t.Context(), cfg); err == nil {
			c.Close(context.Background())
			t.Errorf("%s: Start succeeded", name)
		}
	}
}
