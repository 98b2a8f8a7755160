package agent

import (
	"context"
	"fmt"
	"os"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/flexplane/flexplane/pkg/proxmox/pvecert"
	agentv1 "github.com/flexplane/flexplane/proto/flexplane/agent/v1"
)

// Prove signs the orchestrator's nonce and the agent's own mesh identity
// with the node's TLS key and presents the node certificate and the
// cluster CA (see docs/install/agents.md). The files are read on every
// call: Proxmox renews pve-ssl.pem in place.
func (s *service) Prove(ctx context.Context, req *agentv1.ProveRequest) (*agentv1.ProveResponse, error) {
	if len(req.GetNonce()) != pvecert.NonceSize {
		return nil, status.Errorf(codes.InvalidArgument, "agent: prove: the nonce has %d bytes, not %d", len(req.GetNonce()), pvecert.NonceSize)
	}
	cfg := s.a.cfg
	read := func(path string) ([]byte, error) {
		b, err := os.ReadFile(path)
		if err != nil {
			s.a.log.Warn("agent: prove: read", "file", path, "err", err)
			return nil, status.Errorf(codes.FailedPrecondition, "agent: prove: %v", err)
		}
		return b, nil
	}
	keyPEM, err := read(cfg.NodeKeyFile)
	if err != nil {
		return nil, err
	}
	cert, err := read(cfg.NodeCertFile)
	if err != nil {
		return nil, err
	}
	ca, err := read(cfg.ClusterCAFile)
	if err != nil {
		return nil, err
	}
	key, err := pvecert.ParseKey(keyPEM)
	if err != nil {
		return nil, status.Errorf(codes.FailedPrecondition, "agent: prove: %s: %v", cfg.NodeKeyFile, err)
	}
	meshKey, err := s.a.node.NodeKey(ctx)
	if err != nil {
		return nil, status.Errorf(codes.Unavailable, "agent: prove: %v", err)
	}
	sig, err := pvecert.Sign(key, req.GetNonce(), meshKey)
	if err != nil {
		return nil, status.Error(codes.FailedPrecondition, fmt.Sprintf("agent: prove: %v", err))
	}
	return &agentv1.ProveResponse{NodeCertificate: cert, ClusterCa: ca, MeshNodeKey: meshKey, Signature: sig}, nil
}
