package agent

import (
	"log/slog"
	"path/filepath"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/flexplane/flexplane/pkg/proxmox/pvecert"
	agentv1 "github.com/flexplane/flexplane/proto/flexplane/agent/v1"
)

// TestProveRefuses: a nonce of another size is INVALID_ARGUMENT, key or
// certificate files the agent cannot read FAILED_PRECONDITION naming the
// file; neither signs anything. (A proof that verifies is made by the real
// agents of pkg/dev/meshtest.)
func TestProveRefuses(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	svc := &service{a: &Agent{cfg: Config{NodeName: "pve1", NodeKeyFile: filepath.Join(dir, "pve-ssl.key"),
		NodeCertFile: filepath.Join(dir, "pve-ssl.pem"), ClusterCAFile: filepath.Join(dir, "pve-root-ca.pem")}, log: slog.New(slog.DiscardHandler)}}
	for _, tc := range []struct {
		nonce []byte
		code  codes.Code
	}{
		{nil, codes.InvalidArgument},
		{make([]byte, pvecert.NonceSize-1), codes.InvalidArgument},
		{make([]byte, pvecert.NonceSize), codes.FailedPrecondition},
	} {
		resp, err := svc.Prove(t.Context(), &agentv1.ProveRequest{Nonce: tc.nonce})
		if status.Code(err) != tc.code || resp != nil {
			t.Errorf("nonce of %d bytes: %v, %v; want %s", len(tc.nonce), resp, err, tc.code)
		}
	}
}
