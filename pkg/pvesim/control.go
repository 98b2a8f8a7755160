package pvesim

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"time"
)

// ControlHandler is the simulator's fault control, to serve apart from the
// Proxmox API (cmd/pvesim serves it on its own unix socket, --control) so
// that API stays Proxmox's own:
//
//	POST /nodes/{node}/offline   the node goes offline (SetNodeOnline)
//	POST /nodes/{node}/online    and comes back
//	POST /faults                 injects a Fault (InjectFault), given as JSON:
//	                             {"method": "POST", "path": "/nodes/*/qemu/*/clone",
//	                              "lockTimeout": true, "delay": "1s", "count": 3}
//	                             (the fields of Fault; delay a Go duration)
//	POST /clock?advance=D        moves the clock of the backup jobs forward
//	                             by the Go duration D (AdvanceClockForTest)
//
// They answer 204, or 404 for a node the cluster does not have, 400 for a
// fault that does not decode or a duration that is not one.
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
	mux.HandleFunc("POST /faults", func(w http.ResponseWriter, r *http.Request) {
		var f struct {
			Fault
			Delay string `json:"delay"`
		}
		dec := json.NewDecoder(io.LimitReader(r.Body, 64<<10))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&f); err != nil {
			http.Error(w, "fault: "+err.Error(), http.StatusBadRequest)
			return
		}
		if f.Delay != "" {
			d, err := time.ParseDuration(f.Delay)
			if err != nil || d < 0 {
				http.Error(w, fmt.Sprintf("fault: delay %q: not a duration", f.Delay), http.StatusBadRequest)
				return
			}
			f.Fault.Delay = d
		}
		if f.Path == "" {
			http.Error(w, "fault: path is required", http.StatusBadRequest)
			return
		}
		c.InjectFault(f.Fault)
		c.log.Info("control: fault injected", "method", f.Method, "path", f.Path, "status", f.Status,
			"lock_timeout", f.LockTimeout, "delay", f.Fault.Delay, "count", f.Count)
		w.WriteHeader(http.StatusNoContent)
	})
	mux.HandleFunc("POST /clock", func(w http.ResponseWriter, r *http.Request) {
		d, err := time.ParseDuration(r.URL.Query().Get("advance"))
		if err != nil || d < 0 {
			http.Error(w, fmt.Sprintf("clock: advance %q: not a positive duration", r.URL.Query().Get("advance")), http.StatusBadRequest)
			return
		}
		c.AdvanceClockForTest(d)
		c.log.Info("control: clock moved", "by", d, "now", c.now())
		w.WriteHeader(http.StatusNoContent)
	})
	return mux
}
