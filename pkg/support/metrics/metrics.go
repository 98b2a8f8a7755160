// Package metrics holds the small helpers flexplane's Prometheus metrics
// share between the orchestrator and the agent: label values bounded to a
// fixed number of distinct values, so that no caller-chosen string can grow
// a metric's series without limit, and the handler that serves a registry.
package metrics

import "sync"

// Namespace is the prefix of every flexplane metric.
const Namespace = "flexplane"

// Other is the label value of every value past a BoundedLabel's cap.
const Other = "other"

// BoundedLabel hands out label values: the first Max distinct values are
// kept as they are, any further one becomes Other. Its zero value is not
// usable: make one with NewBoundedLabel.
type BoundedLabel struct {
	max int

	mu   sync.Mutex
	seen map[string]bool // protected by mu
}

// NewBoundedLabel returns a BoundedLabel keeping at most max distinct
// values.
func NewBoundedLabel(max int) *BoundedLabel {
	return &BoundedLabel{max: max, seen: map[string]bool{}}
}

// Value returns v if it is one of the first Max distinct values seen, else
// Other.
func (b *BoundedLabel) Value(v string) string {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.seen[v] {
		return v
	}
	if len(b.seen) >= b.max {
		return Other
	}
	b.seen[v] = true
	return v
}
