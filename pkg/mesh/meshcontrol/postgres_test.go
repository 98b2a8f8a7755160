package meshcontrol_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/flexplane/flexplane/pkg/dev/pgtest"
	"github.com/flexplane/flexplane/pkg/dev/poll"
	"github.com/flexplane/flexplane/pkg/mesh/meshcontrol"
	"github.com/flexplane/flexplane/pkg/mesh/meshnode"
)

// TestPostgres runs the control server on PostgreSQL (as replicated
// deployments do) and restarts it on a fresh data directory, as another
// replica taking over would: keys, nodes and the server's identity are
// kept, the enrolled node comes back online without enrolling again, and
// enrollment keeps working.
func TestPostgres(t *testing.T) {
	t.Parallel()
	meshnode.PrepareProcess("http://")
	ctx := t.Context()
	pg := pgtest.New(t)
	db := pg.Database(t, "headscale")
	// A password with spaces, quotes and a backslash: Headscale joins its
	// connection string unquoted.
	password := `it's a \secret`
	if err := pg.Exec(ctx, "postgres", `ALTER ROLE headscale PASSWORD 'it''s a \secret'`); err != nil {
		t.Fatal(err)
	}
	pwFile := filepath.Join(shortTempDir(t), "password")
	if err := os.WriteFile(pwFile, []byte(password+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := &meshcontrol.PostgresConfig{Host: db.Host, Port: db.Port, Database: db.Name, User: db.User,
		PasswordFile: pwFile, SSLMode: "disable"}

	dir1 := shortTempDir(t)
	s1 := startServerAt(t, dir1, "127.0.0.1:0", cfg)
	enroll, err := s1.ctrl.CreateKey(ctx, meshcontrol.KeyOptions{Reusable: true, TTL: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	join := func(name string) *meshnode.Node {
		t.Helper()
		jctx, cancel := context.WithTimeout(ctx, 60*time.Second)
		defer cancel()
		n, err := meshnode.Start(jctx, meshnode.Config{
			Hostname: name, Dir: t.TempDir(), ControlURL: s1.url, AuthKey: enroll.Secret,
			Logger: slog.New(slog.DiscardHandler),
		})
		if err != nil {
			t.Fatalf("join %s: %v", name, err)
		}
		t.Cleanup(func() { n.Close(context.Background()) })
		return n
	}
	join("first")
	before := waitNodes(t, s1.ctrl, map[string]bool{"first": true})
	if _, err := os.Stat(filepath.Join(dir1, "headscale.sqlite")); !os.IsNotExist(err) {
		t.Errorf("a SQLite database was made in the data directory: %v", err)
	}

	// Another control server takes over: same URL, empty data directory.
	addr := strings.TrimPrefix(s1.url, "http://")
	s1.stop()
	dir2 := shortTempDir(t)
	s2 := startServerAt(t, dir2, addr, cfg)
	for _, f := range []string{"noise_private.key", "derp_server_private.key"} {
		a, err1 := os.ReadFile(filepath.Join(dir1, f))
		b, err2 := os.ReadFile(filepath.Join(dir2, f))
		if err1 != nil || err2 != nil || string(a) != string(b) {
			t.Errorf("%s differs after the move (%v, %v)", f, err1, err2)
		}
	}
	keys, err := s2.ctrl.ListKeys(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(keys) != 1 || keys[0].ID != enroll.ID || keys[0].Expired(time.Now()) {
		t.Fatalf("keys after the move: %+v, want key %d valid", keys, enroll.ID)
	}
	// The node reconnects by itself (its tunnel to the control server was
	// cut) and is the same node; a new one enrolls with the kept key.
	join("second")
	after := waitNodes(t, s2.ctrl, map[string]bool{"first": true, "second": true})
	if after["first"].ID != before["first"].ID || after["first"].Addrs[0] != before["first"].Addrs[0] {
		t.Fatalf("node first was %+v, is %+v after the move", before["first"], after["first"])
	}
}

// waitNodes waits until the control server lists exactly the nodes of want,
// each online.
func waitNodes(t *testing.T, c *meshcontrol.Control, want map[string]bool) map[string]meshcontrol.Node {
	t.Helper()
	var got map[string]meshcontrol.Node
	poll.Until(t, 60*time.Second, "the control server's nodes", func() error {
		nodes, err := c.Nodes(t.Context())
		got = map[string]meshcontrol.Node{}
		online := 0
		for _, n := range nodes {
			got[n.Name] = n
			if n.Online && want[n.Name] {
				online++
			}
		}
		if err != nil || len(got) != len(want) || online != len(want) {
			return fmt.Errorf("nodes = %+v (%v), want %v online", nodes, err, want)
		}
		return nil
	})
	return got
}

// TestPostgresErrors checks that a database the server cannot use is an
// error of Start, not an exit of the process, and that connection URLs are
// checked.
func TestPostgresErrors(t *testing.T) {
	t.Parallel()
	pg := pgtest.New(t)
	db := pg.Database(t, "hs")
	for name, p := range map[string]meshcontrol.PostgresConfig{
		"wrong password":   {Host: db.Host, Port: db.Port, Database: db.Name, User: db.User, Password: "wrong", SSLMode: "disable"},
		"missing database": {Host: db.Host, Port: db.Port, Database: "nope", User: db.User, Password: db.Password, SSLMode: "disable"},
		"no password":      {Host: db.Host, Port: db.Port, Database: db.Name, User: db.User},
		"missing file":     {Host: db.Host, Port: db.Port, Database: db.Name, User: db.User, PasswordFile: "/nonexistent/pw"},
		"both passwords":   {Host: db.Host, Port: db.Port, Database: db.Name, User: db.User, Password: "x", PasswordFile: db.PasswordFile},
		"bad sslmode":      {Host: db.Host, Port: db.Port, Database: db.Name, User: db.User, Password: "x", SSLMode: "yes"},
	} {
		c, err := meshcontrol.Start(t.Context(), meshcontrol.Config{
			DataDir: shortTempDir(t), ServerURL: "http://127.0.0.1:1", STUNAddr: "127.0.0.1:0",
			Postgres: &p, Logger: slog.New(slog.DiscardHandler),
		})
		if err == nil {
			c.Close(context.Background())
			t.Errorf("%s: Start succeeded", name)
			continue
		}
		if strings.Contains(err.Error(), db.Password) {
			t.Errorf("%s: the error shows the password: %v", name, err)
		}
		t.Logf("%s: %v", name, err)
	}
}

func TestParsePostgresURL(t *testing.T) {
	t.Parallel()
	good := map[string]meshcontrol.PostgresConfig{
		"postgres://hs@db.example:6432/headscale?sslmode=verify-full": {Host: "db.example", Port: 6432, Database: "headscale", User: "hs", SSLMode: "verify-full"},
		"postgresql://hs@db/headscale":                                {Host: "db", Database: "headscale", User: "hs"},
		"postgres://hs@/headscale?host=/run/postgresql":               {Host: "/run/postgresql", Database: "headscale", User: "hs"},
	}
	for in, want := range good {
		got, err := meshcontrol.ParsePostgresURL(in)
		if err != nil || *got != want {
			t.Errorf("ParsePostgresURL(%q) = %+v, %v; want %+v", in, got, err, want)
		}
	}
	for _, in := range []string{
		"mysql://hs@db/headscale",
		"postgres://hs:secret@db/headscale",
		"postgres://db/headscale",
		"postgres://hs@db/",
		"postgres://hs@db:99999/headscale",
		"postgres://hs@db/headscale?sslmode=maybe",
		"postgres://hs@db/headscale?password=x",
		"postgres://hs@db/headscale?host=/run/postgresql",
		"postgres://hs@/headscale?host=run",
	} {
		if got, err := meshcontrol.ParsePostgresURL(in); err == nil {
			t.Errorf("ParsePostgresURL(%q) = %+v, want an error", in, got)
		}
	}
}

// TestReplicaToken: replicas starting together on a fresh database all get
// the same token (the first one's), and a later replica too.
func TestReplicaToken(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t).Database(t, "tokens")
	cfg := meshcontrol.PostgresConfig{Host: db.Host, Port: db.Port, Database: db.Name, User: db.User,
		PasswordFile: db.PasswordFile, SSLMode: "disable"}
	const replicas = 5
	tokens := make([]string, replicas)
	errs := make([]error, replicas)
	var wg sync.WaitGroup
	for i := range replicas {
		wg.Go(func() { tokens[i], errs[i] = meshcontrol.ReplicaToken(t.Context(), cfg) })
	}
	wg.Wait()
	later, err := meshcontrol.ReplicaToken(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if len(later) < 32 {
		t.Fatalf("token %q: too short", later)
	}
	for i := range replicas {
		if errs[i] != nil || tokens[i] != later {
			t.Errorf("replica %d: token %q, %v; want %q", i, tokens[i], errs[i], later)
		}
	}
}
