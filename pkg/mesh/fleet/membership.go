package fleet

import (
	"cmp"
	"context"
	"crypto/rand"
	"fmt"
	"slices"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/flexplane/flexplane/pkg/proxmox/pvecert"
	agentv1 "github.com/flexplane/flexplane/proto/flexplane/agent/v1"
)

// An agent is a host of a zone only by what it proves, never by what it
// says (docs/install/agents.md): the registry sends it a fresh nonce
// (Prove), and the agent answers with its node's certificate, the cluster
// CA and a signature with the node's key over the nonce and its own mesh
// identity. The zone is the identity of that CA and the node the name in
// the certificate; both must be what the agent's Info claims. Of several
// agents proving one node of a zone, the first in the mesh (the lowest mesh
// ID) holds it while the mesh knows it; the others are refused.

// RefusedAgent is an agent of the mesh kept out of every zone, and why.
type RefusedAgent struct {
	// MeshID and MeshName identify the agent in the mesh.
	MeshID   uint64
	MeshName string
	// ClaimedZone and ClaimedZoneID are the cluster name and identity the
	// agent's Info claims; ClaimedNode the node.
	ClaimedZone   string
	ClaimedZoneID string
	ClaimedNode   string
	// Reason says why the agent is in no zone.
	Reason string
	// Since is when the registry first refused it for this reason.
	Since time.Time
}

// verdict is what one proof showed: member, or refusal saying why not.
type verdict struct {
	member  *pvecert.Member
	refusal string
}

// prove asks the agent of node for a membership proof of a fresh nonce and
// checks it against what info claims. An error is a proof that could not
// be had (the call failed on its way, not by the agent's answer): nothing
// is decided then.
func (r *Registry) prove(ctx context.Context, client agentv1.AgentServiceClient, node MeshNode, info *agentv1.InfoResponse) (verdict, error) {
	nonce := make([]byte, pvecert.NonceSize)
	_, _ = rand.Read(nonce) // never fails (crypto/rand)
	resp, err := client.Prove(ctx, &agentv1.ProveRequest{Nonce: nonce})
	if err != nil {
		switch st := status.Convert(err); st.Code() {
		case codes.Unimplemented:
			return verdict{refusal: fmt.Sprintf("the agent (version %s) cannot prove its membership: update it", info.GetAgentVersion())}, nil
		case codes.FailedPrecondition, codes.InvalidArgument, codes.PermissionDenied:
			return verdict{refusal: "the agent could not prove its membership: " + st.Message()}, nil
		default:
			return verdict{}, fmt.Errorf("zones: prove: %w", err)
		}
	}
	m, err := pvecert.Verify(pvecert.Proof{NodeCert: resp.GetNodeCertificate(), CA: resp.GetClusterCa(), Signature: resp.GetSignature()},
		nonce, node.NodeKey, time.Now())
	if err != nil {
		return verdict{refusal: err.Error()}, nil
	}
	if m.ClusterID != info.GetClusterId() || m.Node != info.GetNodeName() {
		return verdict{refusal: fmt.Sprintf("the agent claims node %q of zone %s, its certificate is node %q of zone %s",
			info.GetNodeName(), info.GetClusterId(), m.Node, m.ClusterID)}, nil
	}
	return verdict{member: &m}, nil
}

// setVerdictLocked records the verdict of a proof made with info, and
// warns when the agent is refused for a new reason. r.mu must be held.
func (r *Registry) setVerdictLocked(a *agentState, node MeshNode, info *agentv1.InfoResponse, v verdict) {
	a.provenKey = node.NodeKey
	a.member = v.member
	if v.refusal == "" {
		if a.refusal != "" {
			r.log.Info("zones: agent proved its membership", "mesh_name", node.Name, "zone", v.member.ClusterID, "node", v.member.Node)
		}
		a.refusal, a.refusedSince = "", time.Time{}
		return
	}
	if v.refusal != a.refusal {
		a.refusedSince = time.Now()
		r.log.Warn("zones: agent refused: it is in no zone", "mesh_name", node.Name, "mesh_id", node.ID,
			"claimed_zone", info.GetClusterId(), "claimed_node", info.GetNodeName(), "reason", v.refusal)
	}
	a.refusal = v.refusal
}

// membersLocked decides which agents are hosts of zones: those proven, and
// of several proving one node of a zone the one with the lowest mesh ID.
// It lists the others as refused, with why. r.mu must be held.
func (r *Registry) membersLocked() (map[uint64]bool, []RefusedAgent) {
	type slot struct{ zone, node string }
	holder := map[slot]*agentState{}
	for _, a := range r.agents {
		if a.info == nil || a.member == nil {
			continue
		}
		k := slot{a.member.ClusterID, a.member.Node}
		if h := holder[k]; h == nil || a.node.ID < h.node.ID {
			holder[k] = a
		}
	}
	members := map[uint64]bool{}
	var refused []RefusedAgent
	for _, a := range r.agents {
		if a.info == nil {
			continue
		}
		reason, since := a.refusal, a.refusedSince
		if a.member != nil {
			h := holder[slot{a.member.ClusterID, a.member.Node}]
			if h == a {
				members[a.node.ID] = true
				a.heldBy, a.heldSince = "", time.Time{}
				continue
			}
			if a.heldBy != h.node.Name {
				a.heldBy, a.heldSince = h.node.Name, time.Now()
				r.log.Warn("zones: agent refused: its node is another agent's", "mesh_name", a.node.Name, "mesh_id", a.node.ID,
					"claimed_zone", a.member.ClusterID, "claimed_node", a.member.Node, "held_by", h.node.Name)
			}
			reason = fmt.Sprintf("node %q of zone %s is held by mesh node %s (mesh ID %d), the first to prove it; remove that node from the mesh to replace it",
				a.member.Node, a.member.ClusterID, h.node.Name, h.node.ID)
			since = a.heldSince
		}
		refused = append(refused, RefusedAgent{
			MeshID: a.node.ID, MeshName: a.node.Name,
			ClaimedZone: a.info.GetClusterName(), ClaimedZoneID: a.info.GetClusterId(), ClaimedNode: a.info.GetNodeName(),
			Reason: reason, Since: since,
		})
	}
	slices.SortFunc(refused, func(a, b RefusedAgent) int {
		return cmp.Or(cmp.Compare(a.MeshName, b.MeshName), cmp.Compare(a.MeshID, b.MeshID))
	})
	return members, refused
}

// RefusedAgents lists the agents of the mesh that are in no zone although
// they answered: their membership proof failed or is missing, disagrees
// with what they claim, or proves a node another agent holds. Sorted by
// mesh name.
func (r *Registry) RefusedAgents() []RefusedAgent {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.snapshot().refused)
}
