package agent

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/flexplane/flexplane/pkg/agent/privhelper"
	"github.com/flexplane/flexplane/pkg/support/atomicfile"
	agentv1 "github.com/flexplane/flexplane/proto/flexplane/agent/v1"
)

// Snippets. Proxmox's API uploads ISO images, container templates and
// imports, never `snippets` (the files a VM's cicustom names, such as its
// cloud-init user-data), so the agent writes them itself: it asks its
// Proxmox where the storage's directory is and whether the storage takes
// snippets on this node, then writes <path>/snippets/<name> atomically
// (a temporary file renamed over it). The orchestrator sends the name and
// the bytes only; the path comes from Proxmox, the name is a plain file
// name, so nothing is written outside a snippets directory.

// MaxSnippetBytes bounds a snippet's size.
const MaxSnippetBytes = privhelper.MaxSnippetBytes

// snippetsDir returns the snippets directory of storage on this node, or
// a gRPC status: NOT_FOUND for an unknown storage, FAILED_PRECONDITION for
// one without `snippets` content or a directory.
func (a *Agent) snippetsDir(ctx context.Context, storage, name string) (string, error) {
	if !segmentName(storage) {
		return "", status.Errorf(codes.InvalidArgument, "agent: %q is not a storage id", storage)
	}
	if err := privhelper.CheckSnippetName(name); err != nil {
		return "", status.Error(codes.InvalidArgument, "agent: "+err.Error())
	}
	dir, err := a.contentDir(ctx, storage, "snippets")
	if err != nil {
		return "", err
	}
	if dir == "" {
		return "", status.Errorf(codes.FailedPrecondition, "agent: storage %s is not a file storage", storage)
	}
	return dir, nil
}

// contentSubdir is the directory of a file storage that holds each
// content the agent writes, as Proxmox lays them out.
var contentSubdir = map[string]string{"snippets": "snippets", "import": "import", "iso": "template/iso"}

// contentDir returns the directory of content in storage on this node
// (under Config.FileRoot), "" when the storage is no file storage (its
// config has no path), or a gRPC status: NOT_FOUND for an unknown
// storage, FAILED_PRECONDITION for a file storage without that content
// or not active on this node. The path comes from Proxmox, the
// subdirectory from contentSubdir.
func (a *Agent) contentDir(ctx context.Context, storage, content string) (string, error) {
	sub := contentSubdir[content]
	if sub == "" {
		return "", status.Errorf(codes.InvalidArgument, "agent: no directory for content %q", content)
	}
	var cfg struct {
		Path string `json:"path"`
	}
	if err := a.storageGet(ctx, "/storage/"+url.PathEscape(storage), storage, &cfg); err != nil {
		return "", err
	}
	if !filepath.IsAbs(cfg.Path) {
		return "", nil
	}
	var st struct {
		Content string `json:"content"`
		Active  int    `json:"active"`
		Enabled *int   `json:"enabled"`
	}
	if err := a.storageGet(ctx, "/nodes/"+a.cfg.NodeName+"/storage/"+url.PathEscape(storage)+"/status", storage, &st); err != nil {
		return "", err
	}
	if !slices.Contains(strings.Split(st.Content, ","), content) {
		return "", status.Errorf(codes.FailedPrecondition, "agent: storage %s does not allow %s content (it has %q)", storage, content, st.Content)
	}
	if st.Active != 1 || (st.Enabled != nil && *st.Enabled != 1) {
		return "", status.Errorf(codes.FailedPrecondition, "agent: storage %s is not active on %s", storage, a.cfg.NodeName)
	}
	root := a.cfg.FileRoot
	if root == "" {
		root = "/"
	}
	return filepath.Join(root, filepath.Clean(cfg.Path), sub), nil
}

// storageGet reads path of the local Proxmox about storage into v.
func (a *Agent) storageGet(ctx context.Context, path, storage string, v any) error {
	resp, err := a.pve.do(ctx, http.MethodGet, path, "", nil, "")
	if err != nil {
		return status.Errorf(codes.Unavailable, "agent: proxmox: %v", err)
	}
	if resp.status != http.StatusOK {
		return status.Errorf(codes.NotFound, "agent: storage %s: %s", storage, resp.reason)
	}
	if err := decodeData(resp.body, v); err != nil {
		return status.Errorf(codes.Internal, "agent: storage %s: %v", storage, err)
	}
	return nil
}

// WriteSnippet implements agentv1.AgentServiceServer.
func (s *service) WriteSnippet(ctx context.Context, req *agentv1.WriteSnippetRequest) (*agentv1.WriteSnippetResponse, error) {
	a := s.a
	if len(req.GetData()) > MaxSnippetBytes {
		return nil, status.Errorf(codes.InvalidArgument, "agent: snippet is %d bytes, more than %d", len(req.GetData()), MaxSnippetBytes)
	}
	dir, err := a.snippetsDir(ctx, req.GetStorage(), req.GetName())
	if err != nil {
		return nil, err
	}
	if a.helper != nil {
		// The helper checks the directory and the name again itself.
		if err := a.helper.WriteSnippet(ctx, dir, req.GetName(), req.GetData()); err != nil {
			return nil, helperError("write snippet "+req.GetName(), err)
		}
	} else if err := writeSnippet(dir, req.GetName(), req.GetData()); err != nil {
		return nil, status.Errorf(codes.Internal, "agent: write snippet %s: %v", req.GetName(), err)
	}
	volume := req.GetStorage() + ":snippets/" + req.GetName()
	a.log.Info("agent: snippet written", "volume", volume, "bytes", len(req.GetData()))
	return &agentv1.WriteSnippetResponse{Volume: volume}, nil
}

// DeleteSnippet implements agentv1.AgentServiceServer.
func (s *service) DeleteSnippet(ctx context.Context, req *agentv1.DeleteSnippetRequest) (*agentv1.DeleteSnippetResponse, error) {
	a := s.a
	dir, err := a.snippetsDir(ctx, req.GetStorage(), req.GetName())
	if err != nil {
		return nil, err
	}
	if a.helper != nil {
		deleted, err := a.helper.DeleteSnippet(ctx, dir, req.GetName())
		if err != nil {
			return nil, helperError("delete snippet "+req.GetName(), err)
		}
		if !deleted {
			return &agentv1.DeleteSnippetResponse{}, nil
		}
	} else {
		err = os.Remove(filepath.Join(dir, req.GetName()))
		if errors.Is(err, fs.ErrNotExist) {
			return &agentv1.DeleteSnippetResponse{}, nil
		}
		if err != nil {
			return nil, status.Errorf(codes.Internal, "agent: delete snippet %s: %v", req.GetName(), err)
		}
	}
	a.log.Info("agent: snippet deleted", "volume", req.GetStorage()+":snippets/"+req.GetName())
	return &agentv1.DeleteSnippetResponse{Deleted: true}, nil
}

// writeSnippet writes dir/name in the agent's own process (no helper).
func writeSnippet(dir, name string, data []byte) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	r, err := os.OpenRoot(dir)
	if err != nil {
		return err
	}
	defer r.Close()
	return atomicfile.WriteFileIn(r, name, data, privhelper.SnippetMode)
}

// helperError is the status of the helper's refusal or failure of op, its
// code kept.
func helperError(op string, err error) error {
	st := status.Convert(err)
	return status.Errorf(cmp.Or(st.Code(), codes.Internal), "agent: %s: %s", op, st.Message())
}

// snippetsOnly serves the snippet RPCs of AgentService alone.
type snippetsOnly struct {
	agentv1.UnimplementedAgentServiceServer
	s *service
}

func (o snippetsOnly) WriteSnippet(ctx context.Context, req *agentv1.WriteSnippetRequest) (*agentv1.WriteSnippetResponse, error) {
	return o.s.WriteSnippet(ctx, req)
}

func (o snippetsOnly) DeleteSnippet(ctx context.Context, req *agentv1.DeleteSnippetRequest) (*agentv1.DeleteSnippetResponse, error) {
	return o.s.DeleteSnippet(ctx, req)
}

// SnippetServiceForTest returns the agent's WriteSnippet and DeleteSnippet
// (every other RPC is UNIMPLEMENTED) for cfg's node and Proxmox
// (NodeName, ProxmoxURL, ProxmoxToken, ProxmoxFingerprint, FileRoot),
// without the mesh or its caller check: for harnesses that serve it on
// loopback in front of a simulated node (pkg/dev/vmtest).
func SnippetServiceForTest(cfg Config) (agentv1.AgentServiceServer, error) {
	if !segmentName(cfg.NodeName) {
		return nil, fmt.Errorf("agent: node name %q is not a Proxmox node name", cfg.NodeName)
	}
	p, err := newPVE(cfg.ProxmoxURL, cfg.ProxmoxToken, cfg.ProxmoxFingerprint)
	if err != nil {
		return nil, fmt.Errorf("agent: %w", err)
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return snippetsOnly{s: &service{a: &Agent{cfg: cfg, pve: p, log: log.With("node", cfg.NodeName)}}}, nil
}
