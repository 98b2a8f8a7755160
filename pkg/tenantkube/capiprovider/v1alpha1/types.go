package v1alpha1

import (
	"net"
	"strconv"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// GroupVersion is the API group and version of the providers' resources.
var GroupVersion = schema.GroupVersion{Group: "infrastructure.flexplane.io", Version: "v1alpha1"}

// AddToScheme registers the providers' types with a scheme.
func AddToScheme(s *runtime.Scheme) error {
	s.AddKnownTypes(GroupVersion,
		&FlexCluster{}, &FlexClusterList{}, &FlexMachine{}, &FlexMachineList{},
		&FlexMachineTemplate{}, &FlexMachineTemplateList{}, &FlexControlPlane{}, &FlexControlPlaneList{})
	metav1.AddToGroupVersion(s, GroupVersion)
	return nil
}

// Labels and annotations flexplane sets on Cluster API objects.
const (
	// VDCLabel names the VDC a cluster and everything of it belongs to.
	VDCLabel = "flexplane.io/vdc"
	// ClusterNameLabel is the cluster's name as its tenant gave it.
	ClusterNameLabel = "flexplane.io/kubernetes-cluster"
	// NodePoolLabel is the node pool's name on its MachineDeployment.
	NodePoolLabel = "flexplane.io/node-pool"
	// MachineFinalizer holds a FlexMachine until its VM is deleted.
	MachineFinalizer = "infrastructure.flexplane.io/vm"
	// ControlPlaneFinalizer holds a FlexControlPlane until its hosted
	// control plane is removed.
	ControlPlaneFinalizer = "infrastructure.flexplane.io/control-plane"
)

// APIEndpoint is where a control plane's API server listens.
type APIEndpoint struct {
	// Host is the DNS name or IP address.
	// +kubebuilder:validation:MaxLength=512
	// +optional
	Host string `json:"host,omitempty"`
	// Port is the TCP port.
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=65535
	// +optional
	Port int32 `json:"port,omitempty"`
}

// String is host:port of the endpoint.
func (e APIEndpoint) String() string { return net.JoinHostPort(e.Host, strconv.Itoa(int(e.Port))) }

// Condition is a Cluster API condition (metav1.Condition).
type Condition = metav1.Condition

// ClusterInitialization is the v1beta2 contract's initialization status of
// an InfraCluster.
type ClusterInitialization struct {
	// Provisioned is true once the cluster's infrastructure is ready.
	// +optional
	Provisioned *bool `json:"provisioned,omitempty"`
}

// FailureDomain is a zone machines may be placed in.
type FailureDomain struct {
	// Name is the zone's name.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=256
	Name string `json:"name"`
	// ControlPlane is whether control-plane machines may go there (never:
	// flexplane's control planes are pods).
	// +optional
	ControlPlane *bool `json:"controlPlane,omitempty"`
}

// FlexCluster is the infrastructure of a Kubernetes cluster in a VDC: the
// zone and the network its workers are placed on.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:path=flexclusters,scope=Namespaced,categories=cluster-api;flexplane
// +kubebuilder:metadata:labels="cluster.x-k8s.io/v1beta2=v1alpha1"
// +kubebuilder:printcolumn:name="VDC",type=string,JSONPath=`.spec.vdc`
// +kubebuilder:printcolumn:name="Zone",type=string,JSONPath=`.spec.zone`
// +kubebuilder:printcolumn:name="Provisioned",type=boolean,JSONPath=`.status.initialization.provisioned`
type FlexCluster struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec FlexClusterSpec `json:"spec"`
	// +optional
	Status FlexClusterStatus `json:"status,omitempty"`
}

// FlexClusterSpec is where a cluster's workers go.
type FlexClusterSpec struct {
	// VDC is the VDC whose quota, pool and networks the workers use.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	VDC string `json:"vdc"`
	// Zone is the zone's name.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	Zone string `json:"zone"`
	// Network is the id of the VDC's network the workers' NIC is on.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=256
	Network string `json:"network"`
	// ControlPlaneEndpoint is left to the control plane (FlexControlPlane).
	// +optional
	ControlPlaneEndpoint APIEndpoint `json:"controlPlaneEndpoint,omitempty"`
}

// FlexClusterStatus is what the provider reports.
type FlexClusterStatus struct {
	// Initialization follows the v1beta2 contract.
	// +optional
	Initialization ClusterInitialization `json:"initialization,omitempty"`
	// Ready mirrors Initialization.Provisioned for v1beta1 readers.
	// +optional
	Ready bool `json:"ready,omitempty"`
	// FailureDomains is the cluster's zone.
	// +optional
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=8
	FailureDomains []FailureDomain `json:"failureDomains,omitempty"`
	// Conditions are the cluster's conditions (Ready).
	// +optional
	// +listType=map
	// +listMapKey=type
	// +kubebuilder:validation:MaxItems=16
	Conditions []Condition `json:"conditions,omitempty"`
}

// FlexClusterList is a list of FlexClusters.
//
// +kubebuilder:object:root=true
type FlexClusterList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []FlexCluster `json:"items"`
}

// FlexMachineSpec is the worker VM a Machine asks for.
type FlexMachineSpec struct {
	// ProviderID is flexplane://<VM id> once the VM exists.
	// +kubebuilder:validation:MaxLength=512
	// +optional
	ProviderID string `json:"providerID,omitempty"`
	// Image is the catalog image of the VM's disk.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	Image string `json:"image"`
	// ComputeProfile is the catalog compute profile (vCPUs, memory).
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	ComputeProfile string `json:"computeProfile"`
	// StorageProfile is the catalog storage profile of the disk.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	StorageProfile string `json:"storageProfile"`
	// DiskGiB is the disk's size.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=65536
	DiskGiB int `json:"diskGiB"`
}

// MachineInitialization is the v1beta2 contract's initialization status
// of an InfraMachine.
type MachineInitialization struct {
	// Provisioned is true once the VM runs.
	// +optional
	Provisioned *bool `json:"provisioned,omitempty"`
}

// MachineAddress is an address of the VM.
type MachineAddress struct {
	// Type is InternalIP (a VDC network's address) or Hostname.
	// +kubebuilder:validation:Enum=Hostname;ExternalIP;InternalIP;ExternalDNS;InternalDNS
	Type string `json:"type"`
	// Address is the address.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=256
	Address string `json:"address"`
}

// FlexMachineStatus is what the provider reports about the VM.
type FlexMachineStatus struct {
	// Initialization follows the v1beta2 contract.
	// +optional
	Initialization MachineInitialization `json:"initialization,omitempty"`
	// Ready mirrors Initialization.Provisioned for v1beta1 readers.
	// +optional
	Ready bool `json:"ready,omitempty"`
	// VM is the VM's flexplane id.
	// +kubebuilder:validation:MaxLength=256
	// +optional
	VM string `json:"vm,omitempty"`
	// Operation is the id of the VM's create while it runs.
	// +kubebuilder:validation:MaxLength=256
	// +optional
	Operation string `json:"operation,omitempty"`
	// Addresses are the VM's addresses.
	// +optional
	// +kubebuilder:validation:MaxItems=8
	Addresses []MachineAddress `json:"addresses,omitempty"`
	// FailureDomain is the VM's zone.
	// +kubebuilder:validation:MaxLength=256
	// +optional
	FailureDomain string `json:"failureDomain,omitempty"`
	// Conditions are the machine's conditions (Ready).
	// +optional
	// +listType=map
	// +listMapKey=type
	// +kubebuilder:validation:MaxItems=16
	Conditions []Condition `json:"conditions,omitempty"`
}

// FlexMachine is one worker VM of a Kubernetes cluster.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:path=flexmachines,scope=Namespaced,categories=cluster-api;flexplane
// +kubebuilder:metadata:labels="cluster.x-k8s.io/v1beta2=v1alpha1"
// +kubebuilder:printcolumn:name="ProviderID",type=string,JSONPath=`.spec.providerID`
// +kubebuilder:printcolumn:name="Provisioned",type=boolean,JSONPath=`.status.initialization.provisioned`
type FlexMachine struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec FlexMachineSpec `json:"spec"`
	// +optional
	Status FlexMachineStatus `json:"status,omitempty"`
}

// FlexMachineList is a list of FlexMachines.
//
// +kubebuilder:object:root=true
type FlexMachineList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []FlexMachine `json:"items"`
}

// FlexMachineTemplateResource is the FlexMachine a template stamps out.
type FlexMachineTemplateResource struct {
	// ObjectMeta is copied onto the machines.
	// +optional
	ObjectMeta metav1.ObjectMeta `json:"metadata,omitempty"`
	// Spec is the machines' spec.
	Spec FlexMachineSpec `json:"spec"`
}

// FlexMachineTemplateSpec holds the template.
type FlexMachineTemplateSpec struct {
	// Template is the machine every MachineSet of a node pool creates.
	Template FlexMachineTemplateResource `json:"template"`
}

// FlexMachineTemplate is a node pool's machine. Its annotations
// capacity.cluster-autoscaler.kubernetes.io/{cpu,memory,maxPods,labels,taints}
// let the cluster autoscaler scale the pool from zero.
//
// +kubebuilder:object:root=true
// +kubebuilder:resource:path=flexmachinetemplates,scope=Namespaced,categories=cluster-api;flexplane
// +kubebuilder:metadata:labels="cluster.x-k8s.io/v1beta2=v1alpha1"
type FlexMachineTemplate struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec FlexMachineTemplateSpec `json:"spec"`
}

// FlexMachineTemplateList is a list of FlexMachineTemplates.
//
// +kubebuilder:object:root=true
type FlexMachineTemplateList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []FlexMachineTemplate `json:"items"`
}

// FlexControlPlaneSpec is the hosted control plane a cluster asks for.
type FlexControlPlaneSpec struct {
	// VDC is the VDC the cluster belongs to.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	VDC string `json:"vdc"`
	// Version is the Kubernetes version (v1.x.y).
	// +kubebuilder:validation:Pattern=`^v1\.[0-9]+\.[0-9]+$`
	Version string `json:"version"`
	// ServiceCIDR is the cluster's Service range.
	// +kubebuilder:validation:MaxLength=64
	// +optional
	ServiceCIDR string `json:"serviceCIDR,omitempty"`
	// PodCIDR is the cluster's Pod range.
	// +kubebuilder:validation:MaxLength=64
	// +optional
	PodCIDR string `json:"podCIDR,omitempty"`
	// ControlPlaneEndpoint is where the workers reach the API server.
	// +optional
	ControlPlaneEndpoint APIEndpoint `json:"controlPlaneEndpoint,omitempty"`
	// Networks are the VDC networks (CIDRs) the cluster's API server may
	// reach, through its egress proxy, and where its workers' kubelet
	// serving certificates may have their addresses. None: no network.
	// +kubebuilder:validation:MaxItems=16
	// +kubebuilder:validation:items:MaxLength=64
	// +optional
	Networks []string `json:"networks,omitempty"`
}

// ControlPlaneInitialization is the v1beta2 contract's initialization
// status of a control plane.
type ControlPlaneInitialization struct {
	// ControlPlaneInitialized is true once the API server serves.
	// +optional
	ControlPlaneInitialized *bool `json:"controlPlaneInitialized,omitempty"`
}

// FlexControlPlaneStatus is what the control plane reports.
type FlexControlPlaneStatus struct {
	// Initialization follows the v1beta2 contract.
	// +optional
	Initialization ControlPlaneInitialization `json:"initialization,omitempty"`
	// Ready is true while every component is ready.
	// +optional
	Ready bool `json:"ready,omitempty"`
	// Initialized mirrors Initialization.ControlPlaneInitialized for
	// v1beta1 readers.
	// +optional
	Initialized bool `json:"initialized,omitempty"`
	// Version is the version the control plane runs.
	// +kubebuilder:validation:MaxLength=64
	// +optional
	Version string `json:"version,omitempty"`
	// Conditions are the control plane's conditions (Available, and one
	// per component).
	// +optional
	// +listType=map
	// +listMapKey=type
	// +kubebuilder:validation:MaxItems=32
	Conditions []Condition `json:"conditions,omitempty"`
}

// FlexControlPlane is a hosted control plane (pods in the management
// cluster) as Cluster API's control-plane contract sees it.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:path=flexcontrolplanes,scope=Namespaced,categories=cluster-api;flexplane
// +kubebuilder:metadata:labels="cluster.x-k8s.io/v1beta2=v1alpha1"
// +kubebuilder:printcolumn:name="Version",type=string,JSONPath=`.spec.version`
// +kubebuilder:printcolumn:name="Initialized",type=boolean,JSONPath=`.status.initialization.controlPlaneInitialized`
type FlexControlPlane struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec FlexControlPlaneSpec `json:"spec"`
	// +optional
	Status FlexControlPlaneStatus `json:"status,omitempty"`
}

// FlexControlPlaneList is a list of FlexControlPlanes.
//
// +kubebuilder:object:root=true
type FlexControlPlaneList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []FlexControlPlane `json:"items"`
}
