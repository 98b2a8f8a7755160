package graph

import (
	"context"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/luthermonson/go-proxmox"

	"github.com/flexplane/flexplane/graph/model"
	"github.com/flexplane/flexplane/pkg/mesh/zones"
	"github.com/flexplane/flexplane/pkg/proxmox/pveapi"
)

// Metrics of VMs, hosts and zones from Proxmox's rrddata.

func timeframe(tf model.MetricsTimeframe) string { return strings.ToLower(string(tf)) }

// metricsPoints turns rrddata into the API's points.
func metricsPoints(pts []pveapi.RRDPoint) []*model.MetricsPoint {
	out := make([]*model.MetricsPoint, 0, len(pts))
	mibs := func(v *float64) *float64 {
		if v == nil {
			return nil
		}
		return ptr(*v / mib)
	}
	for _, p := range pts {
		out = append(out, &model.MetricsPoint{
			Time:                    time.Unix(p.Time, 0).UTC(),
			CPUUsage:                p.CPU,
			MemoryUsedMiB:           mibs(p.Used()),
			MemoryTotalMiB:          mibs(p.Total()),
			NetInBytesPerSecond:     p.NetIn,
			NetOutBytesPerSecond:    p.NetOut,
			DiskReadBytesPerSecond:  p.DiskRead,
			DiskWriteBytesPerSecond: p.DiskWrite,
		})
	}
	return out
}

// zoneRRD reads rrddata through z's agents within the per-zone timeout;
// a zone that does not answer is reported (ZONE_UNAVAILABLE) and gives nil.
func (r *Resolver) zoneRRD(ctx context.Context, z zones.Zone, read func(ctx context.Context, c *proxmox.Client) ([]pveapi.RRDPoint, error)) ([]pveapi.RRDPoint, bool) {
	var pts []pveapi.RRDPoint
	ok := false
	r.eachZone(ctx, []zones.Zone{z}, func(ctx context.Context, _ zones.Zone, c *proxmox.Client) error {
		var err error
		pts, err = read(ctx, c)
		ok = err == nil
		return err
	})
	return pts, ok
}

func (r *Resolver) vmMetrics(ctx context.Context, vm *model.VM, tf model.MetricsTimeframe) ([]*model.MetricsPoint, error) {
	ref := vm.Place
	z, ok := r.zoneByID(ref.ZoneID)
	if !ok || vm.Host == nil {
		return []*model.MetricsPoint{}, nil
	}
	pts, ok := r.zoneRRD(ctx, z, func(ctx context.Context, c *proxmox.Client) ([]pveapi.RRDPoint, error) {
		return pveapi.GuestRRD(ctx, c, vm.Host.Name, ref.VMID, timeframe(tf))
	})
	if !ok {
		return nil, nil
	}
	return metricsPoints(pts), nil
}

func (r *Resolver) hostMetrics(ctx context.Context, h *model.Host, tf model.MetricsTimeframe) ([]*model.MetricsPoint, error) {
	z, ok := r.zoneByID(h.Zone.ID)
	if !ok {
		return nil, nil
	}
	pts, ok := r.zoneRRD(ctx, z, func(ctx context.Context, c *proxmox.Client) ([]pveapi.RRDPoint, error) {
		return pveapi.NodeRRD(ctx, c, h.Name, timeframe(tf))
	})
	if !ok {
		return nil, nil
	}
	return metricsPoints(pts), nil
}

// zoneMetrics sums the rrddata of the zone's online hosts point by point
// (Proxmox aligns every node's slots on the same boundaries): CPU weighted
// by each host's CPUs, memory and traffic added.
func (r *Resolver) zoneMetrics(ctx context.Context, zm *model.Zone, tf model.MetricsTimeframe) ([]*model.MetricsPoint, error) {
	z, ok := r.zoneByID(zm.ID)
	if !ok {
		return nil, nil
	}
	var nodes []string
	for _, h := range z.Hosts {
		if h.Status == zones.StatusOnline {
			nodes = append(nodes, h.Node)
		}
	}
	var (
		mu  sync.Mutex
		all [][]pveapi.RRDPoint
	)
	_, ok = r.zoneRRD(ctx, z, func(ctx context.Context, c *proxmox.Client) ([]pveapi.RRDPoint, error) {
		var wg sync.WaitGroup
		errs := make([]error, len(nodes))
		for i, n := range nodes {
			wg.Go(func() {
				pts, err := pveapi.NodeRRD(ctx, c, n, timeframe(tf))
				errs[i] = err
				mu.Lock()
				defer mu.Unlock()
				if err == nil {
					all = append(all, pts)
				}
			})
		}
		wg.Wait()
		if len(all) == 0 && len(nodes) > 0 {
			return nil, errs[0]
		}
		return nil, nil
	})
	if !ok {
		return nil, nil
	}
	return metricsPoints(sumRRD(all)), nil
}

// sumRRD adds the hosts' series point by point (by time).
func sumRRD(series [][]pveapi.RRDPoint) []pveapi.RRDPoint {
	type acc struct {
		p        pveapi.RRDPoint
		busy     float64 // CPUs busy
		cpus     float64
		hasCPU   bool
		used     float64
		total    float64
		hasMem   bool
		in, out  float64
		hasBytes bool
	}
	byTime := map[int64]*acc{}
	for _, pts := range series {
		for _, p := range pts {
			a := byTime[p.Time]
			if a == nil {
				a = &acc{p: pveapi.RRDPoint{Time: p.Time}}
				byTime[p.Time] = a
			}
			if p.CPU != nil && p.MaxCPU != nil {
				a.busy += *p.CPU * *p.MaxCPU
				a.cpus += *p.MaxCPU
				a.hasCPU = true
			}
			if u, t := p.Used(), p.Total(); u != nil && t != nil {
				a.used += *u
				a.total += *t
				a.hasMem = true
			}
			if p.NetIn != nil && p.NetOut != nil {
				a.in += *p.NetIn
				a.out += *p.NetOut
				a.hasBytes = true
			}
		}
	}
	out := make([]pveapi.RRDPoint, 0, len(byTime))
	for _, a := range byTime {
		p := a.p
		if a.hasCPU && a.cpus > 0 {
			p.CPU, p.MaxCPU = ptr(a.busy/a.cpus), ptr(a.cpus)
		}
		if a.hasMem {
			p.MemUsed, p.MemTotal = ptr(a.used), ptr(a.total)
		}
		if a.hasBytes {
			p.NetIn, p.NetOut = ptr(a.in), ptr(a.out)
		}
		out = append(out, p)
	}
	slices.SortFunc(out, func(a, b pveapi.RRDPoint) int { return int(a.Time - b.Time) })
	return out
}
