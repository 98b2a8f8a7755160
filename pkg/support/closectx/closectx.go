// Package closectx bounds by a context the Close of things whose own Close
// takes none (tsnet's server, a gRPC client connection): the caller stops
// waiting when the context ends, while the close goes on in the background.
package closectx

import (
	"context"
	"fmt"
)

// Do runs closeFn and waits for it until ctx ends; then it returns op: and
// ctx's error.
func Do(ctx context.Context, op string, closeFn func() error) error {
	done := make(chan error, 1)
	go func() { done <- closeFn() }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return fmt.Errorf("%s: %w", op, ctx.Err())
	}
}
