package tenantkube

// Phase is a cluster's state as the API shows it (Cluster.State).
type Phase string

// The phases of a cluster.
const (
	PhasePending      Phase = "Pending"
	PhaseProvisioning Phase = "Provisioning"
	PhaseProvisioned  Phase = "Provisioned"
	PhaseDeleting     Phase = "Deleting"
	PhaseFailed       Phase = "Failed"
	PhaseUnknown      Phase = "Unknown"
)

// TaintEffect is what a taint does to pods that do not tolerate it, as
// Kubernetes names it.
type TaintEffect string

// The effects of a taint.
const (
	NoSchedule       TaintEffect = "NoSchedule"
	PreferNoSchedule TaintEffect = "PreferNoSchedule"
	NoExecute        TaintEffect = "NoExecute"
)
