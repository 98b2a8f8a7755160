// Package audittest has an audit sink for tests: it keeps every event the
// orchestrator emits, for the test to read back.
package audittest

import (
	"slices"
	"sync"

	"github.com/flexplane/flexplane/pkg/audit"
)

// Recorder is an audit.Sink keeping every event, safe for concurrent use.
type Recorder struct {
	mu     sync.Mutex
	events []audit.Event // protected by mu
}

// Emit keeps ev.
func (r *Recorder) Emit(ev audit.Event) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events = append(r.events, ev)
}

// Len is how many events were emitted.
func (r *Recorder) Len() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.events)
}

// Since returns the events after the first n.
func (r *Recorder) Since(n int) []audit.Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.events[n:])
}

// Last returns the latest event, false when there is none.
func (r *Recorder) Last() (audit.Event, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.events) == 0 {
		return audit.Event{}, false
	}
	return r.events[len(r.events)-1], true
}
