package edgesync

import (
	"cmp"
	"context"
	"slices"
	"strings"
	"time"

	"github.com/flexplane/flexplane/pkg/edge/gateways"
	edgev1 "github.com/flexplane/flexplane/proto/flexplane/edge/v1"
)

// stateTimeout bounds the status call to a gateway's agent.
const stateTimeout = 3 * time.Second

// State implements gateways.Running: the state of zoneID's gateway of vdc
// as the last pass placed it and its agent reports it now. A gateway the
// last pass could not apply is failed; one not placed, or whose agent does
// not report it (within 3 s), is pending; else it is active with the
// agent's counters. On a replica that does not own the zone (Config.Owns)
// the host is the one the owner's passes choose, computed here.
func (s *Syncer) State(ctx context.Context, zoneID, vdc string) gateways.State {
	st := gateways.State{Status: gateways.Pending}
	if err := s.LastError(zoneID, vdc); err != nil {
		st.Status, st.Message = gateways.Failed, "the gateway could not be applied; it is retried within 30 seconds"
		s.log.Warn("edgesync: edge gateway failed", "zone", zoneID, "vdc", vdc, "err", err)
	}
	mesh, ok := s.Placement(zoneID, vdc)
	if !s.owns(zoneID) {
		mesh, ok = s.chosen(ctx, zoneID, vdc)
	}
	if !ok {
		return st
	}
	if z, ok := s.cfg.Zones.Zone(zoneID); ok {
		for _, h := range z.Hosts {
			if h.MeshName == mesh {
				st.Node = h.Node
			}
		}
	}
	c, err := s.cfg.Zones.EdgeClient(mesh)
	if err != nil {
		return st
	}
	sctx, cancel := context.WithTimeout(ctx, stateTimeout)
	defer cancel()
	gs, err := c.GatewayStatus(sctx, &edgev1.GatewayStatusRequest{Vdc: vdc})
	if err != nil {
		if st.Status != gateways.Failed {
			st.Message = "its agent does not report it yet"
		}
		return st
	}
	if st.Status == gateways.Pending {
		st.Status = gateways.Active
	}
	for _, c := range gs.GetState().GetCounters() {
		ec := gateways.Counter{Name: c.GetId(), Packets: c.GetPackets(), Bytes: c.GetBytes()}
		if id, ok := strings.CutPrefix(c.GetId(), "rule:"); ok {
			ec.Name, ec.Rule = id, id
		}
		st.Counters = append(st.Counters, ec)
	}
	slices.SortFunc(st.Counters, func(a, b gateways.Counter) int { return cmp.Compare(a.Name, b.Name) })
	return st
}

// chosen is the host a pass of the zone's owner places zoneID's gateway of
// vdc on.
func (s *Syncer) chosen(ctx context.Context, zoneID, vdc string) (string, bool) {
	z, ok := s.cfg.Zones.Zone(zoneID)
	if !ok {
		return "", false
	}
	var skip map[string]bool
	if s.cfg.Maintenance != nil {
		skip, _ = s.cfg.Maintenance(ctx, z.Name)
	}
	h, ok := ChooseExcept(z, vdc, skip)
	return h.MeshName, ok
}
