package gateway

import (
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/flexplane/flexplane/pkg/loadbalancer/lbconfig"
)

// maxConfigBytes bounds a PUT /v1/config body.
const maxConfigBytes = 32 << 20

// handler is the admin API of lbconfig, /healthz, /readyz and /metrics.
func (g *Gateway) handler(reg *prometheus.Registry) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		if _, ok := g.configInForce(); !ok {
			http.Error(w, "no config applied yet", http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ok")
	})
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}))
	mux.Handle("PUT /v1/config", g.authorized(g.putConfig))
	mux.Handle("GET /v1/config", g.authorized(func(w http.ResponseWriter, _ *http.Request) {
		cfg, _ := g.configInForce()
		writeJSON(w, cfg)
	}))
	mux.Handle("GET /v1/status", g.authorized(g.getStatus))
	return mux
}

// authorized lets only requests over a connection with a verified client
// certificate (one of another CA fails the handshake already) and bearing
// the zone's admin token through (compared in constant time).
func (g *Gateway) authorized(h http.HandlerFunc) http.Handler {
	want := []byte("Bearer " + g.cfg.Token)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !lbconfig.ClientVerified(r.TLS) {
			http.Error(w, "unauthorized: a client certificate is required", http.StatusUnauthorized)
			return
		}
		got := []byte(r.Header.Get("Authorization"))
		if subtle.ConstantTimeCompare(got, want) != 1 {
			w.Header().Set("WWW-Authenticate", `Bearer realm="flexgateway"`)
			http.Error(w, "unauthorized", http.StatusUnauthorized)
			return
		}
		h(w, r)
	})
}

func (g *Gateway) putConfig(w http.ResponseWriter, r *http.Request) {
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxConfigBytes))
	dec.DisallowUnknownFields()
	var cfg lbconfig.Config
	if err := dec.Decode(&cfg); err != nil {
		g.metrics.applies.WithLabelValues("invalid").Inc()
		http.Error(w, "invalid config: "+err.Error(), http.StatusBadRequest)
		return
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		g.metrics.applies.WithLabelValues("invalid").Inc()
		http.Error(w, "invalid config: trailing data after the JSON object", http.StatusBadRequest)
		return
	}
	switch err := g.Apply(r.Context(), cfg); {
	case errors.Is(err, ErrInvalid):
		http.Error(w, err.Error(), http.StatusBadRequest)
	case err != nil:
		g.log.Error("apply", "revision", cfg.Revision, "err", err)
		http.Error(w, err.Error(), http.StatusInternalServerError)
	default:
		w.WriteHeader(http.StatusNoContent)
	}
}

// maxStatusWait bounds how long GET /v1/status?after= holds a request.
const maxStatusWait = 5 * time.Minute

// getStatus answers the status; with ?after=<generation> it waits (up to
// ?wait=, default 30 s) until the generation is another, so a watcher
// learns of every apply and health change at once and costs nothing
// while nothing changes.
func (g *Gateway) getStatus(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	if !q.Has("after") {
		writeJSON(w, g.Status())
		return
	}
	after, err := strconv.ParseUint(q.Get("after"), 10, 64)
	if err != nil {
		http.Error(w, "after: not a generation", http.StatusBadRequest)
		return
	}
	wait := 30 * time.Second
	if q.Has("wait") {
		if wait, err = time.ParseDuration(q.Get("wait")); err != nil || wait <= 0 || wait > maxStatusWait {
			http.Error(w, fmt.Sprintf("wait: a duration up to %s", maxStatusWait), http.StatusBadRequest)
			return
		}
	}
	timer := time.NewTimer(wait)
	defer timer.Stop()
	for {
		st, changed := g.statusAndChanged()
		if st.Generation != after {
			writeJSON(w, st)
			return
		}
		select {
		case <-changed:
		case <-timer.C:
			writeJSON(w, st)
			return
		case <-r.Context().Done():
			return
		case <-g.done:
			writeJSON(w, st)
			return
		}
	}
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}
