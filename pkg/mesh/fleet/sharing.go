package fleet

import (
	"context"
	"maps"
	"time"
)

// Replicas share the liveness checks (Registry.Share): the replica that
// samples a zone, the owner of its sync shard, pings and Health-checks the
// zone's agents as a lone replica does and publishes the hosts it finds
// not online; every other replica takes a host's status from the mesh's
// own peer state and from that publication, and calls an agent's Health
// only when it has a reason: a call to the agent failed, the mesh stopped
// showing it, or the sampling replica's verdict on it was withdrawn. N
// replicas thus make the idle calls of one, and a host the sampler finds
// offline is offline on every replica as soon as its publication arrives.

// Sharing is how orchestrator replicas share the liveness checks of the
// zones' agents (see Registry.Share).
type Sharing interface {
	// Samples reports whether this replica checks the agents of the zone
	// called zone (Zone.Name).
	Samples(zone string) bool
	// Publish records, for the other replicas, the hosts of zone that
	// this replica found not online, by mesh ID. The registry calls it
	// when that set changes, and when it begins sampling zone.
	Publish(ctx context.Context, zone string, down map[uint64]Down) error
	// Published is what the replica sampling zone last published; ok is
	// false when nothing was. The registry does not modify the map.
	Published(zone string) (down map[uint64]Down, ok bool)
	// Changed returns a channel closed at the next change of what is
	// published or of the zones this replica samples.
	Changed() <-chan struct{}
}

// Down is a host's status other than online, as the replica sampling its
// zone published it.
type Down struct {
	Status HostStatus `json:"status"`
	Detail string     `json:"detail,omitempty"`
}

// Share makes the registry share its agents' liveness checks with the
// other replicas through s; call it at most once, before or while Run
// runs. Without it the registry checks every agent itself.
func (r *Registry) Share(s Sharing) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.share != nil {
		return
	}
	r.share = s
	close(r.shared)
}

// zoneName is the name of the zone the agent proved it is a host of
// (Zone.Name); ok is false for an agent that proved none. a's registry's
// mu must be held.
func (a *agentState) zoneName() (string, bool) {
	if a.info == nil || a.member == nil {
		return "", false
	}
	if n := a.info.GetClusterName(); n != "" {
		return n, true
	}
	return a.member.Node, true // a standalone node is a zone of its own name
}

// follower returns the Sharing of the agent's zone when another replica
// samples it (nil when this one does, or the registry does not share), and
// the zone's name.
func (r *Registry) follower(a *agentState) (Sharing, string) {
	r.mu.Lock()
	share := r.share
	zone, ok := a.zoneName()
	r.mu.Unlock()
	if share == nil || !ok || share.Samples(zone) {
		return nil, ""
	}
	return share, zone
}

// adopt takes the sampling replica's verdict on a as its status.
func (r *Registry) adopt(a *agentState, d Down) {
	detail := "per the replica checking its zone: " + d.Detail
	r.mu.Lock()
	defer r.mu.Unlock()
	a.fromSampler = true
	if a.status == d.Status && a.detail == detail {
		return
	}
	r.log.Info("zones: host status", "mesh_name", a.node.Name, "status", d.Status, "detail", detail, "has_info", a.info != nil)
	a.status, a.detail = d.Status, detail
	r.changedLocked()
}

// followShared runs while Run does, once Share was called: for the zones
// this replica samples it publishes the hosts not online whenever they
// change, and for the others it adopts each new verdict of their sampling
// replica at once, not at the next refresh.
func (r *Registry) followShared(ctx context.Context) {
	select {
	case <-ctx.Done():
		return
	case <-r.shared:
	}
	r.mu.Lock()
	share := r.share
	r.mu.Unlock()
	published := map[string]map[uint64]Down{} // by zone this replica samples: what it last published
	for {
		var retry <-chan time.Time // set when a publication failed
		r.mu.Lock()
		changed := r.changed
		var sampled, followed []*agentState
		zones := map[*agentState]string{}
		ids := map[*agentState]uint64{} // read under mu: a refresh rewrites a.node
		for _, a := range r.agents {
			if z, ok := a.zoneName(); ok {
				zones[a], ids[a] = z, a.node.ID
			}
		}
		r.mu.Unlock()
		shareChanged := share.Changed()

		down := map[string]map[uint64]Down{}
		for a, z := range zones {
			if share.Samples(z) {
				sampled = append(sampled, a)
				if down[z] == nil {
					down[z] = map[uint64]Down{}
				}
			} else {
				followed = append(followed, a)
			}
		}
		r.mu.Lock()
		for _, a := range sampled {
			if a.status != StatusOnline && !a.fromSampler {
				down[zones[a]][a.node.ID] = Down{Status: a.status, Detail: a.detail}
			}
		}
		r.mu.Unlock()
		for z := range published {
			if _, ok := down[z]; !ok {
				delete(published, z) // no longer sampled here (or gone)
			}
		}
		for z, d := range down {
			if last, ok := published[z]; ok && maps.Equal(last, d) {
				continue
			}
			// What is published already (by a former sampler, say) is
			// not written again: nothing published means no host down.
			if cur, ok := share.Published(z); maps.Equal(cur, d) || (!ok && len(d) == 0) {
				published[z] = d
				continue
			}
			if err := share.Publish(ctx, z, d); err != nil {
				if ctx.Err() == nil {
					r.log.Warn("zones: publish the hosts not online", "zone", z, "err", err)
				}
				retry = time.After(r.cfg.RefreshInterval)
				continue
			}
			published[z] = d
		}
		pubs := map[string]map[uint64]Down{} // each zone's document, read once
		for _, a := range followed {
			z := zones[a]
			pub, ok := pubs[z]
			if !ok {
				pub, _ = share.Published(z)
				pubs[z] = pub
			}
			if pub != nil {
				if d, ok := pub[ids[a]]; ok {
					r.adopt(a, d)
				}
			}
		}

		select {
		case <-ctx.Done():
			return
		case <-changed:
		case <-shareChanged:
		case <-retry:
		}
	}
}
