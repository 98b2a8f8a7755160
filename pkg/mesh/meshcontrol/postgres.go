package meshcontrol

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"tailscale.com/types/key"

	"github.com/flexplane/flexplane/pkg/support/atomicfile"
)

// PostgresConfig keeps the control server's state in a PostgreSQL database
// instead of SQLite under the data directory: what a deployment of several
// orchestrator replicas needs, since the one running the control server can
// change. The database holds everything that must survive a move to another
// replica: Headscale's tables (users, nodes, keys, routes, policy) and, in
// a table flexplane_mesh_keys of its own, the server's Noise and DERP
// private keys, so agents see the same server wherever it runs and its data
// directory can be thrown away. Only one control server may use a database
// at a time (Headscale keeps its node store in memory).
type PostgresConfig struct {
	// Host is the server's host name or IP address, or (starting with /)
	// the directory of its unix socket. Required.
	Host string
	// Port is the server's port. Default 5432.
	Port int
	// Database is the database's name. Required.
	Database string
	// User is the role to connect as; it must be able to create tables in
	// Database (the owner, typically). Required.
	User string
	// Password is the role's password. Leave it empty and set PasswordFile
	// to keep it out of the configuration.
	Password string
	// PasswordFile holds the password (a mounted Kubernetes Secret); it is
	// read at Start, with surrounding white space removed. Not with
	// Password.
	PasswordFile string
	// SSLMode is libpq's sslmode: disable, allow, prefer, require,
	// verify-ca or verify-full. Default "prefer" (as libpq). For verify-ca
	// and verify-full the CA certificate is read from the file named by
	// the PGSSLROOTCERT environment variable.
	SSLMode string
	// MaxOpenConns bounds the connections to the database. Default 10.
	MaxOpenConns int
}

var sslModes = []string{"disable", "allow", "prefer", "require", "verify-ca", "verify-full"}

// ParsePostgresURL parses a connection URL
// postgres://USER@HOST[:PORT]/DATABASE[?sslmode=MODE]; a unix socket
// directory is given as libpq takes it, postgres://USER@/DATABASE?host=/run/postgresql. The
// URL must not hold the password: it belongs in PasswordFile, off command
// lines.
func ParsePostgresURL(s string) (*PostgresConfig, error) {
	u, err := url.Parse(s)
	if err != nil {
		return nil, fmt.Errorf("meshcontrol: postgres URL: %w", err)
	}
	if u.Scheme != "postgres" && u.Scheme != "postgresql" {
		return nil, fmt.Errorf("meshcontrol: postgres URL %q: the scheme must be postgres://", s)
	}
	if _, ok := u.User.Password(); ok {
		return nil, errors.New("meshcontrol: postgres URL: it holds a password; give the password in a file instead")
	}
	p := &PostgresConfig{User: u.User.Username(), Database: strings.TrimPrefix(u.Path, "/")}
	p.Host = u.Hostname()
	if port := u.Port(); port != "" {
		if p.Port, err = strconv.Atoi(port); err != nil {
			return nil, fmt.Errorf("meshcontrol: postgres URL: port %q: %w", port, err)
		}
	}
	q := u.Query()
	for k := range q {
		if k != "sslmode" && k != "host" {
			return nil, fmt.Errorf("meshcontrol: postgres URL: parameter %q is not supported (only sslmode and host)", k)
		}
	}
	p.SSLMode = q.Get("sslmode")
	if h := q.Get("host"); h != "" {
		if p.Host != "" || !strings.HasPrefix(h, "/") {
			return nil, errors.New("meshcontrol: postgres URL: the host parameter is a socket directory (starting with /) of a URL without a host")
		}
		p.Host = h
	}
	if _, err := p.resolve(); err != nil && !errors.Is(err, errNoPassword) {
		return nil, err
	}
	return p, nil
}

var errNoPassword = errors.New("no password")

// resolve checks p, applies defaults and reads the password file.
func (p PostgresConfig) resolve() (PostgresConfig, error) {
	if p.Port == 0 {
		p.Port = 5432
	}
	if p.SSLMode == "" {
		p.SSLMode = "prefer"
	}
	if p.MaxOpenConns == 0 {
		p.MaxOpenConns = 10
	}
	switch {
	case p.Host == "":
		return p, errors.New("meshcontrol: postgres: the host is required")
	case p.Database == "":
		return p, errors.New("meshcontrol: postgres: the database is required")
	case p.User == "":
		return p, errors.New("meshcontrol: postgres: the user is required")
	case p.Port < 1 || p.Port > 65535:
		return p, fmt.Errorf("meshcontrol: postgres: port %d is out of range", p.Port)
	case !slices.Contains(sslModes, p.SSLMode):
		return p, fmt.Errorf("meshcontrol: postgres: sslmode %q is not one of %s", p.SSLMode, strings.Join(sslModes, ", "))
	case p.MaxOpenConns < 0:
		return p, errors.New("meshcontrol: postgres: MaxOpenConns must not be negative")
	case p.Password != "" && p.PasswordFile != "":
		return p, errors.New("meshcontrol: postgres: set Password or PasswordFile, not both")
	}
	if p.PasswordFile != "" {
		b, err := os.ReadFile(p.PasswordFile)
		if err != nil {
			return p, fmt.Errorf("meshcontrol: postgres: password file: %w", err)
		}
		p.Password = strings.TrimSpace(string(b))
		if p.Password == "" {
			return p, fmt.Errorf("meshcontrol: postgres: password file %s is empty", p.PasswordFile)
		}
	}
	if p.Password == "" {
		return p, fmt.Errorf("meshcontrol: postgres: %w: set Password or PasswordFile", errNoPassword)
	}
	return p, nil
}

// quote writes a value of a libpq keyword/value connection string, which
// Headscale builds by concatenation: quoted, any value (a password with
// spaces or quotes) stays one value.
func quote(s string) string {
	return "'" + strings.NewReplacer(`\`, `\\`, `'`, `\'`).Replace(s) + "'"
}

// connString is p as a libpq keyword/value connection string.
func (p PostgresConfig) connString() string {
	return fmt.Sprintf("host=%s port=%d dbname=%s user=%s password=%s sslmode=%s connect_timeout=10",
		quote(p.Host), p.Port, quote(p.Database), quote(p.User), quote(p.Password), p.SSLMode)
}

// Key names in flexplane_mesh_keys.
const (
	noiseKeyName = "noise"
	derpKeyName  = "derp"
)

// replicaTokenName names the replicas' shared secret in flexplane_mesh_keys.
const replicaTokenName = "replica-token"

// ReplicaToken is the secret the replicas sharing the database p use to
// reach the headscale API of whichever of them runs the control server:
// read from flexplane_mesh_keys, created there by the first replica that
// asks. Whoever can read the database can manage the mesh anyway.
func ReplicaToken(ctx context.Context, p PostgresConfig) (string, error) {
	p, err := p.resolve()
	if err != nil {
		return "", fmt.Errorf("meshcontrol: replica token: %w", err)
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	conn, err := openKeys(ctx, p)
	if err != nil {
		return "", fmt.Errorf("meshcontrol: replica token: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("meshcontrol: replica token: %w", err)
	}
	if _, err := conn.Exec(ctx, `INSERT INTO flexplane_mesh_keys (name, private_key) VALUES ($1, $2)
		ON CONFLICT (name) DO NOTHING`, replicaTokenName, hex.EncodeToString(b)); err != nil {
		return "", fmt.Errorf("meshcontrol: replica token: store: %w", err)
	}
	var token string
	if err := conn.QueryRow(ctx, `SELECT private_key FROM flexplane_mesh_keys WHERE name = $1`, replicaTokenName).Scan(&token); err != nil {
		return "", fmt.Errorf("meshcontrol: replica token: read: %w", err)
	}
	return token, nil
}

// openKeys connects to the database and creates flexplane_mesh_keys when
// it is missing.
func openKeys(ctx context.Context, p PostgresConfig) (*pgx.Conn, error) {
	conn, err := pgx.Connect(ctx, p.connString())
	if err != nil {
		return nil, fmt.Errorf("connect to postgres %s:%d: %w", p.Host, p.Port, err)
	}
	// Replicas starting together race here: PostgreSQL's IF NOT EXISTS
	// takes no lock, and the loser's CREATE fails on one of the catalog's
	// unique indexes (the table's name, or its row type's). An advisory
	// lock held for the transaction makes them take turns; once the first
	// committed, the others find the table.
	if err := pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1)`, keysTableLock); err != nil {
			return fmt.Errorf("lock: %w", err)
		}
		_, err := tx.Exec(ctx, `CREATE TABLE IF NOT EXISTS flexplane_mesh_keys (
			name text PRIMARY KEY,
			private_key text NOT NULL,
			created_at timestamptz NOT NULL DEFAULT now())`)
		return err
	}); err != nil {
		conn.Close(context.WithoutCancel(ctx))
		return nil, fmt.Errorf("create table flexplane_mesh_keys: %w", err)
	}
	return conn, nil
}

// keysTableLock is the advisory lock key under which flexplane_mesh_keys
// is created ("flexmesh" in ASCII).
const keysTableLock int64 = 0x666c65786d657368

// syncKeys makes the control server's private keys those kept in the
// database: a key the database lacks is added (the one already in the
// data directory, else a new one; the first server to add it wins), and
// then each key is written to its file for Headscale to read.
func syncKeys(ctx context.Context, p PostgresConfig, files map[string]string) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	conn, err := openKeys(ctx, p)
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	for name, path := range files {
		local, err := localKey(path)
		if err != nil {
			return err
		}
		if _, err := conn.Exec(ctx, `INSERT INTO flexplane_mesh_keys (name, private_key) VALUES ($1, $2)
			ON CONFLICT (name) DO NOTHING`, name, local); err != nil {
			return fmt.Errorf("store the %s key: %w", name, err)
		}
		var stored string
		if err := conn.QueryRow(ctx, `SELECT private_key FROM flexplane_mesh_keys WHERE name = $1`, name).Scan(&stored); err != nil {
			return fmt.Errorf("read the %s key: %w", name, err)
		}
		var k key.MachinePrivate
		if err := k.UnmarshalText([]byte(stored)); err != nil {
			return fmt.Errorf("the %s key in flexplane_mesh_keys: %w", name, err)
		}
		if err := atomicfile.WriteFile(path, []byte(stored), 0o600); err != nil {
			return fmt.Errorf("write the %s key: %w", name, err)
		}
	}
	return nil
}

// localKey is the key in path, or a new one when there is none.
func localKey(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err == nil {
		var k key.MachinePrivate
		if err := k.UnmarshalText([]byte(strings.TrimSpace(string(b)))); err != nil {
			return "", fmt.Errorf("key file %s: %w", filepath.Base(path), err)
		}
		return strings.TrimSpace(string(b)), nil
	}
	if !errors.Is(err, os.ErrNotExist) {
		return "", err
	}
	text, err := key.NewMachine().MarshalText()
	return string(text), err
}
