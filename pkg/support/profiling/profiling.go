// Package profiling serves Go's runtime profiles (net/http/pprof: CPU,
// heap, goroutines, ...) on a loopback address, for diagnosing a running
// orchestrator or agent. It is off unless a command is given an address
// (-debug-addr); it refuses any address that is not loopback, because the
// profiles reveal the process's internals and it has no authentication.
package profiling

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"time"
)

// Server is a running profile listener.
type Server struct {
	ln   net.Listener
	srv  *http.Server
	done chan struct{}
}

// Start listens on addr (host:port; the host must be a loopback address,
// or "localhost") and serves the profiles under /debug/pprof/. A zero port
// picks a free one (see Addr).
func Start(addr string, log *slog.Logger) (*Server, error) {
	if err := CheckAddr(addr); err != nil {
		return nil, err
	}
	if log == nil {
		log = slog.Default()
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("profiling: %w", err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	s := &Server{
		ln: ln,
		srv: &http.Server{
			Handler:           mux,
			ReadHeaderTimeout: 10 * time.Second,
			ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelDebug),
		},
		done: make(chan struct{}),
	}
	go func() {
		defer close(s.done)
		if err := s.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("profiling: serve", "err", err)
		}
	}()
	log.Info("profiling: serving runtime profiles", "url", "http://"+ln.Addr().String()+"/debug/pprof/")
	return s, nil
}

// CheckAddr reports whether addr is a host:port on a loopback address.
func CheckAddr(addr string) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("profiling: address %q: %w", addr, err)
	}
	if host == "localhost" {
		return nil
	}
	ip := net.ParseIP(host)
	if ip == nil || !ip.IsLoopback() {
		return fmt.Errorf("profiling: address %q is not a loopback address (the profiles have no authentication)", addr)
	}
	return nil
}

// Addr is the address the server listens on.
func (s *Server) Addr() string { return s.ln.Addr().String() }

// Shutdown stops the server, waiting for running requests (a CPU profile
// in progress) until ctx ends.
func (s *Server) Shutdown(ctx context.Context) error {
	err := s.srv.Shutdown(ctx)
	if err != nil {
		s.srv.Close()
	}
	<-s.done
	return err
}

// closeGrace is how long Close lets a profile in progress finish.
const closeGrace = 2 * time.Second

// Close stops the server for a process that is exiting: a profile being
// taken gets up to 2 s to finish, so it does not hold up the exit.
func (s *Server) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), closeGrace)
	defer cancel()
	return s.Shutdown(ctx)
}
