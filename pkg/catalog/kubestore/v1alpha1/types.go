package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// GroupVersion is the API group and version of the catalog's resources.
var GroupVersion = schema.GroupVersion{Group: "flexplane.io", Version: "v1alpha1"}

// AddToScheme registers the catalog's types with a scheme.
func AddToScheme(s *runtime.Scheme) error {
	s.AddKnownTypes(GroupVersion,
		&VDC{}, &VDCList{}, &ComputeProfile{}, &ComputeProfileList{},
		&StorageProfile{}, &StorageProfileList{}, &Image{}, &ImageList{}, &ZonePolicy{}, &ZonePolicyList{},
		&ExternalNetwork{}, &ExternalNetworkList{}, &EdgeGateway{}, &EdgeGatewayList{},
		&LoadBalancer{}, &LoadBalancerList{}, &SecurityGroup{}, &SecurityGroupList{}, &UserSSHKeys{}, &UserSSHKeysList{},
		&PlacementGroup{}, &PlacementGroupList{})
	metav1.AddToGroupVersion(s, GroupVersion)
	return nil
}

// VDC is a virtual datacenter: the unit of tenancy inside the deployment's
// tenant, with the quotas of its resources.
//
// +kubebuilder:object:root=true
// +kubebuilder:resource:path=vdcs,singular=vdc,scope=Namespaced,categories=flexplane
// +kubebuilder:validation:XValidation:rule="self.metadata.name.matches('^[a-z0-9]([-a-z0-9]*[a-z0-9])?$') && size(self.metadata.name) <= 63",message="name must be a DNS label of at most 63 characters"
// +kubebuilder:printcolumn:name="vCPUs",type=integer,JSONPath=`.spec.quotas.vcpus`
// +kubebuilder:printcolumn:name="Memory MiB",type=integer,JSONPath=`.spec.quotas.memoryMiB`
// +kubebuilder:printcolumn:name="VMs",type=integer,JSONPath=`.spec.quotas.vms`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type VDC struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec VDCSpec `json:"spec"`
	// Status is written by the orchestrator: quota reservations of
	// creates in flight and the last count of each zone. It is part of
	// the object (no status subresource), so a reservation and the
	// resourceVersion it is conditional on are one write.
	// +optional
	Status VDCStatus `json:"status,omitempty"`
}

// VDCSpec is the desired state of a VDC.
type VDCSpec struct {
	// Description is free text for humans.
	// +kubebuilder:validation:MaxLength=1024
	// +optional
	Description string `json:"description,omitempty"`
	// Quotas bounds what the VDC's resources may use in total.
	Quotas VDCQuotas `json:"quotas"`
	// DefaultSecurityGroup is the security group new VMs are put in when
	// their create names none.
	// +optional
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	DefaultSecurityGroup string `json:"defaultSecurityGroup,omitempty"`
	// Members are the users granted a role in the VDC here, besides the
	// identity provider's role claims.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=500
	Members []MemberBinding `json:"members,omitempty"`
	// ServiceAccounts are the VDC's service accounts; only hashes of
	// their tokens are kept.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=50
	ServiceAccounts []ServiceAccount `json:"serviceAccounts,omitempty"`
}

// MemberBinding grants a user (the identity provider's
// preferred_username) a role in a VDC.
type MemberBinding struct {
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=256
	User string `json:"user"`
	// +kubebuilder:validation:Enum=admin;member;viewer
	Role string `json:"role"`
}

// ServiceAccount is a VDC's non-human caller, with the SHA-256 of its
// token's secret (never the token).
type ServiceAccount struct {
	// +kubebuilder:validation:Pattern=`^sa-[0-9a-f]{20}$`
	ID string `json:"id"`
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	Name string `json:"name"`
	// +kubebuilder:validation:Enum=admin;member;viewer
	Role string `json:"role"`
	// +optional
	CreatedBy string `json:"createdBy,omitempty"`
	// +kubebuilder:validation:Format=date-time
	CreatedAt string `json:"createdAt"`
	// +optional
	// +kubebuilder:validation:Format=date-time
	ExpiresAt string `json:"expiresAt,omitempty"`
	// +optional
	// +kubebuilder:validation:Format=date-time
	LastUsedAt string `json:"lastUsedAt,omitempty"`
	// +kubebuilder:validation:Pattern=`^sha256:[0-9a-f]{64}$`
	TokenHash string `json:"tokenHash"`
	// +optional
	// +kubebuilder:validation:Pattern=`^sha256:[0-9a-f]{64}$`
	PreviousTokenHash string `json:"previousTokenHash,omitempty"`
	// +optional
	// +kubebuilder:validation:Format=date-time
	PreviousUntil string `json:"previousUntil,omitempty"`
}

// VDCQuotas are the upper bounds of a VDC; zero allows none.
type VDCQuotas struct {
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=1073741824
	VCPUs int64 `json:"vcpus"`
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=1073741824
	MemoryMiB int64 `json:"memoryMiB"`
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=1073741824
	StorageGiB int64 `json:"storageGiB"`
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=1073741824
	VMs int64 `json:"vms"`
	// PublicAddresses bounds the external networks' addresses the VDC
	// holds; absent bounds none.
	// +optional
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=1073741824
	PublicAddresses *int64 `json:"publicAddresses,omitempty"`
	// KubernetesClusters bounds the VDC's Kubernetes clusters; absent
	// bounds none.
	// +optional
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=1073741824
	KubernetesClusters *int64 `json:"kubernetesClusters,omitempty"`
	// ImageGiB bounds the total size of the VDC's own images; absent
	// bounds none.
	// +optional
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=1073741824
	ImageGiB *int64 `json:"imageGiB,omitempty"`
	// BackupGiB bounds the total size of the VDC's backup archives;
	// absent bounds none.
	// +optional
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=1073741824
	BackupGiB *int64 `json:"backupGiB,omitempty"`
}

// VDCStatus is what the orchestrator records on a VDC.
type VDCStatus struct {
	// Reservations hold back resources for creates in flight.
	// +optional
	// +listType=atomic
	Reservations []QuotaReservation `json:"reservations,omitempty"`
	// Counted is what the VDC's guests used in each zone when last
	// counted, by zone identity.
	// +optional
	Counted map[string]ZoneCount `json:"counted,omitempty"`
	// Zones are the identities of the zones the VDC has resources in.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=1024
	// +kubebuilder:validation:items:MaxLength=253
	Zones []string `json:"zones,omitempty"`
	// ZonesComplete tells that zones names every zone the VDC has
	// resources in; false makes the orchestrator rebuild it from Proxmox.
	// +optional
	ZonesComplete bool `json:"zonesComplete,omitempty"`
}

// ZoneCount is what a VDC's guests used in one zone at a time.
type ZoneCount struct {
	VCPUs      int64 `json:"vcpus"`
	MemoryMiB  int64 `json:"memoryMiB"`
	StorageGiB int64 `json:"storageGiB"`
	VMs        int64 `json:"vms"`
	// +kubebuilder:validation:Format=date-time
	At string `json:"at"`
}

// QuotaReservation holds back resources of a VDC for one create in flight.
type QuotaReservation struct {
	// ID names the create (its operation).
	// +kubebuilder:validation:MinLength=1
	ID         string `json:"id"`
	VCPUs      int64  `json:"vcpus"`
	MemoryMiB  int64  `json:"memoryMiB"`
	StorageGiB int64  `json:"storageGiB"`
	// +kubebuilder:validation:Format=date-time
	Expires string `json:"expires"`
	// Zone is the identity of the zone the create works in.
	// +optional
	Zone string `json:"zone,omitempty"`
	// VMID is the create's guest once it exists.
	// +optional
	VMID int64 `json:"vmid,omitempty"`
	// Name is the VM name a restore of a backup claims: no other live
	// reservation of the VDC claims it.
	// +kubebuilder:validation:MaxLength=253
	// +optional
	Name string `json:"name,omitempty"`
}

// VDCList is a list of VDCs.
//
// +kubebuilder:object:root=true
type VDCList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []VDC `json:"items"`
}

// ComputeProfile is a tenant-wide VM size.
//
// +kubebuilder:object:root=true
// +kubebuilder:resource:path=computeprofiles,singular=computeprofile,scope=Namespaced,categories=flexplane
// +kubebuilder:validation:XValidation:rule="size(self.metadata.name) <= 63",message="name must be at most 63 characters"
// +kubebuilder:printcolumn:name="vCPUs",type=integer,JSONPath=`.spec.vcpus`
// +kubebuilder:printcolumn:name="Memory MiB",type=integer,JSONPath=`.spec.memoryMiB`
type ComputeProfile struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec ComputeProfileSpec `json:"spec"`
}

// ComputeProfileSpec is the size of a compute profile.
type ComputeProfileSpec struct {
	// +kubebuilder:validation:MaxLength=1024
	// +optional
	Description string `json:"description,omitempty"`
	// VCPUs is the number of virtual CPUs.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=1024
	VCPUs int64 `json:"vcpus"`
	// MemoryMiB is the memory in MiB.
	// +kubebuilder:validation:Minimum=64
	// +kubebuilder:validation:Maximum=16777216
	MemoryMiB int64 `json:"memoryMiB"`
}

// ComputeProfileList is a list of compute profiles.
//
// +kubebuilder:object:root=true
type ComputeProfileList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []ComputeProfile `json:"items"`
}

// StorageProfile is a storage tier: IO limits and, per zone, the Proxmox
// storage that holds disks of the tier.
//
// +kubebuilder:object:root=true
// +kubebuilder:resource:path=storageprofiles,singular=storageprofile,scope=Namespaced,categories=flexplane
// +kubebuilder:validation:XValidation:rule="size(self.metadata.name) <= 63",message="name must be at most 63 characters"
// +kubebuilder:printcolumn:name="Tier",type=string,JSONPath=`.spec.tier`
type StorageProfile struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec StorageProfileSpec `json:"spec"`
}

// StorageProfileSpec is the desired state of a storage profile.
type StorageProfileSpec struct {
	// +kubebuilder:validation:MaxLength=1024
	// +optional
	Description string `json:"description,omitempty"`
	// Tier is a short tier name shown to users (a DNS label).
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	Tier string `json:"tier"`
	// Kind is what the profile's storage holds: DISK (VMs' disks, the
	// default) or BACKUP (backup archives).
	// +kubebuilder:validation:Enum=DISK;BACKUP
	// +optional
	Kind string `json:"kind,omitempty"`
	// ReadMBps limits disk reads in MB/s; zero is unlimited.
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=1000000
	ReadMBps int64 `json:"readMBps"`
	// WriteMBps limits disk writes in MB/s; zero is unlimited.
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=1000000
	WriteMBps int64 `json:"writeMBps"`
	// Pools maps each zone that offers the tier to its Proxmox storage.
	// +kubebuilder:validation:MinItems=1
	// +listType=map
	// +listMapKey=zone
	Pools []ZonePool `json:"pools"`
}

// ZonePool names the Proxmox storage that backs a storage profile in a
// zone.
type ZonePool struct {
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	Zone string `json:"zone"`
	// Pool is a Proxmox storage identifier.
	// +kubebuilder:validation:MaxLength=64
	// +kubebuilder:validation:Pattern=`^[A-Za-z][A-Za-z0-9\-_.]*[A-Za-z0-9]$`
	Pool string `json:"pool"`
}

// StorageProfileList is a list of storage profiles.
//
// +kubebuilder:object:root=true
type StorageProfileList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []StorageProfile `json:"items"`
}

// Image is an OS image of the catalog, downloaded by agents into zones.
//
// +kubebuilder:object:root=true
// +kubebuilder:resource:path=images,singular=image,scope=Namespaced,categories=flexplane
// +kubebuilder:validation:XValidation:rule="size(self.metadata.name) <= 63",message="name must be at most 63 characters"
// +kubebuilder:printcolumn:name="Version",type=string,JSONPath=`.spec.version`
// +kubebuilder:printcolumn:name="URL",type=string,JSONPath=`.spec.url`,priority=1
type Image struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec ImageSpec `json:"spec"`
}

// ImageSpec is where an image comes from and what it supports.
type ImageSpec struct {
	// +kubebuilder:validation:MaxLength=1024
	// +optional
	Description string `json:"description,omitempty"`
	// Version is the image's version (e.g. "20251117").
	// +kubebuilder:validation:MaxLength=64
	// +kubebuilder:validation:Pattern=`^[A-Za-z0-9][A-Za-z0-9._+~:-]*$`
	Version string `json:"version"`
	// URL is the http(s) download address of the image, without
	// credentials; for a VDC's image its origin: upload:<sha256 hex> or
	// vm:<vm id>.
	// +kubebuilder:validation:MaxLength=2048
	// +kubebuilder:validation:XValidation:rule="self.matches('^(upload:[0-9a-f]{64}|vm:[A-Za-z0-9_-]{1,128})$') || (isURL(self) && url(self).getScheme() in ['http', 'https'] && url(self).getHostname() != '')",message="must be an absolute http or https URL"
	// +kubebuilder:validation:XValidation:rule="!self.matches('^[a-zA-Z][a-zA-Z0-9+.-]*://[^/]*@')",message="must not carry credentials"
	URL string `json:"url"`
	// Checksum is "sha256:<64 hex>" or "sha512:<128 hex>", lower case;
	// empty for a VDC's image made from a VM.
	// +kubebuilder:validation:Pattern=`^(sha256:[0-9a-f]{64}|sha512:[0-9a-f]{128})?$`
	// +optional
	Checksum string `json:"checksum"`
	// CloudInit says whether the image runs cloud-init on first boot.
	CloudInit bool `json:"cloudInit"`
	// VDC is the VDC that owns the image (its name is <vdc>.<name>);
	// absent for the platform's images.
	// +optional
	// +kubebuilder:validation:MaxLength=63
	VDC string `json:"vdc,omitempty"`
	// Format is the image file's format; absent is QCOW2.
	// +optional
	// +kubebuilder:validation:Enum=QCOW2;RAW;ISO
	Format string `json:"format,omitempty"`
	// SizeBytes is the size of a VDC's image.
	// +optional
	// +kubebuilder:validation:Minimum=0
	SizeBytes int64 `json:"sizeBytes,omitempty"`
	// Zone is the zone a VDC's image was made in.
	// +optional
	// +kubebuilder:validation:MaxLength=63
	Zone string `json:"zone,omitempty"`
}

// ImageList is a list of images.
//
// +kubebuilder:object:root=true
type ImageList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []Image `json:"items"`
}

// ZonePolicy is what the platform admin decides about a zone (named by
// the zone): its region and the VDCs it is dedicated to.
//
// +kubebuilder:object:root=true
// +kubebuilder:resource:path=zonepolicies,singular=zonepolicy,scope=Namespaced,categories=flexplane
// +kubebuilder:validation:XValidation:rule="self.metadata.name.matches('^[a-z0-9]([-a-z0-9]*[a-z0-9])?$') && size(self.metadata.name) <= 63",message="name must be a DNS label of at most 63 characters"
// +kubebuilder:printcolumn:name="Region",type=string,JSONPath=`.spec.region`
type ZonePolicy struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec ZonePolicySpec `json:"spec"`
}

// ZonePolicySpec is the region and the dedication of a zone.
type ZonePolicySpec struct {
	// Region groups zones (a DNS label); empty for none.
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	// +optional
	Region string `json:"region,omitempty"`
	// DedicatedTo lists the VDCs the zone is reserved for; empty: every
	// VDC.
	// +kubebuilder:validation:MaxItems=100
	// +listType=set
	// +kubebuilder:validation:items:MaxLength=63
	// +kubebuilder:validation:items:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	// +optional
	DedicatedTo []string `json:"dedicatedTo,omitempty"`
	// MemoryOvercommitPercent is the guest memory placement lets a host
	// of the zone hold, in percent of its memory; unset: 100.
	// +kubebuilder:validation:Minimum=10
	// +kubebuilder:validation:Maximum=400
	// +optional
	MemoryOvercommitPercent int `json:"memoryOvercommitPercent,omitempty"`
	// CPUOvercommitPercent is the guest vCPUs placement lets a host of
	// the zone hold, in percent of its logical CPUs; unset: 400.
	// +kubebuilder:validation:Minimum=10
	// +kubebuilder:validation:Maximum=1600
	// +optional
	CPUOvercommitPercent int `json:"cpuOvercommitPercent,omitempty"`
	// Maintenance lists the hosts of the zone in maintenance, written by
	// the orchestrator (setHostMaintenance and the drain).
	// +kubebuilder:validation:MaxItems=1000
	// +listType=map
	// +listMapKey=host
	// +optional
	Maintenance []HostInMaintenance `json:"maintenance,omitempty"`
}

// HostInMaintenance is one host of a zone in maintenance.
type HostInMaintenance struct {
	// Host is the Proxmox node name.
	// +kubebuilder:validation:MaxLength=63
	Host string `json:"host"`
	// Since is when maintenance was enabled (RFC 3339).
	// +kubebuilder:validation:MaxLength=64
	Since string `json:"since"`
	// Failed lists the VMs the drain could not move.
	// +kubebuilder:validation:MaxItems=10000
	// +listType=atomic
	// +optional
	Failed []DrainFailure `json:"failed,omitempty"`
}

// DrainFailure is a VM the drain of a host could not move.
type DrainFailure struct {
	// VMID is the guest's Proxmox id.
	VMID int `json:"vmid"`
	// Message says why it could not move.
	// +kubebuilder:validation:MaxLength=1024
	Message string `json:"message"`
}

// ZonePolicyList is a list of zone policies.
//
// +kubebuilder:object:root=true
type ZonePolicyList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []ZonePolicy `json:"items"`
}

// ExternalNetwork is a zone's external network (named by the zone): its
// bridge, router and the pool of public addresses given to the VDCs'
// edge gateways; its status records who holds which address.
//
// +kubebuilder:object:root=true
// +kubebuilder:resource:path=externalnetworks,singular=externalnetwork,scope=Namespaced,categories=flexplane
// +kubebuilder:validation:XValidation:rule="self.metadata.name.matches('^[a-z0-9]([-a-z0-9]*[a-z0-9])?$') && size(self.metadata.name) <= 63",message="name must be a DNS label of at most 63 characters"
// +kubebuilder:printcolumn:name="CIDR",type=string,JSONPath=`.spec.cidr`
// +kubebuilder:printcolumn:name="Pool start",type=string,JSONPath=`.spec.poolStart`
// +kubebuilder:printcolumn:name="Pool end",type=string,JSONPath=`.spec.poolEnd`
type ExternalNetwork struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec ExternalNetworkSpec `json:"spec"`
	// Status holds the pool's allocations; part of the object (no status
	// subresource), so an allocation is conditional on its resourceVersion.
	// +optional
	Status ExternalNetworkStatus `json:"status,omitempty"`
}

// ExternalNetworkSpec is the shape of an external network.
type ExternalNetworkSpec struct {
	// +kubebuilder:validation:MaxLength=1024
	// +optional
	Description string `json:"description,omitempty"`
	// Bridge is the Linux bridge of the network on every node.
	// +kubebuilder:validation:Pattern=`^[A-Za-z][A-Za-z0-9_.-]{0,14}$`
	Bridge string `json:"bridge"`
	// CIDR is the IPv4 network with its prefix length.
	// +kubebuilder:validation:MaxLength=18
	// +kubebuilder:validation:XValidation:rule="isCIDR(self) && cidr(self).ip().family() == 4 && cidr(self).masked() == cidr(self)",message="must be an IPv4 network address with its prefix length"
	CIDR string `json:"cidr"`
	// Gateway is the network's router.
	// +kubebuilder:validation:MaxLength=15
	// +kubebuilder:validation:XValidation:rule="isIP(self) && ip(self).family() == 4",message="must be an IPv4 address"
	Gateway string `json:"gateway"`
	// PoolStart is the pool's first public address.
	// +kubebuilder:validation:MaxLength=15
	// +kubebuilder:validation:XValidation:rule="isIP(self) && ip(self).family() == 4",message="must be an IPv4 address"
	PoolStart string `json:"poolStart"`
	// PoolEnd is the pool's last public address.
	// +kubebuilder:validation:MaxLength=15
	// +kubebuilder:validation:XValidation:rule="isIP(self) && ip(self).family() == 4",message="must be an IPv4 address"
	PoolEnd string `json:"poolEnd"`
}

// ExternalNetworkStatus is what the orchestrator records on an external
// network.
type ExternalNetworkStatus struct {
	// Allocations are the pool's addresses in use.
	// +optional
	// +listType=map
	// +listMapKey=address
	// +kubebuilder:validation:MaxItems=4096
	Allocations []PublicAllocation `json:"allocations,omitempty"`
}

// PublicAllocation is one address of a pool held by a VDC.
type PublicAllocation struct {
	// +kubebuilder:validation:MaxLength=15
	Address string `json:"address"`
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	VDC string `json:"vdc"`
	// +kubebuilder:validation:Enum=gateway;oneToOne;loadBalancer
	Use string `json:"use"`
}

// ExternalNetworkList is a list of external networks.
//
// +kubebuilder:object:root=true
type ExternalNetworkList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []ExternalNetwork `json:"items"`
}

// EdgeGateway is a VDC's edge gateway in a zone (named <vdc>.<zone>): its
// public address, firewall rules in order, port forwards, 1:1 addresses
// and bandwidth limits.
//
// +kubebuilder:object:root=true
// +kubebuilder:resource:path=edgegateways,singular=edgegateway,scope=Namespaced,categories=flexplane
// +kubebuilder:validation:XValidation:rule="self.metadata.name == self.spec.vdc + '.' + self.spec.zone",message="name must be <vdc>.<zone>"
// +kubebuilder:printcolumn:name="VDC",type=string,JSONPath=`.spec.vdc`
// +kubebuilder:printcolumn:name="Zone",type=string,JSONPath=`.spec.zone`
// +kubebuilder:printcolumn:name="Public address",type=string,JSONPath=`.spec.publicAddress`
type EdgeGateway struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec EdgeGatewaySpec `json:"spec"`
}

// EdgeGatewaySpec is what a VDC wants of its gateway in a zone.
type EdgeGatewaySpec struct {
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	VDC string `json:"vdc"`
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	Zone string `json:"zone"`
	// PublicAddress is the VDC's address in the zone.
	// +kubebuilder:validation:MaxLength=15
	// +kubebuilder:validation:XValidation:rule="isIP(self) && ip(self).family() == 4",message="must be an IPv4 address"
	PublicAddress string `json:"publicAddress"`
	// EgressMbps limits traffic out in Mbit/s; 0 is none.
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=100000
	EgressMbps int64 `json:"egressMbps"`
	// IngressMbps limits traffic in in Mbit/s; 0 is none.
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=100000
	IngressMbps int64 `json:"ingressMbps"`
	// FirewallRules in order; the first that matches decides.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=1000
	FirewallRules []FirewallRule `json:"firewallRules,omitempty"`
	// PortForwards send a public port on to a VM's.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=1000
	PortForwards []PortForward `json:"portForwards,omitempty"`
	// OneToOne give VMs public addresses of their own.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=256
	OneToOne []OneToOneAddress `json:"oneToOne,omitempty"`
	// KubeEndpoints are the VDC's Kubernetes clusters' API endpoints in
	// its networks.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=256
	KubeEndpoints []KubeEndpoint `json:"kubeEndpoints,omitempty"`
}

// KubeEndpoint is a port of a network's gateway address forwarded to a
// cluster's hosted API server.
type KubeEndpoint struct {
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	Cluster string `json:"cluster"`
	// +kubebuilder:validation:MaxLength=15
	// +kubebuilder:validation:XValidation:rule="isIP(self) && ip(self).family() == 4",message="must be an IPv4 address"
	Address string `json:"address"`
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=65535
	Port int64 `json:"port"`
	// +kubebuilder:validation:Format=date-time
	Claimed string `json:"claimed"`
}

// FirewallRule is one rule of a VDC's firewall.
type FirewallRule struct {
	// +kubebuilder:validation:Pattern=`^[a-z0-9]{1,32}$`
	ID string `json:"id"`
	// +kubebuilder:validation:MaxLength=1024
	// +optional
	Description string `json:"description,omitempty"`
	// +kubebuilder:validation:Enum=in;out
	Direction string `json:"direction"`
	// +kubebuilder:validation:Enum=tcp;udp;icmp;any
	Protocol string `json:"protocol"`
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=65535
	// +optional
	FromPort int64 `json:"fromPort,omitempty"`
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=65535
	// +optional
	ToPort int64 `json:"toPort,omitempty"`
	// +kubebuilder:validation:MaxLength=18
	// +optional
	Source string `json:"source,omitempty"`
	// +kubebuilder:validation:MaxLength=18
	// +optional
	Destination string `json:"destination,omitempty"`
	// +kubebuilder:validation:Enum=allow;deny
	Action string `json:"action"`
}

// PortForward sends a public address's port on to a VM's.
type PortForward struct {
	// +kubebuilder:validation:Pattern=`^[a-z0-9]{1,32}$`
	ID string `json:"id"`
	// +kubebuilder:validation:Enum=tcp;udp
	Protocol string `json:"protocol"`
	// +kubebuilder:validation:MaxLength=15
	PublicAddress string `json:"publicAddress"`
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=65535
	PublicPort int64 `json:"publicPort"`
	// +kubebuilder:validation:Minimum=100
	// +kubebuilder:validation:Maximum=999999999
	VMID int64 `json:"vmid"`
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=65535
	TargetPort int64 `json:"targetPort"`
}

// OneToOneAddress gives a VM a public address of its own.
type OneToOneAddress struct {
	// +kubebuilder:validation:Pattern=`^[a-z0-9]{1,32}$`
	ID string `json:"id"`
	// +kubebuilder:validation:MaxLength=15
	PublicAddress string `json:"publicAddress"`
	// +kubebuilder:validation:Minimum=100
	// +kubebuilder:validation:Maximum=999999999
	VMID int64 `json:"vmid"`
}

// EdgeGatewayList is a list of edge gateways.
//
// +kubebuilder:object:root=true
type EdgeGatewayList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []EdgeGateway `json:"items"`
}

// LoadBalancer is a VDC's load balancer in a zone (named <vdc>.<name>):
// its public address, listeners, backend pools and what is known of its
// certificates (their PEM and keys are in the Secret lb.<vdc>.<name>).
//
// +kubebuilder:object:root=true
// +kubebuilder:resource:path=loadbalancers,singular=loadbalancer,scope=Namespaced,categories=flexplane
// +kubebuilder:validation:XValidation:rule="self.metadata.name.startsWith(self.spec.vdc + '.')",message="name must be <vdc>.<name>"
// +kubebuilder:printcolumn:name="VDC",type=string,JSONPath=`.spec.vdc`
// +kubebuilder:printcolumn:name="Zone",type=string,JSONPath=`.spec.zone`
// +kubebuilder:printcolumn:name="Public address",type=string,JSONPath=`.spec.publicAddress`
type LoadBalancer struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec LoadBalancerSpec `json:"spec"`
}

// LoadBalancerSpec is what a VDC wants of a load balancer.
type LoadBalancerSpec struct {
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	VDC string `json:"vdc"`
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	Zone string `json:"zone"`
	// +kubebuilder:validation:MaxLength=1024
	// +optional
	Description string `json:"description,omitempty"`
	// PublicAddress is the balancer's address in the zone's pool.
	// +kubebuilder:validation:MaxLength=15
	// +kubebuilder:validation:XValidation:rule="isIP(self) && ip(self).family() == 4",message="must be an IPv4 address"
	PublicAddress string `json:"publicAddress"`
	// +listType=atomic
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=8
	Listeners []LBListener `json:"listeners"`
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=16
	Pools []LBPool `json:"pools"`
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=16
	Certificates []LBCertificate `json:"certificates,omitempty"`
}

// LBListener is one listener of a load balancer.
type LBListener struct {
	// +kubebuilder:validation:MaxLength=63
	Name string `json:"name"`
	// +kubebuilder:validation:Enum=TCP;HTTP;HTTPS;TLS_PASSTHROUGH
	Protocol string `json:"protocol"`
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=65535
	Port int64 `json:"port"`
	// +kubebuilder:validation:MaxLength=63
	// +optional
	Pool string `json:"pool,omitempty"`
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=64
	Routes []LBRoute `json:"routes,omitempty"`
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=64
	SNIRoutes []LBSNIRoute `json:"sniRoutes,omitempty"`
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=16
	Certificates []string `json:"certificates,omitempty"`
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=64
	ServerNames []string `json:"serverNames,omitempty"`
}

// LBRoute sends HTTP requests by path prefix to a pool.
type LBRoute struct {
	// +kubebuilder:validation:MaxLength=1024
	// +kubebuilder:validation:Pattern=`^/`
	PathPrefix string `json:"pathPrefix"`
	// +kubebuilder:validation:MaxLength=63
	Pool string `json:"pool"`
}

// LBSNIRoute sends TLS connections by server name to a pool.
type LBSNIRoute struct {
	// +kubebuilder:validation:MaxLength=253
	ServerName string `json:"serverName"`
	// +kubebuilder:validation:MaxLength=63
	Pool string `json:"pool"`
}

// LBPool is a backend pool.
type LBPool struct {
	// +kubebuilder:validation:MaxLength=63
	Name string `json:"name"`
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=64
	Backends []LBBackend `json:"backends,omitempty"`
	// +optional
	HealthCheck *LBHealthCheck `json:"healthCheck,omitempty"`
}

// LBBackend is a VM's port.
type LBBackend struct {
	// +kubebuilder:validation:Minimum=100
	// +kubebuilder:validation:Maximum=999999999
	VMID int64 `json:"vmid"`
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=65535
	Port int64 `json:"port"`
}

// LBHealthCheck is an active health check of a pool's backends.
type LBHealthCheck struct {
	// +kubebuilder:validation:Enum=TCP;HTTP
	Protocol string `json:"protocol"`
	// +kubebuilder:validation:MaxLength=1024
	// +optional
	Path string `json:"path,omitempty"`
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=300
	IntervalSeconds int64 `json:"intervalSeconds"`
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=300
	TimeoutSeconds int64 `json:"timeoutSeconds"`
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=10
	HealthyThreshold int64 `json:"healthyThreshold"`
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=10
	UnhealthyThreshold int64 `json:"unhealthyThreshold"`
}

// LBCertificate is what is known of a certificate (not its PEM).
type LBCertificate struct {
	// +kubebuilder:validation:MaxLength=63
	Name string `json:"name"`
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=100
	DNSNames []string `json:"dnsNames,omitempty"`
	// NotAfter is an RFC 3339 time.
	// +kubebuilder:validation:MaxLength=64
	NotAfter string `json:"notAfter"`
	// +kubebuilder:validation:Pattern=`^[0-9a-f]{64}$`
	Fingerprint string `json:"fingerprint"`
}

// LoadBalancerList is a list of load balancers.
//
// +kubebuilder:object:root=true
type LoadBalancerList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []LoadBalancer `json:"items"`
}

// SecurityGroup is a VDC's security group (named <vdc>.<name>): the rules
// its member VMs' firewalls allow.
//
// +kubebuilder:object:root=true
// +kubebuilder:resource:path=securitygroups,singular=securitygroup,scope=Namespaced,categories=flexplane
// +kubebuilder:validation:XValidation:rule="self.metadata.name.startsWith(self.spec.vdc + '.')",message="name must be <vdc>.<name>"
// +kubebuilder:printcolumn:name="VDC",type=string,JSONPath=`.spec.vdc`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type SecurityGroup struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec SecurityGroupSpec `json:"spec"`
}

// SecurityGroupSpec is what a VDC wants of a security group.
type SecurityGroupSpec struct {
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	VDC string `json:"vdc"`
	// Description is free text for humans.
	// +optional
	// +kubebuilder:validation:MaxLength=1024
	Description string `json:"description,omitempty"`
	// Rules allow traffic to and from the group's members.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=200
	Rules []SecurityRule `json:"rules,omitempty"`
}

// SecurityRule is one rule of a security group; it allows traffic.
type SecurityRule struct {
	// +kubebuilder:validation:Enum=in;out
	Direction string `json:"direction"`
	// +kubebuilder:validation:Enum=tcp;udp;icmp;any
	Protocol string `json:"protocol"`
	// Ports are destination ports as Proxmox writes them (22, 8000:8100, 80,443).
	// +optional
	// +kubebuilder:validation:MaxLength=256
	// +kubebuilder:validation:Pattern=`^[0-9]+(:[0-9]+)?(,[0-9]+(:[0-9]+)?)*$`
	Ports string `json:"ports,omitempty"`
	// PeerCIDR is the other end's network.
	// +optional
	// +kubebuilder:validation:MaxLength=43
	// +kubebuilder:validation:XValidation:rule="isCIDR(self) && cidr(self).masked() == cidr(self)",message="must be a network address with its prefix length"
	PeerCIDR string `json:"peerCidr,omitempty"`
	// PeerGroup is the other end as a security group of the same VDC.
	// +optional
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	PeerGroup string `json:"peerGroup,omitempty"`
	// +optional
	// +kubebuilder:validation:MaxLength=1024
	Description string `json:"description,omitempty"`
}

// SecurityGroupList is a list of security groups.
//
// +kubebuilder:object:root=true
type SecurityGroupList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []SecurityGroup `json:"items"`
}

// UserSSHKeys is the SSH keys one user keeps for new VMs, named after a
// hash of the user's token subject ("u-" and 40 hex digits).
//
// +kubebuilder:object:root=true
// +kubebuilder:resource:path=usersshkeys,singular=usersshkeys,scope=Namespaced,categories=flexplane
// +kubebuilder:validation:XValidation:rule="self.metadata.name.matches('^u-[0-9a-f]{40}$')",message="name must be u- and 40 hex digits"
// +kubebuilder:printcolumn:name="Subject",type=string,JSONPath=`.spec.subject`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type UserSSHKeys struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec UserSSHKeysSpec `json:"spec"`
}

// UserSSHKeysSpec is the keys of a user.
type UserSSHKeysSpec struct {
	// Subject is the token subject of the user.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=255
	Subject string `json:"subject"`
	// Keys are the user's keys, names unique.
	// +optional
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=100
	Keys []UserSSHKey `json:"keys,omitempty"`
}

// UserSSHKey is one key of a user.
type UserSSHKey struct {
	// Name is the key's name among the user's keys.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[A-Za-z0-9][A-Za-z0-9._-]*$`
	Name string `json:"name"`
	// PublicKey is one OpenSSH authorized_keys line.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=8192
	PublicKey string `json:"publicKey"`
	// Created is an RFC 3339 time.
	// +kubebuilder:validation:MaxLength=64
	Created string `json:"created"`
}

// UserSSHKeysList is a list of users' SSH keys.
//
// +kubebuilder:object:root=true
type UserSSHKeysList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []UserSSHKeys `json:"items"`
}

// PlacementGroup is a VDC's placement group in a zone (named
// <vdc>.<name>): SPREAD keeps its VMs on distinct hosts, PACK on one.
//
// +kubebuilder:object:root=true
// +kubebuilder:resource:path=placementgroups,singular=placementgroup,scope=Namespaced,categories=flexplane
// +kubebuilder:validation:XValidation:rule="self.metadata.name.startsWith(self.spec.vdc + '.')",message="name must be <vdc>.<name>"
// +kubebuilder:printcolumn:name="VDC",type=string,JSONPath=`.spec.vdc`
// +kubebuilder:printcolumn:name="Zone",type=string,JSONPath=`.spec.zone`
// +kubebuilder:printcolumn:name="Policy",type=string,JSONPath=`.spec.policy`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type PlacementGroup struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec PlacementGroupSpec `json:"spec"`
}

// PlacementGroupSpec is what a VDC wants of a placement group.
type PlacementGroupSpec struct {
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	VDC string `json:"vdc"`
	// Zone is the zone the group's VMs are in.
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	Zone string `json:"zone"`
	// Policy is SPREAD (distinct hosts) or PACK (one host while it fits).
	// +kubebuilder:validation:Enum=SPREAD;PACK
	Policy string `json:"policy"`
	// BestEffort makes a SPREAD group soft: VMs share hosts when every
	// host holds one of the group's already (node pools' groups).
	// +optional
	BestEffort bool `json:"bestEffort,omitempty"`
}

// PlacementGroupList is a list of placement groups.
//
// +kubebuilder:object:root=true
type PlacementGroupList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []PlacementGroup `json:"items"`
}
