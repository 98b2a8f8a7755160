package loadbalancer

import (
	"context"
	"encoding/base64"
	"strings"
	"time"

	"github.com/flexplane/flexplane/pkg/catalog"
	"github.com/flexplane/flexplane/pkg/loadbalancer/lbconfig"
	"github.com/flexplane/flexplane/pkg/tenancy"
)

// ID is the opaque id of balancer lb.
func ID(lb *catalog.LoadBalancer) string {
	return base64.RawURLEncoding.EncodeToString([]byte("lb:" + lb.Name))
}

// ParseID returns the catalog object a balancer's id stands for:
// ErrNotFound for an id of anything else.
func ParseID(id string) (string, error) {
	raw, err := base64.RawURLEncoding.DecodeString(id)
	name, ok := strings.CutPrefix(string(raw), "lb:")
	if err != nil || !ok {
		return "", ErrNotFound
	}
	return name, nil
}

// Health is a backend's health as the zone's replicas report it.
type Health int

// The healths of a backend.
const (
	// Unknown: no replica reports it.
	Unknown Health = iota
	// Healthy: every replica reporting it finds it well.
	Healthy
	// Unhealthy: a replica finds it failing.
	Unhealthy
)

// Backend is a backend of a pool with its health.
type Backend struct {
	// VMID is the API id of its VM.
	VMID   string
	Port   int
	Health Health
	// LastError is why a replica finds it failing (Unhealthy).
	LastError string
	// CheckedAt is the latest check a replica reports; nil for none.
	CheckedAt *time.Time
}

// Pool is a pool of a balancer with the health of its backends.
type Pool struct {
	catalog.LBPool
	Backends []Backend
}

// Pools are lb's pools with each backend's health as the replicas of its
// zone report it now.
func (s *Service) Pools(ctx context.Context, lb *catalog.LoadBalancer) []Pool {
	sts, zoneID := s.Statuses(ctx, lb), s.ZoneID(lb)
	out := make([]Pool, 0, len(lb.Pools))
	for _, p := range lb.Pools {
		pv := Pool{LBPool: p, Backends: make([]Backend, 0, len(p.Backends))}
		for _, be := range p.Backends {
			b := Backend{VMID: tenancy.VMRef{ZoneID: zoneID, VMID: be.VMID}.ID(), Port: be.Port}
			b.observe(sts, lb.Name, p.Name, BackendID(be))
			pv.Backends = append(pv.Backends, b)
		}
		out = append(out, pv)
	}
	return out
}

// observe sets b's health from the replicas' reports: Unhealthy when one
// finds it failing, Healthy when every one reporting it finds it well.
func (b *Backend) observe(sts []lbconfig.Status, balancer, pool, backend string) {
	for _, st := range sts {
		for _, bs := range st.Backends {
			if bs.Balancer != balancer || bs.Pool != pool || bs.Backend != backend {
				continue
			}
			if b.CheckedAt == nil || bs.Checked.After(*b.CheckedAt) {
				at := bs.Checked
				b.CheckedAt = &at
			}
			switch {
			case !bs.Healthy:
				b.Health, b.LastError = Unhealthy, bs.LastError
			case b.Health == Unknown:
				b.Health = Healthy
			}
		}
	}
}
