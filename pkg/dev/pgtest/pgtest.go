// Package pgtest runs a throwaway PostgreSQL server for tests: Debian's
// postgresql binaries (installed by `make postgres`, which `make test`
// depends on), a fresh cluster made by initdb in a temporary directory, and
// the postgres server as a child process on a free loopback port with
// password (SCRAM) authentication. Close, or t.Cleanup with New, stops it and
// removes the directory.
//
// PostgreSQL refuses to run as root, and tests here run as root: a server
// started by root runs as the unprivileged user Config.User (default
// "nobody"), which owns the cluster's directory. A server started by any
// other user runs as that user.
//
//	pg := pgtest.New(t)
//	db := pg.Database(t, "headscale") // a new database and its own role
//	// db.Host, db.Port, db.Name, db.User, db.Password, db.PasswordFile
package pgtest

import (
	"bytes"
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// Config configures a server.
type Config struct {
	// BinDir holds initdb and postgres. Default $PGTEST_BINDIR, else the
	// newest /usr/lib/postgresql/<version>/bin (Debian's layout).
	BinDir string
	// User is the account the server runs as when the caller is root.
	// Default "nobody".
	User string
	// Logger receives the server's output. Default slog.Default().
	Logger *slog.Logger
	// StartTimeout bounds initdb and the server's start. Default 60s.
	StartTimeout time.Duration
	// Host is the address the server listens on. Default 127.0.0.1; a
	// test whose pods connect gives an address of its own network
	// namespace they reach (netns.Address), never one of the machine's.
	Host string
	// ClientCIDRs are the networks besides loopback clients may connect
	// from with a password (pg_hba.conf), e.g. a node's pod CIDR.
	ClientCIDRs []string
}

// Server is a running PostgreSQL server.
type Server struct {
	// Host and Port are where the server listens (Config.Host and a
	// free port).
	Host string
	Port int
	// User and Password are the superuser's.
	User, Password string

	clients []string // Config.ClientCIDRs
	dir     string
	cmd     *exec.Cmd
	done    chan struct{} // closed when the server exited
	log     *slog.Logger
	out     *logWriter

	mu     sync.Mutex
	closed bool  // protected by mu
	err    error // the server's exit, protected by mu
}

// Database is a database of the server with a role of its own that owns
// it, which is all a client such as Headscale needs.
type Database struct {
	Host string
	Port int
	Name string
	User string
	// Password is the role's password; PasswordFile holds it too (with a
	// trailing newline, as a mounted Secret or `echo` writes it).
	Password     string
	PasswordFile string
}

// New starts a server for t and stops it when t ends; it fails t when the
// server cannot start.
func New(t testing.TB) *Server {
	t.Helper()
	s, err := Start(context.Background(), Config{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Error(err)
		}
	})
	return s
}

// Start makes a fresh cluster and starts its server; it returns once the
// server accepts connections.
func Start(ctx context.Context, cfg Config) (*Server, error) {
	if cfg.StartTimeout == 0 {
		cfg.StartTimeout = 60 * time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.User == "" {
		cfg.User = "nobody"
	}
	for _, c := range cfg.ClientCIDRs {
		if _, err := netip.ParsePrefix(c); err != nil {
			return nil, fmt.Errorf("pgtest: start: client CIDR: %w", err)
		}
	}
	host := cmp.Or(cfg.Host, "127.0.0.1")
	// The server's own address may connect too (the superuser's
	// connections come from it).
	clients := cfg.ClientCIDRs
	if a, err := netip.ParseAddr(host); err != nil {
		return nil, fmt.Errorf("pgtest: start: host: %w", err)
	} else if !a.IsLoopback() {
		clients = append([]string{netip.PrefixFrom(a, a.BitLen()).String()}, clients...)
	}
	ctx, cancel := context.WithTimeout(ctx, cfg.StartTimeout)
	defer cancel()
	bin, err := binDir(cfg.BinDir)
	if err != nil {
		return nil, fmt.Errorf("pgtest: start: %w", err)
	}
	cred, err := credential(cfg.User)
	if err != nil {
		return nil, fmt.Errorf("pgtest: start: %w", err)
	}
	dir, err := os.MkdirTemp("", "pgtest")
	if err != nil {
		return nil, fmt.Errorf("pgtest: start: %w", err)
	}
	s := &Server{Host: host, clients: clients, User: "postgres", Password: randomHex(16), dir: dir, log: cfg.Logger, done: make(chan struct{})}
	if err := s.start(ctx, bin, cred); err != nil {
		s.Close()
		return nil, fmt.Errorf("pgtest: start: %w", err)
	}
	return s, nil
}

func (s *Server) start(ctx context.Context, bin string, cred *syscall.Credential) error {
	if cred != nil {
		if err := os.Chown(s.dir, int(cred.Uid), int(cred.Gid)); err != nil {
			return err
		}
	}
	pwfile := filepath.Join(s.dir, "superuser.pw")
	if err := writeOwned(pwfile, s.Password+"\n", cred); err != nil {
		return err
	}
	data := filepath.Join(s.dir, "data")
	initdb := exec.CommandContext(ctx, filepath.Join(bin, "initdb"),
		"-D", data, "-U", s.User, "--pwfile", pwfile, "--auth", "scram-sha-256",
		"-E", "UTF8", "--no-locale", "--no-sync", "--no-instructions")
	initdb.SysProcAttr = procAttr(cred)
	initdb.Env = []string{"PATH=/usr/bin:/bin", "LANG=C"}
	if out, err := initdb.CombinedOutput(); err != nil {
		return fmt.Errorf("initdb: %w: %s", err, strings.TrimSpace(string(out)))
	}
	if err := s.allowClients(filepath.Join(data, "pg_hba.conf")); err != nil {
		return err
	}

	port, err := freePort(s.Host)
	if err != nil {
		return err
	}
	s.Port = port
	sock := filepath.Join(s.dir, "sock")
	if err := os.Mkdir(sock, 0o700); err != nil {
		return err
	}
	if cred != nil {
		if err := os.Chown(sock, int(cred.Uid), int(cred.Gid)); err != nil {
			return err
		}
	}
	// fsync off and no full-page writes: a test cluster that is thrown
	// away need not survive a power loss.
	s.cmd = exec.Command(filepath.Join(bin, "postgres"), "-D", data,
		"-c", "listen_addresses="+s.Host, "-c", "port="+strconv.Itoa(port),
		"-c", "unix_socket_directories="+sock, "-c", "fsync=off",
		"-c", "synchronous_commit=off", "-c", "full_page_writes=off",
		"-c", "max_connections=100", "-c", "log_min_messages=warning")
	s.cmd.SysProcAttr = procAttr(cred)
	s.cmd.Env = []string{"PATH=/usr/bin:/bin", "LANG=C"}
	s.out = &logWriter{log: s.log}
	s.cmd.Stdout, s.cmd.Stderr = s.out, s.out
	if err := s.cmd.Start(); err != nil {
		return fmt.Errorf("postgres: %w", err)
	}
	go func() {
		err := s.cmd.Wait()
		s.mu.Lock()
		s.err = err
		s.mu.Unlock()
		close(s.done)
	}()
	return s.waitReady(ctx)
}

// allowClients lets the clients of Config.ClientCIDRs in with a password:
// initdb's pg_hba.conf allows loopback only.
func (s *Server) allowClients(hba string) error {
	if len(s.clients) == 0 {
		return nil
	}
	f, err := os.OpenFile(hba, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		return fmt.Errorf("allow clients: %w", err)
	}
	for _, c := range s.clients {
		fmt.Fprintf(f, "host all all %s scram-sha-256\n", c)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("allow clients: %w", err)
	}
	return nil
}

// waitReady polls until the superuser can connect.
func (s *Server) waitReady(ctx context.Context) error {
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		conn, err := s.connect(ctx, "postgres")
		if err == nil {
			return conn.Close(ctx)
		}
		select {
		case <-s.done:
			s.mu.Lock()
			defer s.mu.Unlock()
			return fmt.Errorf("postgres exited: %v: %s", s.err, s.out.Tail())
		case <-ctx.Done():
			return fmt.Errorf("postgres not ready: %w", err)
		case <-tick.C:
		}
	}
}

func (s *Server) connect(ctx context.Context, db string) (*pgx.Conn, error) {
	cfg, err := pgx.ParseConfig("")
	if err != nil {
		return nil, err
	}
	cfg.Host, cfg.Port, cfg.User, cfg.Password, cfg.Database = s.Host, uint16(s.Port), s.User, s.Password, db
	cfg.TLSConfig = nil
	cfg.Fallbacks = nil
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	return pgx.ConnectConfig(cctx, cfg)
}

// Exec runs SQL statements as the superuser in database db.
func (s *Server) Exec(ctx context.Context, db string, sql ...string) error {
	conn, err := s.connect(ctx, db)
	if err != nil {
		return fmt.Errorf("pgtest: exec: %w", err)
	}
	defer conn.Close(ctx)
	for _, q := range sql {
		if _, err := conn.Exec(ctx, q); err != nil {
			return fmt.Errorf("pgtest: exec %q: %w", q, err)
		}
	}
	return nil
}

// CreateDatabase creates database name owned by a new role of the same
// name with a random password, written also to a file of the server's
// directory.
func (s *Server) CreateDatabase(ctx context.Context, name string) (*Database, error) {
	if !validName(name) {
		return nil, fmt.Errorf("pgtest: create database: %q is not a plain lowercase name", name)
	}
	d := &Database{Host: s.Host, Port: s.Port, Name: name, User: name, Password: randomHex(16)}
	d.PasswordFile = filepath.Join(s.dir, name+".pw")
	if err := os.WriteFile(d.PasswordFile, []byte(d.Password+"\n"), 0o600); err != nil {
		return nil, fmt.Errorf("pgtest: create database: %w", err)
	}
	err := s.Exec(ctx, "postgres",
		fmt.Sprintf("CREATE ROLE %s LOGIN PASSWORD '%s'", name, d.Password),
		fmt.Sprintf("CREATE DATABASE %s OWNER %s", name, name))
	if err != nil {
		return nil, err
	}
	return d, nil
}

// Database creates a database for t (see CreateDatabase).
func (s *Server) Database(t testing.TB, name string) *Database {
	t.Helper()
	d, err := s.CreateDatabase(t.Context(), name)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// Close stops the server (a fast shutdown, SIGKILL after 10s) and removes
// its directory.
func (s *Server) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	s.mu.Unlock()
	var err error
	if s.cmd != nil && s.cmd.Process != nil {
		_ = s.cmd.Process.Signal(syscall.SIGINT)
		select {
		case <-s.done:
		case <-time.After(10 * time.Second):
			_ = s.cmd.Process.Kill()
			<-s.done
			err = errors.New("pgtest: close: postgres did not stop within 10s; killed")
		}
	}
	if rerr := os.RemoveAll(s.dir); rerr != nil && err == nil {
		err = fmt.Errorf("pgtest: close: %w", rerr)
	}
	return err
}

// binDir finds the directory of initdb and postgres.
func binDir(dir string) (string, error) {
	if dir == "" {
		dir = os.Getenv("PGTEST_BINDIR")
	}
	if dir == "" {
		found, _ := filepath.Glob("/usr/lib/postgresql/*/bin/postgres")
		sort.Slice(found, func(i, j int) bool { return version(found[i]) > version(found[j]) })
		if len(found) > 0 {
			dir = filepath.Dir(found[0])
		}
	}
	if dir == "" {
		return "", errors.New("no PostgreSQL binaries in /usr/lib/postgresql/*/bin: run `make postgres` (apt-get install postgresql) or set PGTEST_BINDIR")
	}
	for _, b := range []string{"initdb", "postgres"} {
		if _, err := os.Stat(filepath.Join(dir, b)); err != nil {
			return "", fmt.Errorf("%s in %s: %w (run `make postgres`)", b, dir, err)
		}
	}
	return dir, nil
}

// version is the major version in a path /usr/lib/postgresql/<v>/bin/postgres.
func version(path string) int {
	v, _ := strconv.Atoi(filepath.Base(filepath.Dir(filepath.Dir(path))))
	return v
}

// credential is the account to run as: nil for a caller that is not root.
func credential(name string) (*syscall.Credential, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	u, err := user.Lookup(name)
	if err != nil {
		return nil, fmt.Errorf("PostgreSQL refuses to run as root and user %q to run it as is missing: %w", name, err)
	}
	uid, err1 := strconv.ParseUint(u.Uid, 10, 32)
	gid, err2 := strconv.ParseUint(u.Gid, 10, 32)
	if err := errors.Join(err1, err2); err != nil {
		return nil, fmt.Errorf("user %q: %w", name, err)
	}
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid), NoSetGroups: true}, nil
}

func procAttr(cred *syscall.Credential) *syscall.SysProcAttr {
	// Its own process group, and killed with the test binary.
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL, Credential: cred}
}

func writeOwned(path, content string, cred *syscall.Credential) error {
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		return err
	}
	if cred != nil {
		return os.Chown(path, int(cred.Uid), int(cred.Gid))
	}
	return nil
}

func freePort(host string) (int, error) {
	l, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		return 0, fmt.Errorf("pick a port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func validName(s string) bool {
	if s == "" || len(s) > 63 || s[0] < 'a' || s[0] > 'z' {
		return false
	}
	for _, c := range s {
		if (c < 'a' || c > 'z') && (c < '0' || c > '9') && c != '_' {
			return false
		}
	}
	return true
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// logWriter logs the server's output line by line at debug level and keeps
// its last lines for errors.
type logWriter struct {
	log *slog.Logger

	mu   sync.Mutex
	buf  []byte   // a partial line, protected by mu
	tail []string // the last lines, protected by mu
}

func (w *logWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf = append(w.buf, p...)
	for {
		i := bytes.IndexByte(w.buf, '\n')
		if i < 0 {
			break
		}
		line := string(w.buf[:i])
		w.buf = w.buf[i+1:]
		w.log.Debug(line, "process", "postgres")
		w.tail = append(w.tail, line)
		if len(w.tail) > 20 {
			w.tail = w.tail[1:]
		}
	}
	return len(p), nil
}

// Tail is the server's last lines of output.
func (w *logWriter) Tail() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return strings.Join(w.tail, "\n")
}
