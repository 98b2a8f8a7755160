package gateway

import (
	"sync/atomic"

	"github.com/caddyserver/caddy/v2"
	"github.com/mholt/caddy-l4/layer4"
	"github.com/mholt/caddy-l4/modules/l4proxy"
)

// roundRobinPolicy is the layer4 proxy's selection policy the gateway
// renders: caddy-l4 v0.1.2's own round_robin adds to its counter
// atomically but reads it without synchronisation, a data race under
// concurrent connections.
const roundRobinPolicy = "flexgateway_round_robin"

func init() {
	// Caddy's module registry is process-wide.
	caddy.RegisterModule(&roundRobin{})
}

// roundRobin selects the pool's upstreams in turn. The gateway renders
// only the backends its health checks hold up and sets no connection
// limits, so every upstream of the pool is available.
type roundRobin struct {
	next atomic.Uint32
}

// CaddyModule returns the Caddy module information.
func (*roundRobin) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{
		ID:  "layer4.proxy.selection_policies." + roundRobinPolicy,
		New: func() caddy.Module { return new(roundRobin) },
	}
}

// Select returns the next upstream of pool, nil for an empty pool.
func (r *roundRobin) Select(pool l4proxy.UpstreamPool, _ *layer4.Connection) *l4proxy.Upstream {
	n := uint32(len(pool)) //nolint:gosec // a pool holds far fewer than 2^32 upstreams
	if n == 0 {
		return nil
	}
	return pool[(r.next.Add(1)-1)%n]
}

var _ l4proxy.Selector = (*roundRobin)(nil)
