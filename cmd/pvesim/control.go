package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"time"

	"github.com/flexplane/flexplane/pkg/pvesim"
)

// controlHandler is the simulator's fault control, served on its own unix
// socket (--control), apart from the Proxmox API so that API stays Proxmox's
// own:
//
//	POST /nodes/{node}/offline   the node goes offline (SetNodeOnline)
//	POST /nodes/{node}/online    and comes back
//
// Both answer 204, or 404 for a node the cluster does not have.
func controlHandler(c *pvesim.Cluster, log *slog.Logger) http.Handler {
	mux := http.NewServeMux()
	set := func(online bool) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			node := r.PathValue("node")
			if !slices.Contains(c.NodeNames(), node) {
				http.Error(w, fmt.Sprintf("no node %q (have %v)", node, c.NodeNames()), http.StatusNotFound)
				return
			}
			c.SetNodeOnline(node, online)
			log.Info("control: node set", "node", node, "online", online)
			w.WriteHeader(http.StatusNoContent)
		}
	}
	mux.HandleFunc("POST /nodes/{node}/offline", set(false))
	mux.HandleFunc("POST /nodes/{node}/online", set(true))
	return mux
}

// serveControl serves h on ln until ctx ends.
func serveControl(ctx context.Context, ln net.Listener, h http.Handler, log *slog.Logger) {
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}()
	if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
		log.Warn("control socket", "err", err)
	}
}
