// Package catalog holds flexplane's platform objects — virtual datacenters
// (VDCs), compute profiles, storage profiles, images, zone policies, the
// zones' external networks, the VDCs' edge gateways, load balancers,
// security groups and placement groups, the users' SSH keys — as Kubernetes-style objects
// (apiVersion flexplane.io/v1alpha1) behind one Store interface.
//
// Every write is conditional: objects carry the resourceVersion they were
// read at, and an Update or Delete whose resourceVersion is stale fails with
// a *ConflictError. DirStore keeps the objects as manifests in a directory
// and holds that promise across processes sharing the directory; a
// Kubernetes CRD backend can implement the same Store over the same types.
//
// Spec fields are embedded in the object types (tagged `json:"spec"`), so
// they marshal as a Kubernetes-style spec block while Go code and the GraphQL
// layer read them directly (vdc.Quotas, not vdc.Spec.Quotas).
package catalog

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
)

// APIVersion is the apiVersion of every catalog object.
const APIVersion = "flexplane.io/v1alpha1"

// Kind names a type of catalog object.
type Kind string

// The kinds of catalog objects.
const (
	KindVDC            Kind = "VDC"
	KindComputeProfile Kind = "ComputeProfile"
	KindStorageProfile Kind = "StorageProfile"
	KindImage          Kind = "Image"
	KindZonePolicy     Kind = "ZonePolicy"
	// KindExternalNetwork is a zone's external network and its public
	// address pool (platform admins').
	KindExternalNetwork Kind = "ExternalNetwork"
	// KindEdgeGateway is a VDC's edge gateway in a zone: its firewall
	// rules, port forwards, 1:1 addresses and limits.
	KindEdgeGateway Kind = "EdgeGateway"
	// KindLoadBalancer is a VDC's load balancer in a zone (its
	// certificates' keys are kept apart, in the store's secrets).
	KindLoadBalancer Kind = "LoadBalancer"
	// KindSecurityGroup is a VDC's security group: the rules its member
	// VMs' firewalls allow.
	KindSecurityGroup Kind = "SecurityGroup"
	// KindPlacementGroup is a VDC's placement group in a zone: SPREAD or
	// PACK of its member VMs over the zone's hosts.
	KindPlacementGroup Kind = "PlacementGroup"
)

// Kinds lists every kind the catalog knows, in a stable order.
func Kinds() []Kind {
	return []Kind{KindVDC, KindComputeProfile, KindStorageProfile, KindImage, KindZonePolicy, KindExternalNetwork, KindEdgeGateway, KindLoadBalancer, KindSecurityGroup, KindUserSSHKeys, KindPlacementGroup}
}

// Resource is the kind's lower-case plural: its Kubernetes resource name
// (and DirStore's directory); "" for an unknown kind.
func (k Kind) Resource() string { return k.plural() }

// plural is the lower-case plural used for directory names (as Kubernetes
// resource names).
func (k Kind) plural() string {
	switch k {
	case KindVDC:
		return "vdcs"
	case KindComputeProfile:
		return "computeprofiles"
	case KindStorageProfile:
		return "storageprofiles"
	case KindImage:
		return "images"
	case KindZonePolicy:
		return "zonepolicies"
	case KindExternalNetwork:
		return "externalnetworks"
	case KindEdgeGateway:
		return "edgegateways"
	case KindLoadBalancer:
		return "loadbalancers"
	case KindSecurityGroup:
		return "securitygroups"
	case KindUserSSHKeys:
		return "usersshkeys"
	case KindPlacementGroup:
		return "placementgroups"
	}
	return ""
}

// New returns an empty object of the given kind with its TypeMeta set.
func New(kind Kind) (Object, error) {
	var o Object
	switch kind {
	case KindVDC:
		o = &VDC{}
	case KindComputeProfile:
		o = &ComputeProfile{}
	case KindStorageProfile:
		o = &StorageProfile{}
	case KindImage:
		o = &Image{}
	case KindZonePolicy:
		o = &ZonePolicy{}
	case KindExternalNetwork:
		o = &ExternalNetwork{}
	case KindEdgeGateway:
		o = &EdgeGateway{}
	case KindLoadBalancer:
		o = &LoadBalancer{}
	case KindSecurityGroup:
		o = &SecurityGroup{}
	case KindUserSSHKeys:
		o = &UserSSHKeys{}
	case KindPlacementGroup:
		o = &PlacementGroup{}
	default:
		return nil, fmt.Errorf("catalog: unknown kind %q", kind)
	}
	*o.GetTypeMeta() = TypeMeta{APIVersion: APIVersion, Kind: kind}
	return o, nil
}

// Object is implemented by pointers to every catalog type.
type Object interface {
	// GetTypeMeta returns the object's apiVersion and kind for modification.
	GetTypeMeta() *TypeMeta
	// GetObjectMeta returns the object's metadata for modification.
	GetObjectMeta() *ObjectMeta
	// ObjectKind is the kind of the type, whatever TypeMeta says.
	ObjectKind() Kind
	// Validate checks names and fields; it returns a *ValidationError.
	Validate() error
	// DeepCopyObject returns an independent copy.
	DeepCopyObject() Object
}

// TypeMeta is the apiVersion and kind of a manifest.
type TypeMeta struct {
	APIVersion string `json:"apiVersion"`
	Kind       Kind   `json:"kind"`
}

// GetTypeMeta implements Object.
func (t *TypeMeta) GetTypeMeta() *TypeMeta { return t }

// ObjectMeta is the metadata every catalog object has.
type ObjectMeta struct {
	// Name identifies the object among those of its kind.
	Name string `json:"name"`
	// ResourceVersion is set by the store on every write; it changes on
	// each write and is the precondition of conditional updates and deletes.
	ResourceVersion string `json:"resourceVersion,omitempty"`
	// CreationTimestamp is set by the store on create.
	CreationTimestamp time.Time `json:"creationTimestamp,omitzero"`
}

// GetObjectMeta implements Object.
func (m *ObjectMeta) GetObjectMeta() *ObjectMeta { return m }

// VDC is a virtual datacenter: the unit of tenancy inside the deployment's
// tenant. Users are members of VDCs through their token's role claims and
// through the bindings of Members.
type VDC struct {
	TypeMeta
	ObjectMeta `json:"metadata"`
	VDCSpec    `json:"spec"`
	// Status is written by the orchestrator, not by admins: it holds the
	// quota reservations of creates in flight (see QuotaReservation).
	Status VDCStatus `json:"status,omitzero"`
}

// VDCStatus is what the orchestrator records on a VDC.
type VDCStatus struct {
	// Reservations are the resources of creates in flight, counted against
	// the quotas on top of what Proxmox reports until the create's guest is
	// finished (then Proxmox counts it) or the reservation expires.
	Reservations []QuotaReservation `json:"reservations,omitempty"`
	// Counted is what the VDC's guests used in each zone (by zone identity)
	// when a reservation last counted them: while a zone cannot be read,
	// its last count stands in for it, so an outage never lets a VDC go
	// over quota.
	Counted map[string]ZoneCount `json:"counted,omitempty"`
	// Zones is the VDC's zone set: the identities of the zones it has
	// resources in (guests, networks, staged images, backups), sorted. A
	// zone is added before the first resource is created there; one may
	// stay after its last resource is gone (a read then asks one zone
	// more), never the other way round. See ZonesComplete.
	Zones []string `json:"zones,omitempty"`
	// ZonesComplete tells that Zones names every zone the VDC has
	// resources in. False (a VDC older than the zone set, or one whose set
	// was lost) makes the next read rebuild it from Proxmox by asking
	// every zone once.
	ZonesComplete bool `json:"zonesComplete,omitempty"`
}

// ZoneCount is what a VDC's guests used in one zone at a time.
type ZoneCount struct {
	VCPUs      int       `json:"vcpus"`
	MemoryMiB  int       `json:"memoryMiB"`
	StorageGiB int       `json:"storageGiB"`
	VMs        int       `json:"vms"`
	At         time.Time `json:"at"`
}

// QuotaReservation holds back resources of a VDC for one create in flight.
// It is written with the VDC's resourceVersion, so two orchestrator replicas
// cannot both reserve the last of a quota.
type QuotaReservation struct {
	// ID names the create (its operation) that holds the reservation.
	ID         string    `json:"id"`
	VCPUs      int       `json:"vcpus"`
	MemoryMiB  int       `json:"memoryMiB"`
	StorageGiB int       `json:"storageGiB"`
	Expires    time.Time `json:"expires"`
	// Zone is the identity of the zone the create works in.
	Zone string `json:"zone,omitempty"`
	// VMID is the create's guest once it exists (0 before): that guest is
	// counted through the reservation, not as a member of the VDC's pool.
	VMID int `json:"vmid,omitempty"`
	// Snapshot is set on a reservation without a VM: the storage of a
	// snapshot being taken (the snapshot's name) or of the disks' copy of
	// a move across zones (quota.Ledger.ReserveStorage), or what an
	// existing VM grows by (quota.Ledger.ReserveResources: a disk, a
	// larger compute profile).
	Snapshot string `json:"snapshot,omitempty"`
	// Name is the VM name a create claims in the VDC (a restore of a
	// backup, quota.Ledger.ReserveNamed): no other live reservation of
	// the VDC claims it.
	Name string `json:"name,omitempty"`
}

// VDCSpec is the desired state of a VDC.
type VDCSpec struct {
	// Description is free text for humans (at most 1024 bytes).
	Description string `json:"description,omitempty"`
	// Quotas bounds what the VDC's resources may use in total.
	Quotas VDCQuotas `json:"quotas"`
	// Members are the users granted a role here, besides the identity
	// provider's role claims (the higher of the two counts).
	Members []MemberBinding `json:"members,omitempty"`
	// ServiceAccounts are the VDC's service accounts (at most
	// MaxServiceAccounts).
	ServiceAccounts []ServiceAccount `json:"serviceAccounts,omitempty"`
	// DefaultSecurityGroup is the short name of the security group a new
	// VM of the VDC is put in when its create names none; "" is none.
	DefaultSecurityGroup string `json:"defaultSecurityGroup,omitempty"`
}

// VDCQuotas are the upper bounds of a VDC. Every field is at least zero;
// zero allows none of that resource.
type VDCQuotas struct {
	VCPUs      int `json:"vcpus"`
	MemoryMiB  int `json:"memoryMiB"`
	StorageGiB int `json:"storageGiB"`
	VMs        int `json:"vms"`
	// PublicAddresses bounds the addresses of the zones' external
	// networks the VDC holds (its edge gateways', its 1:1 NATs', its load
	// balancers'); nil bounds none.
	PublicAddresses *int `json:"publicAddresses,omitempty"`
	// KubernetesClusters bounds the VDC's Kubernetes clusters (each a
	// hosted control plane in the management cluster), those being
	// deleted included; nil bounds none.
	KubernetesClusters *int `json:"kubernetesClusters,omitempty"`
	// ImageGiB bounds the total size of the VDC's own images (uploaded
	// files and templates made from VMs, each counted once however many
	// zones hold it); nil bounds none.
	ImageGiB *int `json:"imageGiB,omitempty"`
	// BackupGiB bounds the total size of the VDC's backup archives in
	// every zone (taken or scheduled); nil bounds none.
	BackupGiB *int `json:"backupGiB,omitempty"`
}

// ObjectKind implements Object.
func (*VDC) ObjectKind() Kind { return KindVDC }

// DeepCopyObject implements Object.
func (v *VDC) DeepCopyObject() Object {
	c := *v
	c.Status.Reservations = slices.Clone(v.Status.Reservations)
	cloneAccess(&c)
	if p := v.Quotas.PublicAddresses; p != nil {
		n := *p
		c.Quotas.PublicAddresses = &n
	}
	if p := v.Quotas.KubernetesClusters; p != nil {
		n := *p
		c.Quotas.KubernetesClusters = &n
	}
	if p := v.Quotas.ImageGiB; p != nil {
		n := *p
		c.Quotas.ImageGiB = &n
	}
	if p := v.Quotas.BackupGiB; p != nil {
		n := *p
		c.Quotas.BackupGiB = &n
	}
	return &c
}

// ComputeProfile is a tenant-wide VM size (e.g. medium = 4 vCPUs, 8192 MiB).
type ComputeProfile struct {
	TypeMeta
	ObjectMeta         `json:"metadata"`
	ComputeProfileSpec `json:"spec"`
}

// ComputeProfileSpec is the size of a compute profile.
type ComputeProfileSpec struct {
	Description string `json:"description,omitempty"`
	// VCPUs is the number of virtual CPUs (1..1024).
	VCPUs int `json:"vcpus"`
	// MemoryMiB is the memory in MiB (64..16777216).
	MemoryMiB int `json:"memoryMiB"`
}

// ObjectKind implements Object.
func (*ComputeProfile) ObjectKind() Kind { return KindComputeProfile }

// DeepCopyObject implements Object.
func (p *ComputeProfile) DeepCopyObject() Object { c := *p; return &c }

// StorageProfile is a storage tier: IO limits and, per zone, the Proxmox
// storage pool that holds disks of this tier.
type StorageProfile struct {
	TypeMeta
	ObjectMeta         `json:"metadata"`
	StorageProfileSpec `json:"spec"`
}

// StorageProfileSpec is the desired state of a storage profile.
type StorageProfileSpec struct {
	Description string `json:"description,omitempty"`
	// Tier is a short tier name shown to users (a DNS label, e.g. "ssd").
	Tier string `json:"tier"`
	// Kind is what the profile's storage holds: StorageDisk (VMs' disks,
	// also for "") or StorageBackup (backup archives).
	Kind string `json:"kind,omitempty"`
	// ReadMBps and WriteMBps limit disk throughput in MB/s; zero is unlimited.
	ReadMBps  int `json:"readMBps"`
	WriteMBps int `json:"writeMBps"`
	// Pools maps each zone that offers the tier to its Proxmox storage.
	// At least one; zones are unique.
	Pools []ZonePool `json:"pools"`
}

// ZonePool names the Proxmox storage that backs a storage profile in a zone.
type ZonePool struct {
	Zone string `json:"zone"`
	Pool string `json:"pool"`
}

// Kinds of storage profiles.
const (
	StorageDisk   = "DISK"
	StorageBackup = "BACKUP"
)

// IsBackup reports whether the profile's storage holds backup archives.
func (s *StorageProfileSpec) IsBackup() bool { return s.Kind == StorageBackup }

// PoolFor returns the Proxmox storage of the profile in zone.
func (s *StorageProfileSpec) PoolFor(zone string) (string, bool) {
	for _, p := range s.Pools {
		if p.Zone == zone {
			return p.Pool, true
		}
	}
	return "", false
}

// ProfileOfStorage returns the storage profile of profiles (sorted by
// name) that offers Proxmox storage storage in zone, preferring one whose
// limits are readMBps and writeMBps; nil when none does.
func ProfileOfStorage(profiles []*StorageProfile, zone, storage string, readMBps, writeMBps int) *StorageProfile {
	var found *StorageProfile
	for _, p := range profiles {
		for _, zp := range p.Pools {
			if zp.Zone != zone || zp.Pool != storage {
				continue
			}
			if p.ReadMBps == readMBps && p.WriteMBps == writeMBps {
				return p
			}
			if found == nil {
				found = p
			}
		}
	}
	return found
}

// ObjectKind implements Object.
func (*StorageProfile) ObjectKind() Kind { return KindStorageProfile }

// DeepCopyObject implements Object.
func (p *StorageProfile) DeepCopyObject() Object {
	c := *p
	c.Pools = slices.Clone(p.Pools)
	return &c
}

// Image is an OS image of the catalog, downloaded by agents into zones.
type Image struct {
	TypeMeta
	ObjectMeta `json:"metadata"`
	ImageSpec  `json:"spec"`
}

// ImageSpec is where an image comes from and what it supports.
type ImageSpec struct {
	Description string `json:"description,omitempty"`
	// Version is the image's version (e.g. "20251117"); printable, no spaces.
	Version string `json:"version"`
	// URL is the http(s) download address of the image.
	URL string `json:"url"`
	// Checksum is "sha256:<64 hex>" or "sha512:<128 hex>", lower case.
	Checksum string `json:"checksum"`
	// CloudInit says whether the image runs cloud-init on first boot.
	CloudInit bool `json:"cloudInit"`
	// VDC is the VDC that owns the image; "" for the platform's images.
	// A VDC's image is named VDCImageName(vdc, name); its URL is its
	// origin (ImageOriginUpload or ImageOriginVM and what it names), its
	// template lives in Proxmox, its record here.
	VDC string `json:"vdc,omitempty"`
	// Format is the image file's format: ImageFormatQCOW2 (also "": the
	// platform's images), ImageFormatRaw or ImageFormatISO.
	Format string `json:"format,omitempty"`
	// SizeBytes is the size of a VDC image (its uploaded file, or its
	// template's disks), counted against the VDC's imageGiB quota.
	SizeBytes int64 `json:"sizeBytes,omitempty"`
	// Zone is the zone a VDC image was made in (its template is there
	// first).
	Zone string `json:"zone,omitempty"`
}

// Formats of an image file.
const (
	ImageFormatQCOW2 = "QCOW2"
	ImageFormatRaw   = "RAW"
	ImageFormatISO   = "ISO"
)

// Origins of a VDC image: the prefix of its URL.
const (
	// ImageOriginUpload is "upload:<sha256 hex>": an uploaded file.
	ImageOriginUpload = "upload:"
	// ImageOriginVM is "vm:<vm id>": a template made from a VM.
	ImageOriginVM = "vm:"
)

// VDCImageName is the catalog name of vdc's image called name.
func VDCImageName(vdc, name string) string { return vdc + "." + name }

// ShortName is the image's name as its VDC sees it (the name itself for a
// platform image).
func (i *Image) ShortName() string {
	if i.VDC == "" {
		return i.Name
	}
	return strings.TrimPrefix(i.Name, i.VDC+".")
}

// ObjectKind implements Object.
func (*Image) ObjectKind() Kind { return KindImage }

// DeepCopyObject implements Object.
func (i *Image) DeepCopyObject() Object { c := *i; return &c }

// ZonePolicy is what the platform admin decides about a zone (zones
// themselves are discovered: a Proxmox cluster whose agents are in the
// mesh). Its name is the zone's name. A zone without one is in no region
// and open to every VDC.
type ZonePolicy struct {
	TypeMeta
	ObjectMeta     `json:"metadata"`
	ZonePolicySpec `json:"spec"`
}

// ZonePolicySpec is the region and the dedication of a zone.
type ZonePolicySpec struct {
	// Region groups zones (a DNS label, e.g. "eu-central"); "" for none.
	Region string `json:"region,omitempty"`
	// DedicatedTo lists the VDCs the zone is reserved for: when set, only
	// they see the zone and place resources in it. Empty: every VDC.
	DedicatedTo []string `json:"dedicatedTo,omitempty"`
	// MemoryOvercommitPercent is the guest memory placement lets a host of
	// the zone hold, in percent of the host's memory (100: none
	// overcommitted); 0 means DefaultMemoryOvercommitPercent.
	MemoryOvercommitPercent int `json:"memoryOvercommitPercent,omitempty"`
	// CPUOvercommitPercent is the guest vCPUs placement lets a host of the
	// zone hold, in percent of the host's logical CPUs; 0 means
	// DefaultCPUOvercommitPercent.
	CPUOvercommitPercent int `json:"cpuOvercommitPercent,omitempty"`
	// Maintenance lists the hosts of the zone a platform admin put in
	// maintenance (setHostMaintenance), by node name: placement takes
	// none of them, and the orchestrator moves their VMs away.
	Maintenance []HostInMaintenance `json:"maintenance,omitempty"`
}

// HostInMaintenance is one host of a zone in maintenance.
type HostInMaintenance struct {
	// Host is the Proxmox node name.
	Host string `json:"host"`
	// Since is when maintenance was enabled (RFC 3339): the migrations
	// of the drain are the host's migration tasks since then.
	Since string `json:"since"`
	// Failed lists the VMs the drain could not move, each with why; the
	// drain of a host with any is over (FAILED) until maintenance is
	// disabled.
	Failed []DrainFailure `json:"failed,omitempty"`
}

// DrainFailure is a VM the drain of a host could not move.
type DrainFailure struct {
	// VMID is the guest's Proxmox id.
	VMID int `json:"vmid"`
	// Message says why it could not move.
	Message string `json:"message"`
}

// InMaintenance returns the entry of host in the policy's maintenance
// list; ok is false when the host is not in maintenance. A nil policy
// has none.
func (p *ZonePolicy) InMaintenance(host string) (m HostInMaintenance, ok bool) {
	if p == nil {
		return HostInMaintenance{}, false
	}
	i := slices.IndexFunc(p.Maintenance, func(m HostInMaintenance) bool { return m.Host == host })
	if i < 0 {
		return HostInMaintenance{}, false
	}
	return p.Maintenance[i], true
}

// Placement's overcommit defaults and bounds (ZonePolicySpec): memory is
// not overcommitted unless the admin says so; vCPUs are, four to a CPU,
// as most clouds do for general-purpose guests.
const (
	DefaultMemoryOvercommitPercent = 100
	DefaultCPUOvercommitPercent    = 400
	MinOvercommitPercent           = 10
	MaxMemoryOvercommitPercent     = 400
	MaxCPUOvercommitPercent        = 1600
)

// Overcommit returns the zone's memory and CPU overcommit ratios (1.0:
// a host holds guests up to its own size), the defaults where unset. A
// nil policy (a zone without one) has the defaults.
func (p *ZonePolicy) Overcommit() (memory, cpu float64) {
	m, c := DefaultMemoryOvercommitPercent, DefaultCPUOvercommitPercent
	if p != nil && p.MemoryOvercommitPercent > 0 {
		m = p.MemoryOvercommitPercent
	}
	if p != nil && p.CPUOvercommitPercent > 0 {
		c = p.CPUOvercommitPercent
	}
	return float64(m) / 100, float64(c) / 100
}

// Allows reports whether the zone is open to vdc.
func (s *ZonePolicySpec) Allows(vdc string) bool {
	return len(s.DedicatedTo) == 0 || slices.Contains(s.DedicatedTo, vdc)
}

// ObjectKind implements Object.
func (*ZonePolicy) ObjectKind() Kind { return KindZonePolicy }

// DeepCopyObject implements Object.
func (p *ZonePolicy) DeepCopyObject() Object {
	c := *p
	c.DedicatedTo = slices.Clone(p.DedicatedTo)
	c.Maintenance = slices.Clone(p.Maintenance)
	for i := range c.Maintenance {
		c.Maintenance[i].Failed = slices.Clone(c.Maintenance[i].Failed)
	}
	return &c
}

// ZonePolicies returns the zone policies of store by zone name.
func ZonePolicies(ctx context.Context, store Store) (map[string]*ZonePolicy, error) {
	ps, err := List[*ZonePolicy](ctx, store)
	if err != nil {
		return nil, err
	}
	out := make(map[string]*ZonePolicy, len(ps))
	for _, p := range ps {
		out[p.Name] = p
	}
	return out, nil
}

// ZoneAllows reports whether zone is open to vdc (it has no policy, or
// its policy dedicates it to no VDC or to vdc among others): whether vdc
// may place anything there. A zone dedicated to other VDCs does not exist
// for vdc, so every operation that places something of a VDC in a zone
// asks this (or ZonePolicySpec.Allows of the policies it has read) and
// refuses as for a zone that does not exist.
func ZoneAllows(ctx context.Context, store Store, zone, vdc string) (bool, error) {
	p, err := Get[*ZonePolicy](ctx, store, zone)
	if errors.Is(err, ErrNotFound) {
		return true, nil
	}
	if err != nil {
		return false, err
	}
	return PlacementAllowed(p, vdc), nil
}

// PlacementAllowed is ZoneAllows over a policy already read: whether vdc
// may place anything in the zone of policy p (nil: the zone has none, and
// is open to every VDC).
func PlacementAllowed(p *ZonePolicy, vdc string) bool { return p == nil || p.Allows(vdc) }
