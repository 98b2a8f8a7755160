package closectx_test

import (
	"context"
	"errors"
	"testing"

	"github.com/flexplane/flexplane/pkg/support/closectx"
)

func TestDo(t *testing.T) {
	t.Parallel()
	want := errors.New("closed badly")
	if err := closectx.Do(context.Background(), "x: close", func() error { return want }); err != want {
		t.Errorf("a close that returns: %v, want %v", err, want)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	release := make(chan struct{})
	defer close(release)
	err := closectx.Do(ctx, "x: close", func() error { <-release; return nil })
	if !errors.Is(err, context.Canceled) || err.Error() != "x: close: context canceled" {
		t.Errorf("a close that hangs past ctx: %v", err)
	}
}
