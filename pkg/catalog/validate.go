package catalog

import (
	"fmt"
	"net/url"
	"regexp"
	"slices"
	"strings"
)

var (
	labelRE     = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`)
	subdomainRE = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`)
	// A Proxmox storage identifier (pve-storage-id).
	storageIDRE = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9\-_.]*[A-Za-z0-9]$`)
	versionRE   = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._+~:-]*$`)
	checksumRE  = regexp.MustCompile(`^(sha256:[0-9a-f]{64}|sha512:[0-9a-f]{128})$`)
)

const (
	maxNameLen        = 63
	maxDescriptionLen = 1024
)

// ValidateLabel checks that s is a DNS label (lower-case letters, digits and
// '-', starting and ending alphanumeric, at most 63 bytes), as VDC, zone and
// tier names must be.
func ValidateLabel(field, s string) error {
	switch {
	case s == "":
		return invalid(field, "must not be empty")
	case len(s) > maxNameLen:
		return invalid(field, "must be at most %d characters", maxNameLen)
	case !labelRE.MatchString(s):
		return invalid(field, "%q must consist of lower-case letters, digits and '-', and start and end with a letter or digit", s)
	}
	return nil
}

// ValidateName checks the name of a catalog object of the given kind: a DNS
// label for VDCs; for other kinds dots are allowed too (e.g. "ubuntu-24.04").
func ValidateName(kind Kind, name string) error {
	switch kind {
	case KindVDC, KindExternalNetwork:
		return ValidateLabel("name", name)
	case KindEdgeGateway, KindLoadBalancer, KindSecurityGroup, KindPlacementGroup:
		vdc, second, ok := strings.Cut(name, ".")
		if !ok || ValidateLabel("name", vdc) != nil || ValidateLabel("name", second) != nil {
			shape := "<vdc>.<zone>"
			if kind != KindEdgeGateway {
				shape = "<vdc>.<name>"
			}
			return invalid("name", "%q must be %s, both DNS labels", name, shape)
		}
		return nil
	}
	switch {
	case name == "":
		return invalid("name", "must not be empty")
	case len(name) > maxNameLen:
		return invalid("name", "must be at most %d characters", maxNameLen)
	case !subdomainRE.MatchString(name):
		return invalid("name", "%q must consist of lower-case letters, digits, '-' and '.', and start and end with a letter or digit", name)
	}
	return nil
}

func validateDescription(s string) error {
	if len(s) > maxDescriptionLen {
		return invalid("description", "must be at most %d bytes", maxDescriptionLen)
	}
	return nil
}

func validateRange(field string, v, lo, hi int) error {
	if v < lo || v > hi {
		return invalid(field, "must be between %d and %d, got %d", lo, hi, v)
	}
	return nil
}

func firstError(errs ...error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// Limits of quota fields: generous, but they keep sums far from overflowing.
const maxQuota = 1 << 30

// Validate implements Object.
func (v *VDC) Validate() error {
	return firstError(
		ValidateName(KindVDC, v.Name),
		validateDescription(v.Description),
		validateRange("quotas.vcpus", v.Quotas.VCPUs, 0, maxQuota),
		validateRange("quotas.memoryMiB", v.Quotas.MemoryMiB, 0, maxQuota),
		validateRange("quotas.storageGiB", v.Quotas.StorageGiB, 0, maxQuota),
		validateRange("quotas.vms", v.Quotas.VMs, 0, maxQuota),
		validateRange("quotas.publicAddresses", ptrOr(v.Quotas.PublicAddresses, 0), 0, maxQuota),
		validateRange("quotas.kubernetesClusters", ptrOr(v.Quotas.KubernetesClusters, 0), 0, maxQuota),
		validateRange("quotas.imageGiB", ptrOr(v.Quotas.ImageGiB, 0), 0, maxQuota),
		validateRange("quotas.backupGiB", ptrOr(v.Quotas.BackupGiB, 0), 0, maxQuota),
		validateAccess(v),
		validateDefaultGroup(v.DefaultSecurityGroup),
	)
}

// Validate implements Object.
func (p *ComputeProfile) Validate() error {
	return firstError(
		ValidateName(KindComputeProfile, p.Name),
		validateDescription(p.Description),
		validateRange("vcpus", p.VCPUs, 1, 1024),
		validateRange("memoryMiB", p.MemoryMiB, 64, 16<<20),
	)
}

// Validate implements Object.
func (p *StorageProfile) Validate() error {
	if err := firstError(
		ValidateName(KindStorageProfile, p.Name),
		validateDescription(p.Description),
		ValidateLabel("tier", p.Tier),
		validateRange("readMBps", p.ReadMBps, 0, 1_000_000),
		validateRange("writeMBps", p.WriteMBps, 0, 1_000_000),
	); err != nil {
		return err
	}
	if k := p.StorageProfileSpec.Kind; k != "" && k != StorageDisk && k != StorageBackup {
		return invalid("kind", "kind is %s or %s", StorageDisk, StorageBackup)
	}
	if len(p.Pools) == 0 {
		return invalid("pools", "must map at least one zone to a Proxmox storage")
	}
	seen := make(map[string]bool, len(p.Pools))
	for i, zp := range p.Pools {
		if err := ValidateLabel(fmt.Sprintf("pools[%d].zone", i), zp.Zone); err != nil {
			return err
		}
		if seen[zp.Zone] {
			return invalid(fmt.Sprintf("pools[%d].zone", i), "zone %q is listed twice", zp.Zone)
		}
		seen[zp.Zone] = true
		if len(zp.Pool) > 64 || !storageIDRE.MatchString(zp.Pool) {
			return invalid(fmt.Sprintf("pools[%d].pool", i), "%q is not a Proxmox storage identifier (a letter, then letters, digits, '-', '_' or '.', at most 64)", zp.Pool)
		}
	}
	return nil
}

// Validate implements Object.
func (i *Image) Validate() error {
	if err := firstError(ValidateName(KindImage, i.Name), validateDescription(i.Description)); err != nil {
		return err
	}
	if i.Version == "" || len(i.Version) > 64 || !versionRE.MatchString(i.Version) {
		return invalid("version", "%q must be 1 to 64 letters, digits or . _ + ~ : - and start with a letter or digit", i.Version)
	}
	switch i.Format {
	case "", ImageFormatQCOW2, ImageFormatRaw, ImageFormatISO:
	default:
		return invalid("format", "%q is not %s, %s or %s", i.Format, ImageFormatQCOW2, ImageFormatRaw, ImageFormatISO)
	}
	if i.VDC != "" {
		return i.validateOfVDC()
	}
	if i.SizeBytes != 0 || i.Zone != "" {
		return invalid("sizeBytes", "only a VDC's image has a size and a zone of origin")
	}
	u, err := url.Parse(i.URL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || len(i.URL) > 2048 {
		return invalid("url", "%q must be an absolute http or https URL", i.URL)
	}
	if u.User != nil {
		return invalid("url", "must not carry credentials")
	}
	if !checksumRE.MatchString(i.Checksum) {
		return invalid("checksum", "must be sha256:<64 hex digits> or sha512:<128 hex digits> in lower case")
	}
	return nil
}

// vdcImageURLRE is the origin of a VDC image.
var vdcImageURLRE = regexp.MustCompile(`^(upload:[0-9a-f]{64}|vm:[A-Za-z0-9_-]{1,128})$`)

// validateOfVDC checks what is particular to a VDC's image.
func (i *Image) validateOfVDC() error {
	if err := ValidateLabel("vdc", i.VDC); err != nil {
		return err
	}
	short, ok := strings.CutPrefix(i.Name, i.VDC+".")
	if !ok || short == "" {
		return invalid("name", "%q must start with its VDC %q", i.Name, i.VDC)
	}
	if !vdcImageURLRE.MatchString(i.URL) {
		return invalid("url", "%q must be upload:<sha256 hex> or vm:<vm id>", i.URL)
	}
	if sum, up := strings.CutPrefix(i.URL, ImageOriginUpload); up && i.Checksum != "sha256:"+sum {
		return invalid("checksum", "must be sha256:<the sha256 of its url>")
	}
	if strings.HasPrefix(i.URL, ImageOriginVM) && i.Checksum != "" {
		return invalid("checksum", "an image made from a VM has none")
	}
	if i.SizeBytes < 0 {
		return invalid("sizeBytes", "must not be negative")
	}
	if i.Zone != "" {
		return ValidateLabel("zone", i.Zone)
	}
	return nil
}

// MaxDedicatedVDCs bounds the VDCs a zone is dedicated to.
const MaxDedicatedVDCs = 100

// Validate implements Object.
func (p *ZonePolicy) Validate() error {
	if err := ValidateLabel("name", p.Name); err != nil {
		return err
	}
	if p.Region != "" {
		if err := ValidateLabel("region", p.Region); err != nil {
			return err
		}
	}
	if len(p.DedicatedTo) > MaxDedicatedVDCs {
		return invalid("dedicatedTo", "must name at most %d VDCs", MaxDedicatedVDCs)
	}
	for i, v := range p.DedicatedTo {
		field := fmt.Sprintf("dedicatedTo[%d]", i)
		if err := ValidateLabel(field, v); err != nil {
			return err
		}
		if slices.Contains(p.DedicatedTo[:i], v) {
			return invalid(field, "%q is named twice", v)
		}
	}
	if v := p.MemoryOvercommitPercent; v != 0 && (v < MinOvercommitPercent || v > MaxMemoryOvercommitPercent) {
		return invalid("memoryOvercommitPercent", "must be between %d and %d (0: the default, %d)", MinOvercommitPercent, MaxMemoryOvercommitPercent, DefaultMemoryOvercommitPercent)
	}
	if v := p.CPUOvercommitPercent; v != 0 && (v < MinOvercommitPercent || v > MaxCPUOvercommitPercent) {
		return invalid("cpuOvercommitPercent", "must be between %d and %d (0: the default, %d)", MinOvercommitPercent, MaxCPUOvercommitPercent, DefaultCPUOvercommitPercent)
	}
	return nil
}

// ValidateObject checks an object's TypeMeta against its Go type, then the
// object itself.
func ValidateObject(o Object) error {
	tm := o.GetTypeMeta()
	if tm.APIVersion != "" && tm.APIVersion != APIVersion {
		return invalid("apiVersion", "must be %s, got %q", APIVersion, tm.APIVersion)
	}
	if tm.Kind != "" && tm.Kind != o.ObjectKind() {
		return invalid("kind", "must be %s, got %q", o.ObjectKind(), tm.Kind)
	}
	if strings.TrimSpace(o.GetObjectMeta().Name) != o.GetObjectMeta().Name {
		return invalid("name", "must not have surrounding spaces")
	}
	return o.Validate()
}

// ptrOr is *p, or def when p is nil.
func ptrOr(p *int, def int) int {
	if p == nil {
		return def
	}
	return *p
}

func validateDefaultGroup(name string) error {
	if name == "" {
		return nil
	}
	return ValidateLabel("defaultSecurityGroup", name)
}
