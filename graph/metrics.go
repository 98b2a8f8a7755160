package graph

import (
	"context"
	"strings"

	"github.com/flexplane/flexplane/graph/model"
	"github.com/flexplane/flexplane/pkg/estate"
)

// Metrics of VMs, hosts and zones from the estate service: a zone that
// does not answer is reported (ZONE_UNAVAILABLE) and gives null.

func timeframe(tf model.MetricsTimeframe) string { return strings.ToLower(string(tf)) }

// metricsPoints renders a series; a zone that failed reads null.
func (r *Resolver) metricsPoints(ctx context.Context, pts []estate.Point, err error) ([]*model.MetricsPoint, error) {
	if err != nil {
		if r.reportDown(ctx, err) {
			return nil, nil
		}
		return nil, err
	}
	if pts == nil {
		return nil, nil
	}
	out := make([]*model.MetricsPoint, 0, len(pts))
	for _, p := range pts {
		out = append(out, &model.MetricsPoint{Time: p.Time, CPUUsage: p.CPUUsage, MemoryUsedMiB: p.MemoryUsedMiB,
			MemoryTotalMiB: p.MemoryTotalMiB, NetInBytesPerSecond: p.NetIn, NetOutBytesPerSecond: p.NetOut,
			DiskReadBytesPerSecond: p.DiskRead, DiskWriteBytesPerSecond: p.DiskWrite})
	}
	return out, nil
}

func (r *Resolver) vmMetrics(ctx context.Context, vm *model.VM, tf model.MetricsTimeframe) ([]*model.MetricsPoint, error) {
	if _, ok := r.zoneByID(vm.Place.ZoneID); !ok || vm.Host == nil {
		return []*model.MetricsPoint{}, nil
	}
	pts, err := r.estate().VMMetrics(ctx, vm.Place.ZoneID, vm.Host.Name, vm.Place.VMID, timeframe(tf))
	return r.metricsPoints(ctx, pts, err)
}

func (r *Resolver) hostMetrics(ctx context.Context, h *model.Host, tf model.MetricsTimeframe) ([]*model.MetricsPoint, error) {
	pts, err := r.estate().HostMetrics(ctx, h.Zone.ID, h.Name, timeframe(tf))
	return r.metricsPoints(ctx, pts, err)
}

func (r *Resolver) zoneMetrics(ctx context.Context, zm *model.Zone, tf model.MetricsTimeframe) ([]*model.MetricsPoint, error) {
	pts, err := r.estate().ZoneMetrics(ctx, zm.ID, timeframe(tf))
	return r.metricsPoints(ctx, pts, err)
}
