package pgtest_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/flexplane/flexplane/pkg/dev/pgtest"
)

// TestServer starts a cluster, creates a database with its own role, and
// checks that the role (and only with its password) can use it, and that
// Close stops the server and removes everything.
func TestServer(t *testing.T) {
	t.Parallel()
	s, err := pgtest.Start(t.Context(), pgtest.Config{})
	if err != nil {
		t.Fatal(err)
	}
	db := s.Database(t, "app")
	pw, err := os.ReadFile(db.PasswordFile)
	if err != nil || strings.TrimSpace(string(pw)) != db.Password {
		t.Fatalf("password file: %q, %v", pw, err)
	}
	connect := func(password string) (*pgx.Conn, error) {
		cfg, err := pgx.ParseConfig("sslmode=disable")
		if err != nil {
			t.Fatal(err)
		}
		cfg.Host, cfg.Port, cfg.User, cfg.Password, cfg.Database = db.Host, uint16(db.Port), db.User, password, db.Name
		return pgx.ConnectConfig(t.Context(), cfg)
	}
	conn, err := connect(db.Password)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(t.Context(), "CREATE TABLE t (v text); INSERT INTO t VALUES ('x')"); err != nil {
		t.Fatal(err)
	}
	var n int
	if err := conn.QueryRow(t.Context(), "SELECT count(*) FROM t").Scan(&n); err != nil || n != 1 {
		t.Fatalf("count = %d, %v", n, err)
	}
	conn.Close(context.Background())
	if c, err := connect("wrong"); err == nil {
		c.Close(context.Background())
		t.Fatal("connected with a wrong password")
	}

	dir := filepath.Dir(db.PasswordFile)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Fatalf("directory %s left after Close: %v", dir, err)
	}
	if c, err := connect(db.Password); err == nil {
		c.Close(context.Background())
		t.Fatal("server still answers after Close")
	}
}

// TestStartRefuses checks that a listen address or client network that is
// no address is refused before anything starts.
func TestStartRefuses(t *testing.T) {
	t.Parallel()
	for _, cfg := range []pgtest.Config{
		{Host: "localhost"},
		{ClientCIDRs: []string{"10.0.0.0"}},
		{ClientCIDRs: []string{"10.0.0.0/8", "nope"}},
	} {
		if s, err := pgtest.Start(t.Context(), cfg); err == nil {
			s.Close()
			t.Errorf("Start(%+v) started", cfg)
		}
	}
}
