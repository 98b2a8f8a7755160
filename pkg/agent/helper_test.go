package agent

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/flexplane/flexplane/pkg/agent/privhelper"
)

// startHelper runs a privileged helper for cfg (its socket, logger and
// agent user, this process's, filled in) until the test ends, and returns
// the agent's client of it.
func startHelper(t *testing.T, cfg privhelper.Config) *privhelper.Client {
	t.Helper()
	cfg.Socket = filepath.Join(t.TempDir(), "helper.sock")
	cfg.AgentUID, cfg.AgentGID = os.Getuid(), os.Getgid()
	cfg.Logger = slog.New(slog.DiscardHandler)
	h, err := privhelper.Start(cfg)
	if err != nil {
		t.Fatal(err)
	}
	c, err := privhelper.Dial(cfg.Socket)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		c.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		h.Shutdown(ctx)
	})
	return c
}
