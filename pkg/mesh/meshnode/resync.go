package meshnode

import (
	"context"
	"fmt"
	"time"

	"tailscale.com/client/local"
	"tailscale.com/ipn"
	"tailscale.com/tsnet"
	"tailscale.com/types/opt"
)

// resyncEvery is the least time between two ResyncMap of one node that
// reach the control server.
const resyncEvery = 30 * time.Second

// resyncTimeout bounds each of the two preference changes of a resync,
// whatever the caller's deadline: a node left paused would hear nothing
// from the control server again.
const resyncTimeout = 10 * time.Second

// ResyncMap ends the node's map stream from the control server and opens a
// new one, on which the server sends the whole map of the mesh again. It
// is the repair for a node whose map is known to be stale: the control
// server (Headscale) drops a node's stream for good when the node reads it
// too slowly during a burst of changes, while the session itself stays
// open, so the node would keep its old map until it restarts. It does
// nothing when the node resynced less than 30 s ago, and reports whether it
// resynced.
//
// The stream is ended by pausing the node's control client (tailscale's
// Sync preference) and resumed at once; the tunnels stay up meanwhile.
func (n *Node) ResyncMap(ctx context.Context) (bool, error) {
	n.mu.Lock()
	if !n.resynced.IsZero() && time.Since(n.resynced) < resyncEvery {
		n.mu.Unlock()
		return false, nil
	}
	n.resynced = time.Now()
	n.mu.Unlock()
	pctx, cancel := context.WithTimeout(ctx, resyncTimeout)
	err := setSync(pctx, n.lc, false)
	cancel()
	// Resume even when the pause reported an error: it may have been
	// applied.
	if rerr := n.resumeSync(context.WithoutCancel(ctx)); rerr != nil {
		return false, rerr
	}
	if err != nil {
		return false, fmt.Errorf("meshnode: resync map: %w", err)
	}
	n.log.Info("meshnode: asked the control server for the whole map again")
	return true, nil
}

// PauseMapForTest pauses the node's map stream from the control server
// until ResyncMap: the node keeps its map as it is, as when the control
// server dropped the stream. For tests of the repair.
func (n *Node) PauseMapForTest(ctx context.Context) error {
	return setSync(ctx, n.lc, false)
}

// resumeSync makes sure the node's control client is not paused (see
// ResyncMap): the preference is kept in the node's state, so a process that
// ended between the pause and the resume starts paused otherwise.
func (n *Node) resumeSync(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, resyncTimeout)
	defer cancel()
	if err := setSync(ctx, n.lc, true); err != nil {
		return fmt.Errorf("meshnode: resume the map stream: %w", err)
	}
	return nil
}

// setSync sets the node's Sync preference: false pauses its control
// client, true resumes it.
func setSync(ctx context.Context, lc *local.Client, on bool) error {
	_, err := lc.EditPrefs(ctx, &ipn.MaskedPrefs{SyncSet: true, Prefs: ipn.Prefs{Sync: opt.NewBool(on)}})
	return err
}

// unpause starts srv and resumes its control client if its state keeps it
// paused (see resumeSync).
func unpause(ctx context.Context, srv *tsnet.Server) error {
	if err := srv.Start(); err != nil {
		return err
	}
	lc, err := srv.LocalClient()
	if err != nil {
		return err
	}
	p, err := lc.GetPrefs(ctx)
	if err != nil || !p.Sync.EqualBool(false) {
		return err
	}
	return setSync(ctx, lc, true)
}
