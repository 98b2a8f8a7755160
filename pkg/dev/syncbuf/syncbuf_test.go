package syncbuf

import (
	"strings"
	"sync"
	"testing"
)

// TestConcurrentWrites: writes from many goroutines while another reads
// all arrive whole (run with -race).
func TestConcurrentWrites(t *testing.T) {
	var b Buffer
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 100 {
				_, _ = b.Write([]byte("ab"))
				_ = b.String()
			}
		})
	}
	wg.Wait()
	if got := b.String(); got != strings.Repeat("ab", 800) {
		t.Errorf("got %d bytes, want 1600 of ab", len(got))
	}
	if c := b.Bytes(); len(c) != 1600 {
		t.Errorf("Bytes: %d bytes, want 1600", len(c))
	}
}
