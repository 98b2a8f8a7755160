// Package agenttest serves the agent's snippet RPCs (WriteSnippet,
// DeleteSnippet: pkg/agent) over loopback gRPC in front of each node of a
// simulated zone (pkg/dev/vmtest), so that compute's user-data snippets
// are written by the agent's own code, without the mesh.
package agenttest

import (
	"context"
	"net"
	"net/url"
	"strconv"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/flexplane/flexplane/pkg/agent"
	"github.com/flexplane/flexplane/pkg/compute"
	"github.com/flexplane/flexplane/pkg/dev/pvetest"
	"github.com/flexplane/flexplane/pkg/dev/vmtest"
	"github.com/flexplane/flexplane/pkg/orchestrator/snippets"
	agentv1 "github.com/flexplane/flexplane/proto/flexplane/agent/v1"
)

// Snippets lets storage "local" of z take snippets (as an operator
// enables them) and returns the compute.SnippetWriter whose snippets the
// agent code of their node writes; everything stops with the test.
func Snippets(t testing.TB, z *vmtest.Zone) compute.SnippetWriter {
	t.Helper()
	pvetest.EnableSnippets(t, z.Client)
	clients := map[string]agentv1.AgentServiceClient{}
	for _, node := range z.Sim.NodeNames() {
		svc, err := agent.SnippetServiceForTest(agent.Config{NodeName: node, ProxmoxURL: z.Sim.NodeURL(node),
			ProxmoxToken: vmtest.Token, ProxmoxFingerprint: z.Sim.NodeFingerprint(node), FileRoot: z.Sim.NodeRoot(node)})
		if err != nil {
			t.Fatalf("agenttest: %v", err)
		}
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatalf("agenttest: %v", err)
		}
		srv := grpc.NewServer()
		agentv1.RegisterAgentServiceServer(srv, svc)
		go func() { _ = srv.Serve(ln) }()
		t.Cleanup(srv.Stop)
		conn, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatalf("agenttest: %v", err)
		}
		t.Cleanup(func() { conn.Close() })
		clients[node] = agentv1.NewAgentServiceClient(conn)
	}
	zoneID := z.Name
	return snippets.NewWriter(func(zid, node string) (agentv1.AgentServiceClient, bool) {
		c, ok := clients[node]
		return c, ok && zid == zoneID
	})
}

// UserData returns the cloud-init user-data Proxmox gives guest vmid on
// node (GET .../cloudinit/dump?type=user).
func UserData(t testing.TB, z *vmtest.Zone, node string, vmid int) string {
	t.Helper()
	var s string
	if err := z.Client.Get(context.Background(), "/nodes/"+url.PathEscape(node)+"/qemu/"+strconv.Itoa(vmid)+"/cloudinit/dump?type=user", &s); err != nil {
		t.Fatalf("agenttest: cloud-init user-data of %d: %v", vmid, err)
	}
	return s
}

// SnippetVolumes lists the snippets of storage local on node (volids).
func SnippetVolumes(t testing.TB, z *vmtest.Zone, node string) []string {
	t.Helper()
	var vols []struct {
		VolID string `json:"volid"`
	}
	if err := z.Client.Get(context.Background(), "/nodes/"+url.PathEscape(node)+"/storage/local/content?content=snippets", &vols); err != nil {
		t.Fatalf("agenttest: snippets of %s: %v", node, err)
	}
	var out []string
	for _, v := range vols {
		out = append(out, v.VolID)
	}
	return out
}
