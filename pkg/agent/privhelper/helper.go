// Package privhelper is the agent's privileged helper: the small process of
// a node that does the work the agent cannot do as an unprivileged user,
// and nothing else. It serves flexplane.helper.v1 (snippet files, the
// volume I/O of moves, tenants' uploaded images) and flexplane.edge.v1
// (the edge gateways) on a unix socket that only the agent's user may
// use: the socket is 0660 in the
// agent's group, and every connection's peer credentials (SO_PEERCRED) must
// be the agent's uid and gid. Every request is checked by the helper
// itself: snippets and uploads only in its configured directories under
// plain names (uploads of the length announced, never over a file),
// volumes only of guests whose config on this node (Proxmox's own file,
// which the helper reads) marks them for a move, gateways only as
// flexplane.edge.v1 validates them. It holds no Proxmox credential.
//
// The agent reaches it with Dial (Config.HelperSocket of package agent);
// without a helper the agent does the same work in its own process, as
// root. See docs/install/agents.md.
package privhelper

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"slices"

	"golang.org/x/sys/unix"
	"google.golang.org/grpc"

	"github.com/flexplane/flexplane/pkg/edge"
	"github.com/flexplane/flexplane/pkg/support/unixsock"
	edgev1 "github.com/flexplane/flexplane/proto/flexplane/edge/v1"
	helperv1 "github.com/flexplane/flexplane/proto/flexplane/helper/v1"
)

// Defaults of a stock Proxmox VE node.
const (
	// DefaultSocket is where the helper listens (systemd's
	// RuntimeDirectory=flexplane-agent-helper).
	DefaultSocket = "/run/flexplane-agent-helper/helper.sock"
	// DefaultGuestConfigDir holds this node's guest configs in Proxmox's
	// cluster file system (/etc/pve/local is the node's own directory).
	DefaultGuestConfigDir = "/etc/pve/local/qemu-server"
)

// DefaultSnippetDirs and DefaultVolumeDirs are those of a stock node's
// storages (local's directory, local-lvm's volume group).
var (
	DefaultSnippetDirs = []string{"/var/lib/vz/snippets"}
	DefaultVolumeDirs  = []string{"/var/lib/vz/images", "/dev/pve"}
)

// Config configures a helper. AgentUID and AgentGID are required: there is
// no default peer.
type Config struct {
	// Socket is the unix socket's path. Default DefaultSocket.
	Socket string
	// AgentUID and AgentGID are the only peer credentials (SO_PEERCRED) a
	// connection is served with; the socket is made 0660 in group
	// AgentGID. A connection of any other process is closed unserved.
	AgentUID, AgentGID int
	// SnippetDirs are the directories snippet files may be written into
	// and deleted from (each storage's snippets directory, absolute).
	// Default DefaultSnippetDirs.
	SnippetDirs []string
	// VolumeDirs are the directories a guest's volume may be opened in
	// (the storages' image directories and LVM volume groups' /dev
	// directories). They must be writable by root only: a volume's file
	// or link there is trusted to be the guest's its name says. Default
	// DefaultVolumeDirs.
	VolumeDirs []string
	// UploadDirs are the directories tenants' uploaded files may be
	// written into (WriteUpload): each file storage's import and
	// template/iso directories, absolute. Default DefaultUploadDirs.
	UploadDirs []string
	// GuestConfigDir holds this node's guest configs, <vmid>.conf in
	// Proxmox's format, from which the helper reads a guest's marks and
	// disks. Default DefaultGuestConfigDir.
	GuestConfigDir string
	// EdgeBridgeNamespace and EdgeNamespacePrefix configure the edge
	// gateways as edge.Config's BridgeNamespace and NamespacePrefix.
	EdgeBridgeNamespace string
	EdgeNamespacePrefix string
	// Logger receives what the helper does and refuses. Default
	// slog.Default().
	Logger *slog.Logger
}

func (c *Config) setDefaults() error {
	if c.Socket == "" {
		c.Socket = DefaultSocket
	}
	if c.SnippetDirs == nil {
		c.SnippetDirs = DefaultSnippetDirs
	}
	if c.VolumeDirs == nil {
		c.VolumeDirs = DefaultVolumeDirs
	}
	if c.UploadDirs == nil {
		c.UploadDirs = DefaultUploadDirs
	}
	if c.GuestConfigDir == "" {
		c.GuestConfigDir = DefaultGuestConfigDir
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.AgentUID < 0 || c.AgentGID < 0 {
		return errors.New("privhelper: the agent's uid and gid are required")
	}
	for _, dirs := range [][]string{c.SnippetDirs, c.VolumeDirs, c.UploadDirs, {c.GuestConfigDir}} {
		for _, d := range dirs {
			if !filepath.IsAbs(d) || filepath.Clean(d) != d {
				return fmt.Errorf("privhelper: directory %q is not a clean absolute path", d)
			}
		}
	}
	return nil
}

// Helper is a running helper.
type Helper struct {
	cfg    Config
	log    *slog.Logger
	grpc   *grpc.Server
	served chan struct{}
}

// Start listens on cfg.Socket and serves until Close.
func Start(cfg Config) (*Helper, error) {
	if err := cfg.setDefaults(); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(filepath.Dir(cfg.Socket), 0o755); err != nil {
		return nil, fmt.Errorf("privhelper: %w", err)
	}
	ln, err := unixsock.Listen(cfg.Socket)
	if err != nil {
		return nil, fmt.Errorf("privhelper: %w", err)
	}
	// The agent's group may connect; nobody else but root.
	err = os.Chown(cfg.Socket, -1, cfg.AgentGID)
	if err == nil {
		err = os.Chmod(cfg.Socket, 0o660)
	}
	if err != nil {
		ln.Close()
		return nil, fmt.Errorf("privhelper: %w", err)
	}
	h := &Helper{cfg: cfg, log: cfg.Logger, served: make(chan struct{})}
	h.grpc = grpc.NewServer(grpc.MaxRecvMsgSize(maxChunk + 64<<10))
	helperv1.RegisterHelperServiceServer(h.grpc, &service{h: h})
	edgev1.RegisterEdgeServiceServer(h.grpc, NewEdgeServer(edge.NewManager(edge.Config{
		BridgeNamespace: cfg.EdgeBridgeNamespace, NamespacePrefix: cfg.EdgeNamespacePrefix, Logger: h.log,
	}), h.log))
	go func() {
		defer close(h.served)
		if err := h.grpc.Serve(&peerListener{Listener: ln, uid: cfg.AgentUID, gid: cfg.AgentGID, log: h.log}); err != nil && !errors.Is(err, grpc.ErrServerStopped) {
			h.log.Error("privhelper: serve", "err", err)
		}
	}()
	h.log.Info("privhelper: serving", "socket", cfg.Socket, "agent_uid", cfg.AgentUID, "agent_gid", cfg.AgentGID,
		"snippet_dirs", cfg.SnippetDirs, "volume_dirs", cfg.VolumeDirs, "upload_dirs", cfg.UploadDirs)
	return h, nil
}

// Shutdown stops accepting connections and waits for the calls in flight
// until ctx ends, then ends them.
func (h *Helper) Shutdown(ctx context.Context) {
	stopped := make(chan struct{})
	go func() { h.grpc.GracefulStop(); close(stopped) }()
	select {
	case <-stopped:
	case <-ctx.Done():
		h.grpc.Stop()
	}
	<-h.served
}

// peerListener accepts only connections whose peer is the agent's user.
type peerListener struct {
	net.Listener
	uid, gid int
	log      *slog.Logger
}

func (l *peerListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		cred, err := peerCred(c)
		if err == nil && int(cred.Uid) == l.uid && int(cred.Gid) == l.gid {
			return c, nil
		}
		c.Close()
		if err != nil {
			l.log.Warn("privhelper: refused a connection without peer credentials", "err", err)
			continue
		}
		l.log.Warn("privhelper: refused a connection of another user", "uid", cred.Uid, "gid", cred.Gid, "pid", cred.Pid)
	}
}

// peerCred reads the credentials of a unix connection's peer.
func peerCred(c net.Conn) (*unix.Ucred, error) {
	uc, ok := c.(*net.UnixConn)
	if !ok {
		return nil, errors.New("not a unix connection")
	}
	raw, err := uc.SyscallConn()
	if err != nil {
		return nil, err
	}
	var cred *unix.Ucred
	var serr error
	if err := raw.Control(func(fd uintptr) { cred, serr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED) }); err != nil {
		return nil, err
	}
	return cred, serr
}

// service implements helperv1.HelperServiceServer.
type service struct {
	helperv1.UnimplementedHelperServiceServer
	h *Helper
}

// configured reports whether dir is one of dirs.
func configured(dirs []string, dir string) bool { return slices.Contains(dirs, dir) }
