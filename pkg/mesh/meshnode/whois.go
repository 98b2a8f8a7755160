package meshnode

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"sync"
	"time"
)

// How long a peer identified by WhoIs stays identified for the calls of
// one connection, when an identification is renewed in the background, and
// how long one lookup may take, whatever the deadline of the call that
// started it.
const (
	whoisTTL     = 30 * time.Second
	whoisRenew   = whoisTTL / 2
	whoisTimeout = 20 * time.Second
)

// whoisCache remembers who the peer behind each connection ("ip:port" of
// its remote end) is, for calls on the same connection: WhoIs uses it for
// the peers its map of the mesh (watchPeers) does not hold yet.
//
// The node's own lookup (tsnet's LocalAPI WhoIs) waits for the node's
// backend lock, which the node holds while it applies each new map of the
// mesh: with many peers changing at once (a mesh of a hundred agents
// joining) the lookup takes longer than a call's deadline, and a health
// check cut short leaves nothing for the next one. Here a lookup runs
// with a deadline of its own (whoisTimeout) and fills the cache even when
// the call that started it has given up; calls on a connection already
// identified do not wait for the lock at all, and an identification is
// renewed in the background halfway through its life. Failed lookups are
// not remembered, a renewal that fails forgets the peer, and so does a new
// map that does not hold it as it was: its next call is identified again.
type whoisCache struct {
	lookup      func(ctx context.Context, addr string) (Peer, error)
	ttl, renew  time.Duration
	timeout     time.Duration
	ctx         context.Context // ends when the node closes
	lookups     sync.WaitGroup  // lookups running
	mu          sync.Mutex
	known       map[string]whoisEntry   // by remote address, protected by mu
	pending     map[string]*whoisLookup // lookups in flight by remote address, protected by mu
	lastExpired time.Time               // when expired entries were last dropped, protected by mu
}

type whoisEntry struct {
	peer Peer
	at   time.Time // when the lookup that found it started
}

// whoisLookup is one lookup in flight; done is closed when peer and err
// are set.
type whoisLookup struct {
	done chan struct{}
	peer Peer
	err  error
}

func newWhoisCache(ctx context.Context, lookup func(ctx context.Context, addr string) (Peer, error)) *whoisCache {
	return &whoisCache{
		lookup: lookup, ttl: whoisTTL, renew: whoisRenew, timeout: whoisTimeout, ctx: ctx,
		known: map[string]whoisEntry{}, pending: map[string]*whoisLookup{},
	}
}

// get identifies the peer behind addr: from the cache while its entry is
// fresh, else by a lookup it waits for until ctx ends.
func (c *whoisCache) get(ctx context.Context, addr string) (Peer, error) {
	now := time.Now()
	c.mu.Lock()
	if e, ok := c.known[addr]; ok && now.Sub(e.at) < c.ttl {
		if now.Sub(e.at) >= c.renew {
			c.startLocked(addr)
		}
		c.mu.Unlock()
		return e.peer.clone(), nil
	}
	l := c.startLocked(addr)
	c.mu.Unlock()
	select {
	case <-l.done:
		if l.err != nil {
			return Peer{}, l.err
		}
		return l.peer.clone(), nil
	case <-ctx.Done():
		return Peer{}, fmt.Errorf("meshnode: whois %s: %w", addr, ctx.Err())
	}
}

// startLocked returns the lookup of addr in flight, starting one if none
// is. c.mu must be held.
func (c *whoisCache) startLocked(addr string) *whoisLookup {
	if l, ok := c.pending[addr]; ok {
		return l
	}
	l := &whoisLookup{done: make(chan struct{})}
	c.pending[addr] = l
	c.lookups.Add(1)
	go func() {
		defer c.lookups.Done()
		started := time.Now()
		lctx, cancel := context.WithTimeout(c.ctx, c.timeout)
		l.peer, l.err = c.lookup(lctx, addr)
		cancel()
		c.mu.Lock()
		delete(c.pending, addr)
		if l.err == nil {
			c.known[addr] = whoisEntry{peer: l.peer, at: started}
		} else {
			delete(c.known, addr)
		}
		c.expireLocked(time.Now())
		c.mu.Unlock()
		close(l.done)
	}()
	return l
}

// expireLocked drops the entries past their life, at most once per ttl,
// so that the cache holds only connections identified lately. c.mu must
// be held.
func (c *whoisCache) expireLocked(now time.Time) {
	if now.Sub(c.lastExpired) < c.ttl {
		return
	}
	c.lastExpired = now
	for addr, e := range c.known {
		if now.Sub(e.at) >= c.ttl {
			delete(c.known, addr)
		}
	}
}

// forgetUnless forgets the identity of every connection for which keep,
// given the connection's remote address and the peer found, is false.
func (c *whoisCache) forgetUnless(keep func(ip netip.Addr, p Peer) bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for addr, e := range c.known {
		ap, err := netip.ParseAddrPort(addr)
		if err != nil || !keep(ap.Addr().Unmap(), e.peer) {
			delete(c.known, addr)
		}
	}
}

// wait waits for the lookups running; the node's context must have ended.
func (c *whoisCache) wait() { c.lookups.Wait() }

func (p Peer) clone() Peer { return Peer{Name: p.Name, Tags: slices.Clone(p.Tags)} }

// same reports whether p and q are the same peer with the same tags.
func (p Peer) same(q Peer) bool { return p.Name == q.Name && slices.Equal(p.Tags, q.Tags) }
