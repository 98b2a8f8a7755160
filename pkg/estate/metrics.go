package estate

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/luthermonson/go-proxmox"

	"github.com/flexplane/flexplane/pkg/mesh/fleet"
	"github.com/flexplane/flexplane/pkg/proxmox/pveapi"
)

// Metrics of VMs, hosts and zones from Proxmox's rrddata.

// Point is one slot of a series; a nil figure is one Proxmox did not
// report.
type Point struct {
	Time                          time.Time
	CPUUsage                      *float64 // fraction of the CPUs
	MemoryUsedMiB, MemoryTotalMiB *float64
	// NetIn, NetOut, DiskRead and DiskWrite are bytes per second.
	NetIn, NetOut, DiskRead, DiskWrite *float64
}

func points(pts []pveapi.RRDPoint) []Point {
	out := make([]Point, 0, len(pts))
	mibs := func(v *float64) *float64 {
		if v == nil {
			return nil
		}
		return new(*v / mib)
	}
	for _, p := range pts {
		out = append(out, Point{
			Time: time.Unix(p.Time, 0).UTC(), CPUUsage: p.CPU,
			MemoryUsedMiB: mibs(p.Used()), MemoryTotalMiB: mibs(p.Total()),
			NetIn: p.NetIn, NetOut: p.NetOut, DiskRead: p.DiskRead, DiskWrite: p.DiskWrite,
		})
	}
	return out
}

// rrd reads rrddata of zone zoneID within the zone timeout: nil for a zone
// not known, a *ZoneError for one that does not answer.
func (s *Service) rrd(ctx context.Context, zoneID string, read func(ctx context.Context, z fleet.Zone, c *proxmox.Client) ([]pveapi.RRDPoint, error)) ([]Point, error) {
	z, ok := s.Zone(zoneID)
	if !ok {
		return nil, nil
	}
	var pts []pveapi.RRDPoint
	if zerrs := s.each(ctx, []fleet.Zone{z}, func(ctx context.Context, z fleet.Zone, c *proxmox.Client) (err error) {
		pts, err = read(ctx, z, c)
		return err
	}); len(zerrs) > 0 {
		return nil, zerrs[0]
	}
	return points(pts), nil
}

// VMMetrics reads the series of guest vmid on host node of zone zoneID
// over timeframe (one of pveapi.Timeframes).
func (s *Service) VMMetrics(ctx context.Context, zoneID, node string, vmid int, timeframe string) ([]Point, error) {
	return s.rrd(ctx, zoneID, func(ctx context.Context, _ fleet.Zone, c *proxmox.Client) ([]pveapi.RRDPoint, error) {
		return pveapi.GuestRRD(ctx, c, node, vmid, timeframe)
	})
}

// HostMetrics reads the series of host node of zone zoneID.
func (s *Service) HostMetrics(ctx context.Context, zoneID, node, timeframe string) ([]Point, error) {
	return s.rrd(ctx, zoneID, func(ctx context.Context, _ fleet.Zone, c *proxmox.Client) ([]pveapi.RRDPoint, error) {
		return pveapi.NodeRRD(ctx, c, node, timeframe)
	})
}

// ZoneMetrics sums the series of zone zoneID's online hosts point by point
// (Proxmox aligns every node's slots on the same boundaries): CPU weighted
// by each host's CPUs, memory and traffic added. The zone fails only when
// no host answers.
func (s *Service) ZoneMetrics(ctx context.Context, zoneID, timeframe string) ([]Point, error) {
	return s.rrd(ctx, zoneID, func(ctx context.Context, z fleet.Zone, c *proxmox.Client) ([]pveapi.RRDPoint, error) {
		var nodes []string
		for _, h := range z.Hosts {
			if h.Status == fleet.StatusOnline {
				nodes = append(nodes, h.Node)
			}
		}
		var (
			mu  sync.Mutex
			all [][]pveapi.RRDPoint
			wg  sync.WaitGroup
		)
		errs := make([]error, len(nodes))
		for i, n := range nodes {
			wg.Go(func() {
				pts, err := pveapi.NodeRRD(ctx, c, n, timeframe)
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
		return sumRRD(all), nil
	})
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
			p.CPU, p.MaxCPU = new(a.busy/a.cpus), new(a.cpus)
		}
		if a.hasMem {
			p.MemUsed, p.MemTotal = new(a.used), new(a.total)
		}
		if a.hasBytes {
			p.NetIn, p.NetOut = new(a.in), new(a.out)
		}
		out = append(out, p)
	}
	slices.SortFunc(out, func(a, b pveapi.RRDPoint) int { return int(a.Time - b.Time) })
	return out
}
