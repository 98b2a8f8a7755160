package catalog

import (
	"context"
	"sync"
)

// Watcher is a Store that tells when its objects change, so that the work
// that follows the catalog (the edge gateways' and load balancers' syncs)
// runs when something changed instead of on a timer.
//
// Watch returns a channel that receives a value after any object may have
// changed. It is coalesced: a burst of changes leaves one value waiting, never
// a backlog, so a reader that reads the whole state after each value misses
// nothing. The channel is closed when ctx ends or when the store loses its
// own view of the changes (a Kubernetes watch that broke): changes may then
// have been missed, and the reader should read everything again and call
// Watch anew.
type Watcher interface {
	Watch(ctx context.Context) <-chan struct{}
}

// Notifier fans change signals out to Watch subscribers; a store embeds one.
// Its zero value is ready to use.
type Notifier struct {
	mu   sync.Mutex
	subs map[*subscription]struct{} // protected by mu
}

type subscription struct {
	ch     chan struct{}
	closed bool // protected by Notifier.mu
}

// Subscribe returns a coalesced channel of change signals that is closed
// when ctx ends or Break is called.
func (n *Notifier) Subscribe(ctx context.Context) <-chan struct{} {
	s := &subscription{ch: make(chan struct{}, 1)}
	n.mu.Lock()
	if n.subs == nil {
		n.subs = map[*subscription]struct{}{}
	}
	n.subs[s] = struct{}{}
	n.mu.Unlock()
	context.AfterFunc(ctx, func() {
		n.mu.Lock()
		defer n.mu.Unlock()
		n.endLocked(s)
	})
	return s.ch
}

func (n *Notifier) endLocked(s *subscription) {
	if !s.closed {
		s.closed = true
		close(s.ch)
	}
	delete(n.subs, s)
}

// Notify signals every subscriber; it never blocks.
func (n *Notifier) Notify() {
	n.mu.Lock()
	defer n.mu.Unlock()
	for s := range n.subs {
		select {
		case s.ch <- struct{}{}:
		default:
		}
	}
}

// Break closes every subscriber's channel: changes may have been missed.
func (n *Notifier) Break() {
	n.mu.Lock()
	defer n.mu.Unlock()
	for s := range n.subs {
		n.endLocked(s)
	}
}
