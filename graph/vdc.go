package graph

import (
	"github.com/flexplane/flexplane/graph/model"
	"github.com/flexplane/flexplane/graph/server/apierr"
	"github.com/flexplane/flexplane/pkg/vdc"
)

func vdcUsageModel(u vdc.Usage) *model.VDCUsage {
	return &model.VDCUsage{Vcpus: u.VMs.VCPUs, MemoryMiB: u.VMs.MemoryMiB, StorageGiB: u.VMs.StorageGiB, Vms: u.VMs.VMs, PublicAddresses: u.PublicAddresses,
		KubernetesClusters: u.KubernetesClusters, BackupGiB: float64(u.BackupBytes) / (1 << 30)}
}

// vdcError maps an error of the VDC lifecycle; fields are relative to the
// request's arguments (prefix "input" for the input object).
func vdcError(err error, prefix string) error { return apierr.From(err, prefix) }
