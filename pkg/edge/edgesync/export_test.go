package edgesync

import (
	"encoding/hex"
	"testing"

	edgev1 "github.com/flexplane/flexplane/proto/flexplane/edge/v1"
)

// RevisionForTest is the revision a pass sends gw at.
func RevisionForTest(t testing.TB, gw *edgev1.Gateway) string {
	d, err := digestOf(gw)
	if err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(d[:])
}

// StreamsForTest is the number of hosts whose stream has reported.
func StreamsForTest(s *Syncer) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.streamed)
}
