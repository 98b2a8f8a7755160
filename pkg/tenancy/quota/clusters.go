package quota

import (
	"context"

	"github.com/flexplane/flexplane/pkg/catalog"
)

// CheckKubernetesClusters refuses, with an *ExceededError of resource
// "kubernetesClusters", vdc having more Kubernetes clusters than its
// quota allows once it has more more; held counts the clusters it has
// (every one whose control plane exists, those being deleted included),
// and is only called when the VDC has a bound.
//
// A check alone races as CheckPublicAddresses does, and is used as it is:
// a caller checks with the cluster it makes, makes it, then checks again
// with more = 0 and removes it when over (of racers, all may give up; none
// goes over).
func CheckKubernetesClusters(ctx context.Context, s catalog.Store, vdc string, held func(context.Context) (int, error), more int) error {
	return checkCount(ctx, s, vdc, "kubernetesClusters", func(q catalog.VDCQuotas) *int { return q.KubernetesClusters }, held, more)
}
