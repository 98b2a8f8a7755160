package graph

import (
	"github.com/flexplane/flexplane/graph/model"
	"github.com/flexplane/flexplane/graph/server/apierr"
	"github.com/flexplane/flexplane/pkg/mesh/fleet"
	"github.com/flexplane/flexplane/pkg/release"
	"github.com/flexplane/flexplane/pkg/rollout"
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
func hostUpdateModel(u fleet.UpdateStatus) *model.HostUpdate {
	state, ok := updatePhases[u.Phase]
	if !ok {
		return nil
	}
	m := &model.HostUpdate{State: state, Version: optString(u.Version), From: optString(u.From), Reason: optString(u.Reason), OperationID: optString(u.Operation)}
	if u.UpdatedAt.UnixMilli() > 0 {
		m.UpdatedAt = ptr(u.UpdatedAt.UTC())
	}
	return m
}

var rolloutStates = map[string]model.OperationState{
	rollout.Running: model.OperationStateRunning, rollout.Succeeded: model.OperationStateSucceeded, rollout.Failed: model.OperationStateFailed,
}

func releaseModel(p *release.Published) *model.AgentRelease {
	m := p.Manifest
	return &model.AgentRelease{Version: m.Version, Platform: m.Platform, Size: int(m.Size), Sha256: m.SHA256, MinVersion: optString(m.MinVersion), NotAfter: m.NotAfter}
}

func releasesUnavailable() error {
	return apierr.New(apierr.NotFound, "agent releases are not configured on this orchestrator (no release key)")
}
