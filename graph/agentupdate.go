package graph

import (
	"time"

	"github.com/flexplane/flexplane/graph/model"
	"github.com/flexplane/flexplane/graph/server/apierr"
	"github.com/flexplane/flexplane/pkg/mesh/zones"
	"github.com/flexplane/flexplane/pkg/release"
	"github.com/flexplane/flexplane/pkg/rollout"
	"github.com/flexplane/flexplane/pkg/tenancy"
)

// agentTarget is what a host's updateAvailable is decided against.
type agentTarget = rollout.Target

// agentTarget reads the newest releases (nothing without a store).
func (r *Resolver) agentTarget() agentTarget { return r.Rollouts.Target(r.AgentVersion) }

var updatePhases = map[string]model.AgentUpdateState{
	"idle": model.AgentUpdateStateIdle, "downloading": model.AgentUpdateStateDownloading,
	"verifying": model.AgentUpdateStateVerifying, "restarting": model.AgentUpdateStateRestarting,
	"probation": model.AgentUpdateStateProbation, "done": model.AgentUpdateStateDone,
	"rolled-back": model.AgentUpdateStateRolledBack, "refused": model.AgentUpdateStateRefused,
}

// hostUpdateModel is an agent's reported update state (nil when it reports
// none).
func hostUpdateModel(u zones.UpdateStatus) *model.HostUpdate {
	state, ok := updatePhases[u.Phase]
	if !ok {
		return nil
	}
	m := &model.HostUpdate{State: state, Version: optional(u.Version), From: optional(u.From), Reason: optional(u.Reason), OperationID: optional(u.Operation)}
	if u.UpdatedAt.UnixMilli() > 0 {
		m.UpdatedAt = ptr(u.UpdatedAt.UTC())
	}
	return m
}

func optional(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

var rolloutStates = map[string]model.OperationState{
	rollout.Running: model.OperationStateRunning, rollout.Succeeded: model.OperationStateSucceeded, rollout.Failed: model.OperationStateFailed,
}

var rolloutHostStates = map[string]model.AgentUpdateHostState{
	rollout.HostPending: model.AgentUpdateHostStatePending, rollout.HostUpdating: model.AgentUpdateHostStateUpdating,
	rollout.HostDone: model.AgentUpdateHostStateDone, rollout.HostFailed: model.AgentUpdateHostStateFailed,
	rollout.HostSkipped: model.AgentUpdateHostStateSkipped,
}

func rolloutModel(ro *rollout.Rollout) *model.AgentUpdateOperation {
	m := &model.AgentUpdateOperation{
		ID: ro.ID, Version: ro.Version, State: rolloutStates[ro.State], Error: optional(ro.Error), Batch: ro.Batch,
		StartedAt: ro.StartedAt, UpdatedAt: ro.UpdatedAt,
	}
	if !ro.FinishedAt.IsZero() {
		m.FinishedAt = ptr(ro.FinishedAt)
	}
	for _, h := range ro.Hosts {
		hm := &model.AgentUpdateHost{
			ID: tenancy.HostRef{ZoneID: h.ZoneID, Node: h.Node}.ID(), Name: h.Node, Zone: h.ZoneName, Batch: h.Batch,
			From: optional(h.From), State: rolloutHostStates[h.State], Reason: optional(h.Reason),
		}
		if h.Took > 0 {
			hm.Seconds = ptr(h.Took.Round(time.Millisecond).Seconds())
		}
		m.Hosts = append(m.Hosts, hm)
	}
	return m
}

func releaseModel(p *release.Published) *model.AgentRelease {
	m := p.Manifest
	return &model.AgentRelease{Version: m.Version, Platform: m.Platform, Size: int(m.Size), Sha256: m.SHA256, MinVersion: optional(m.MinVersion), NotAfter: m.NotAfter}
}

func releasesUnavailable() error {
	return apierr.New(apierr.NotFound, "agent releases are not configured on this orchestrator (no release key)")
}
