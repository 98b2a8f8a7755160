package orchestrator

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/flexplane/flexplane/pkg/catalog"
	"github.com/flexplane/flexplane/pkg/mesh/meshcontrol"
	"github.com/flexplane/flexplane/pkg/mesh/meshleader"
	"github.com/flexplane/flexplane/pkg/mesh/meshnode"
)

// startLeader joins the election of the replica that runs the mesh control
// server.
func (s *Server) startLeader(ctx context.Context, ccfg meshcontrol.Config) (*meshleader.Leader, error) {
	rc, ns, err := s.cfg.Kube.REST()
	if err != nil {
		return nil, fmt.Errorf("orchestrator: replication: %w", err)
	}
	r := s.cfg.Replication
	l, err := meshleader.Start(ctx, meshleader.Config{
		Kube:          rc,
		Namespace:     ns,
		LeaseName:     r.LeaseName,
		PeerURL:       r.PeerURL,
		Control:       ccfg,
		LeaseDuration: r.LeaseDuration,
		RenewDeadline: r.RenewDeadline,
		RetryPeriod:   r.RetryPeriod,
		Logger:        s.log,
	})
	if err != nil {
		return nil, fmt.Errorf("orchestrator: %w", err)
	}
	return l, nil
}

// ownKey creates the key the orchestrator's own mesh node enrolls with. A
// replica may start before any replica leads: it asks until ctx ends.
func ownKey(ctx context.Context, api *meshcontrol.Client, replicated bool) (meshcontrol.Key, error) {
	opts := meshcontrol.KeyOptions{TTL: 10 * time.Minute, Tags: []string{meshcontrol.TagOrchestrator}}
	for {
		key, err := api.CreateKey(ctx, opts)
		if err == nil || !replicated {
			return key, err
		}
		select {
		case <-ctx.Done():
			return meshcontrol.Key{}, fmt.Errorf("%w (last: %w)", ctx.Err(), err)
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// Health probe paths.
const (
	// HealthzPath answers 200 while the process serves (liveness).
	HealthzPath = "/healthz"
	// ReadyzPath answers 200 when the orchestrator can serve requests
	// (readiness): its mesh node is up, its catalog answers and a mesh
	// control leader is known; else 503 naming what is missing.
	ReadyzPath = "/readyz"
)

// readyTimeout bounds the catalog check of /readyz.
const readyTimeout = 2 * time.Second

// probe answers the health probes; its parts are set as Start brings them
// up (the listener serves before the mesh node joins). It has its own
// lock: Shutdown holds Server.mu while the last requests finish.
type probe struct {
	mu      sync.Mutex
	node    *meshnode.Node     // protected by mu
	catalog catalog.Store      // nil without an API, protected by mu
	leader  *meshleader.Leader // nil unless replicated, protected by mu
	hasAPI  bool               // a catalog is expected, protected by mu
}

func (p *probe) setNode(n *meshnode.Node) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.node = n
}

func (p *probe) setCatalog(c catalog.Store) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.catalog = c
}

func (p *probe) setLeader(l *meshleader.Leader) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.leader = l
}

func (p *probe) expectAPI() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.hasAPI = true
}

func (p *probe) mount(mux *http.ServeMux) {
	mux.HandleFunc(HealthzPath, func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = w.Write([]byte("ok\n"))
	})
	mux.HandleFunc(ReadyzPath, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		if missing := p.check(r.Context()); len(missing) > 0 {
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = w.Write([]byte("not ready: " + strings.Join(missing, "; ") + "\n"))
			return
		}
		_, _ = w.Write([]byte("ready\n"))
	})
}

// check lists what keeps the orchestrator from being ready.
func (p *probe) check(ctx context.Context) []string {
	p.mu.Lock()
	node, store, leader, hasAPI := p.node, p.catalog, p.leader, p.hasAPI
	p.mu.Unlock()
	var missing []string
	if node == nil || !node.Addr().IsValid() {
		missing = append(missing, "mesh node: not up")
	}
	switch {
	case hasAPI && store == nil:
		missing = append(missing, "catalog: not open")
	case store != nil:
		cctx, cancel := context.WithTimeout(ctx, readyTimeout)
		_, err := store.List(cctx, catalog.KindVDC)
		cancel()
		if err != nil {
			missing = append(missing, "catalog: "+err.Error())
		}
	}
	if leader != nil {
		if id, _ := leader.Leader(); id == "" {
			missing = append(missing, "mesh control leader: none known")
		}
	}
	return missing
}
