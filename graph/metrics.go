package graph

import (
	"context"
	"strings"

	"github.com/flexplane/flexplane/graph/model"
	"github.com/flexplane/flexplane/pkg/estate"
)

// Metrics of VMs, hosts and zones from the estate service: a zone that
// does not answer is reported (ZONE_UNAVAILABLE) and gives null.

func rrdTimeframe(tf model.MetricsTimeframe) string { return strings.ToLower(string(tf)) }

// metricsPoints is a series; a zone that failed reads null.
func (r *Resolver) metricsPoints(ctx context.Context, pts []estate.Point, err error) ([]*estate.Point, error) {
	if err != nil {
		if r.reportDown(ctx, err) {
			return nil, nil
		}
		return nil, err
	}
	if pts == nil {
		return nil, nil
	}
	out := make([]*estate.Point, 0, len(pts))
	for i := range pts {
		out = append(out, &pts[i])
	}
	return out, nil
}
