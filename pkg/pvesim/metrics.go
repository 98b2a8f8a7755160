package pvesim

import (
	"math"
	"time"
)

// Metrics are derived from elapsed time (no goroutine ticks per guest): counters grow
// with uptime at a per-guest rate, gauges wave slowly around a per-guest level.

type guestMetrics struct {
	cpu                                float64
	mem                                int64
	netin, netout, diskread, diskwrite int64
	uptime                             int64
}

// wave is a smooth value in [0,1] that changes over minutes, different per seed.
func wave(seed int, t float64) float64 {
	s := float64(seed%97) * 0.7
	return 0.5 + 0.3*math.Sin(t/37+s) + 0.2*math.Sin(t/11+2*s)
}

func (g *guest) metricsAt(elapsed time.Duration) guestMetrics {
	up := elapsed.Seconds()
	uptime := int64(up)
	seed := g.vmid
	rate := float64(20_000 + (seed%50)*3_000) // bytes/s of network traffic
	m := guestMetrics{
		netin:     g.baseNetIn + int64(up*rate),
		netout:    g.baseNetOut + int64(up*rate*0.4),
		diskread:  g.baseRead + int64(up*rate*2) + 180<<20,
		diskwrite: g.baseWrite + int64(up*rate*0.8) + 20<<20,
		uptime:    uptime,
	}
	if uptime < 60 {
		// booting: reads dominate, the CPU works hard
		m.cpu = 0.4 + 0.3*wave(seed, up)
	} else {
		m.cpu = 0.01 + 0.12*wave(seed, up)
	}
	frac := 0.25 + 0.35*wave(seed+13, up) // fraction of memory in use
	if uptime < 60 {
		frac *= float64(uptime+10) / 70
	}
	m.mem = int64(frac * float64(g.maxmem()))
	return m
}

// metrics are the guest's current metrics (zero counters except totals when stopped).
func (g *guest) metrics(now time.Time) guestMetrics {
	if !g.running {
		return guestMetrics{netin: g.baseNetIn, netout: g.baseNetOut, diskread: g.baseRead, diskwrite: g.baseWrite}
	}
	return g.metricsAt(now.Sub(g.startedAt))
}

type nodeMetrics struct {
	cpu     float64
	mem     int64
	uptime  int64
	rootUse int64
	load    [3]float64
}

// nodeLoad is what a node's running guests add to its metrics.
type nodeLoad struct {
	mem  int64
	busy float64 // CPUs kept busy
}

// loads sums the running guests' load per node in one pass.
func (st *state) loads(now time.Time) map[string]nodeLoad {
	out := make(map[string]nodeLoad, len(st.nodes))
	for _, g := range st.guests {
		if !g.running {
			continue
		}
		gm := g.metrics(now)
		l := out[g.node]
		l.mem += gm.mem + 64<<20
		l.busy += gm.cpu * float64(g.cpus())
		out[g.node] = l
	}
	return out
}

func (st *state) nodeMetrics(n *node, now time.Time, load nodeLoad) nodeMetrics {
	cfg := st.c.cfg
	up := now.Sub(n.booted).Seconds()
	m := nodeMetrics{uptime: int64(up), rootUse: 3<<30 + int64(n.id)*117<<20}
	m.mem = 2<<30 + int64(float64(512<<20)*wave(n.id*7, up)) + load.mem
	if m.mem > cfg.NodeMemory {
		m.mem = cfg.NodeMemory
	}
	m.cpu = math.Min(1, 0.005+0.01*wave(n.id, up)+load.busy/float64(cfg.NodeCPUs))
	base := m.cpu * float64(cfg.NodeCPUs)
	m.load = [3]float64{base * 1.1, base, base * 0.9}
	return m
}
