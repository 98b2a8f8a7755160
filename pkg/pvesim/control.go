package pvesim

import (
	"fmt"
	"net/http"
	"slices"
)

// ControlHandler is the simulator's fault control, to serve apart from the
// Proxmox API (cmd/pvesim serves it on its own unix socket, --control) so
// that API stays Proxmox's own:
//
//	POST /nodes/{node}/offline   the node goes offline (SetNodeOnline)
//	POST /nodes/{node}/online    and comes back
//
// Both answer 204, or 404 for a node the cluster does not have.
func (c *Cluster) ControlHandler() http.Handler {
	mux := http.NewServeMux()
	set := func(online bool) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			node := r.PathValue("node")
			if !slices.Contains(c.nodes, node) {
				http.Error(w, fmt.Sprintf("no node %q (have %v)", node, c.nodes), http.StatusNotFound)
				return
			}
			c.SetNodeOnline(node, online)
			c.log.Info("control: node set", "node", node, "online", online)
			w.WriteHeader(http.StatusNoContent)
		}
	}
	mux.HandleFunc("POST /nodes/{node}/offline", set(false))
	mux.HandleFunc("POST /nodes/{node}/online", set(true))
	return mux
}
