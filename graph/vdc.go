package graph

import (
	"github.com/flexplane/flexplane/graph/model"
	"github.com/flexplane/flexplane/graph/server/apierr"
	"github.com/flexplane/flexplane/pkg/vdc"
)

// vdcs is the VDC lifecycle service: the orchestrator's, or without one
// (a resolver over a catalog alone) one that keeps VDCs in the catalog
// only, built at first use.
func (r *Resolver) vdcs() *vdc.Service {
	if r.VDCs != nil {
		return r.VDCs
	}
	r.vdcOnce.Do(func() {
		// New fails only without a store, which every resolver has.
		r.catalogVDCs, _ = vdc.New(vdc.Config{Store: r.Catalog, Logger: r.Logger})
	})
	return r.catalogVDCs
}

func vdcUsageModel(u vdc.Usage) *model.VDCUsage {
	return &model.VDCUsage{Vcpus: u.VMs.VCPUs, MemoryMiB: u.VMs.MemoryMiB, StorageGiB: u.VMs.StorageGiB, Vms: u.VMs.VMs, PublicAddresses: u.PublicAddresses}
}

// vdcError maps an error of the VDC lifecycle; fields are relative to the
// request's arguments (prefix "input" for the input object).
func vdcError(err error, prefix string) error { return apierr.From(err, prefix) }
