package meshnode

import (
	"context"
	"net/netip"
	"time"

	"tailscale.com/ipn"
	"tailscale.com/types/netmap"
)

// watchPeerRetry is the pause before the peer watch starts again after its
// watch of the node's notifications ended with an error.
const watchPeerRetry = time.Second

// watchPeers keeps n.peers, the peers of the node's current map of the mesh
// by mesh address, from the node's notifications (its IPN bus), until ctx
// ends. It asks for the current map first and then for each new one, at
// most every 3 s (tailscale's rate limit of the bus, which coalesces the
// maps a joining mesh sends in bursts). While it has no map (before the
// first, and after its watch failed until it has one again), WhoIs asks
// the node for every connection it has not identified.
//
// Reading the map this way takes the node's backend lock once per watch,
// where its LocalAPI WhoIs takes it for every lookup: a node applying a
// new map holds that lock, and in a mesh of a hundred agents joining at
// once a lookup waited for it longer than a call's deadline.
func (n *Node) watchPeers(ctx context.Context) {
	for ctx.Err() == nil {
		n.watchPeersOnce(ctx)
		n.setPeers(nil)
		select {
		case <-ctx.Done():
		case <-time.After(watchPeerRetry):
		}
	}
}

func (n *Node) watchPeersOnce(ctx context.Context) {
	w, err := n.lc.WatchIPNBus(ctx, ipn.NotifyInitialNetMap|ipn.NotifyRateLimit)
	if err != nil {
		if ctx.Err() == nil {
			n.log.Debug("meshnode: watch the node's peers", "err", err)
		}
		return
	}
	defer w.Close()
	for {
		note, err := w.Next()
		if err != nil {
			if ctx.Err() == nil {
				n.log.Debug("meshnode: watch the node's peers", "err", err)
			}
			return
		}
		if note.NetMap != nil {
			n.setPeers(peersOf(note.NetMap))
		}
	}
}

// peersOf is the peers of a map of the mesh by each of their addresses.
func peersOf(nm *netmap.NetworkMap) map[netip.Addr]Peer {
	out := make(map[netip.Addr]Peer, len(nm.Peers))
	for _, p := range nm.Peers {
		peer := Peer{Name: p.ComputedName(), Tags: p.Tags().AsSlice()}
		for _, pfx := range p.Addresses().All() {
			if pfx.IsSingleIP() {
				out[pfx.Addr()] = peer
			}
		}
	}
	return out
}

// setPeers sets the node's current peers (nil: not known) and forgets the
// identities of connections the new map does not confirm: from a peer it
// no longer holds, or holds with another name or tags.
func (n *Node) setPeers(peers map[netip.Addr]Peer) {
	n.mu.Lock()
	n.peers = peers
	n.mu.Unlock()
	if peers != nil {
		n.whois.forgetUnless(func(ip netip.Addr, p Peer) bool {
			q, ok := peers[ip]
			return ok && q.same(p)
		})
	}
}

// knownPeer is the peer at ip in the node's current map, if the map is
// known and holds it.
func (n *Node) knownPeer(ip netip.Addr) (Peer, bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	p, ok := n.peers[ip]
	return p, ok
}
