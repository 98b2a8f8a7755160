package compute

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	proxmox "github.com/luthermonson/go-proxmox"

	"github.com/flexplane/flexplane/pkg/catalog"
	"github.com/flexplane/flexplane/pkg/compute/images"
	"github.com/flexplane/flexplane/pkg/network/ipam"
	"github.com/flexplane/flexplane/pkg/proxmox/pveapi"
	"github.com/flexplane/flexplane/pkg/tenancy"
	"github.com/flexplane/flexplane/pkg/tenancy/quota"
)

// CreateInput is what createVM asks for.
type CreateInput struct {
	// VDC the VM belongs to (from the request's scope, not the client's input).
	VDC string
	// Name is the VM's name, a DNS name (labels of a-z, 0-9, '-').
	Name string
	// Zone is the zone's name.
	Zone string
	// Image is the image the VM's disk is cloned from; ISO an ISO image
	// the VM gets in its CD-ROM drive and boots from first. At least one
	// is given: an ISO alone gives the VM a blank disk of DiskGiB.
	Image, ISO     string
	ComputeProfile string
	StorageProfile string
	// DiskGiB is the size of the disk; at least the image's size.
	DiskGiB int
	// NICs are 1 to 4 NICs on networks of the VDC in the zone.
	NICs []NICInput
	// SSHKeys are OpenSSH authorized keys for the cloud-init user, each
	// as catalog.ParseSSHKey accepts it.
	SSHKeys []string
	// SSHKeyNames are keys of Owner's (catalog.SSHKeysOf) by name, for the
	// cloud-init user too: merged with SSHKeys, a key given twice once.
	SSHKeyNames []string
	// Owner is the token subject of the caller, whose keys SSHKeyNames
	// name.
	Owner string
	// User is the cloud-init user to create.
	User string
	// UserData is cloud-init user-data of the guest's own (a tenant's, or
	// a Cluster API worker's bootstrap data): a #cloud-config document or
	// a script starting with "#!", at most MaxUserData bytes, merged with
	// flexplane's own cloud-init settings (userdata.go) into a snippet.
	// Only its checksum is recorded with the guest's intent.
	UserData []byte
	// SecurityGroups are the short names of the VDC's security groups the
	// VM is in (at most catalog.MaxVMSecurityGroups); nil puts it in the
	// VDC's default group, if it has one; empty puts it in none.
	SecurityGroups []string
	// UserDataVerbatim delivers UserData as it is, neither checked (but
	// for its size) nor merged: a Cluster API bootstrap's, which owns the
	// worker's whole user-data (a jinja template of cloud-init's).
	UserDataVerbatim bool
	// PlacementGroup is the short name of a placement group of the VDC
	// in the zone ("" for none): placement keeps to its policy.
	PlacementGroup string
	// Host pins the VM to a host of the zone (a host id or its node name);
	// "" lets placement choose (placement.go). Who may pin is the
	// caller's to check.
	Host string
	// NoHA keeps the VM out of Proxmox HA; by default a VM on shared
	// storage is an HA resource that Proxmox recovers on another host when
	// its host fails (ha.go).
	NoHA bool
}

// NICInput is one NIC: the network's id and a static address, or "" for
// the first free address of the network's subnet.
type NICInput struct {
	Network string
	Address string
}

// MaxNICs is the most NICs a VM may have.
const MaxNICs = 4

// MaxDiskGiB bounds the disk size of a VM.
const MaxDiskGiB = 64 << 10

// MaxSSHKeys is the most SSH keys one create may authorize (they travel in
// the guest's cloud-init configuration, which Proxmox bounds too).
const MaxSSHKeys = 32

// systemUsers are the accounts a Debian or Ubuntu image has before
// cloud-init runs: cloud-init would give them a login shell and the
// caller's keys (root: the whole guest without sudo's log; the others:
// accounts services own). Names starting "systemd-" or "_" are refused
// too.
var systemUsers = map[string]bool{
	"root": true, "daemon": true, "bin": true, "sys": true, "sync": true, "games": true, "man": true,
	"lp": true, "mail": true, "news": true, "uucp": true, "proxy": true, "www-data": true,
	"backup": true, "list": true, "irc": true, "gnats": true, "nobody": true, "messagebus": true,
	"sshd": true, "syslog": true, "polkitd": true, "tss": true, "uuidd": true, "dnsmasq": true,
}

// systemUser reports whether name is an account of the image's system.
func systemUser(name string) bool {
	return systemUsers[name] || strings.HasPrefix(name, "systemd-") || strings.HasPrefix(name, "_")
}

type plan struct {
	zone    Zone
	img     *catalog.Image
	cp      *catalog.ComputeProfile
	sp      *catalog.StorageProfile
	storage string
	tpl     *images.Template // nil while the image is not staged in the zone
	// iso is the ISO image of the VM's CD-ROM drive (nil for none), isoVol
	// its file's volume id; img is nil for a VM of an ISO alone.
	iso             *catalog.Image
	isoVol, isoNode string
	nics            []nicPlan
	keys            []string
	// userData is CreateInput.UserData, checked, and verbatim its
	// UserDataVerbatim.
	userData []byte
	verbatim bool
	// slot is the host placement chose, held until the create ends.
	slot *slot
	// groups are the VM's security groups (the input's, or the VDC's
	// default).
	groups []string
	// pgroup is the VM's placement group, nil for none.
	pgroup *catalog.PlacementGroup
	// restore is the backup the guest is restored from instead of a
	// clone of the image's template (nil for a create).
	restore *restoreSource
}

type nicPlan struct {
	network string // the network's id
	subnet  ipam.Subnet
	static  netip.Addr
}

var (
	dnsLabel = regexp.MustCompile(`^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$`)
	userRE   = regexp.MustCompile(`^[a-z_][a-z0-9_-]{0,31}$`)
)

func validDNSName(s string) bool {
	if s == "" || len(s) > 253 {
		return false
	}
	for l := range strings.SplitSeq(s, ".") {
		if !dnsLabel.MatchString(l) {
			return false
		}
	}
	return true
}

// validate checks every input before anything is written.
// placeable returns absent (the error of a zone that does not exist)
// unless vdc may place resources in zone: a zone dedicated to other VDCs
// does not exist for vdc (catalog.ZoneAllows, the one rule of dedicated
// zones). Every operation of the service that places something in a zone
// (createVM, a move across zones, a worker's network) asks it.
func placeable(ctx context.Context, d *deps, zone, vdc string, absent *Error) error {
	open, err := catalog.ZoneAllows(ctx, d.cfg.Catalog, zone, vdc)
	if err != nil {
		return internal("reading the zone's policy failed", err)
	}
	if !open {
		return absent
	}
	return nil
}

func validate(ctx context.Context, d *deps, in CreateInput) (*plan, error) {
	p := &plan{}
	if !validDNSName(in.Name) {
		return nil, badInput("name", "name must be a DNS name of lower-case letters, digits, '-' and '.'")
	}
	z, ok := d.find.zoneByName(ctx, in.Zone)
	down := false
	if !ok {
		// A zone known but out of reach fails at once (once its hosts
		// are OFFLINE), not as a zone that does not exist; right after a
		// restart, one not known yet is waited for (within ctx, the zone
		// timeout), then unavailable.
		if z, down = d.find.unreachableZone(ctx, in.Zone); !down {
			if err := d.find.zonesUnknown(ctx); err != nil {
				return nil, zoneDown(in.Zone, err)
			}
			if z, ok = d.find.zoneByName(ctx, in.Zone); !ok {
				if z, down = d.find.unreachableZone(ctx, in.Zone); !down {
					return nil, badInput("zone", "no zone %q", in.Zone)
				}
			}
		}
	}
	err := placeable(ctx, d, z.Name, in.VDC, badInput("zone", "no zone %q", in.Zone))
	if err != nil {
		return nil, err
	}
	if down {
		return nil, zoneDown(z.Name, errUnreachable)
	}
	p.zone = z
	if in.Image == "" && in.ISO == "" {
		return nil, badInput("image", "give an image, an iso, or both")
	}
	if in.Image != "" {
		if p.img, err = resolveImage(ctx, d.cfg.Catalog, in.VDC, in.Image); errors.Is(err, catalog.ErrNotFound) {
			// The same answer for another VDC's image as for none.
			return nil, &Error{Kind: KindNotFound, Field: "image", Message: fmt.Sprintf("no image %q", in.Image)}
		} else if err != nil {
			return nil, catalogInput("image", "image", in.Image, err)
		}
		if p.img.Format == catalog.ImageFormatISO {
			return nil, badInput("image", "image %s is an ISO: give it as iso", in.Image)
		}
	}
	if in.ISO != "" {
		if p.iso, p.isoNode, p.isoVol, err = resolveISO(ctx, d, z, in.VDC, in.ISO, "iso"); err != nil {
			return nil, err
		}
	}
	if p.cp, err = catalog.Get[*catalog.ComputeProfile](ctx, d.cfg.Catalog, in.ComputeProfile); err != nil {
		return nil, catalogInput("computeProfile", "compute profile", in.ComputeProfile, err)
	}
	if p.sp, err = catalog.Get[*catalog.StorageProfile](ctx, d.cfg.Catalog, in.StorageProfile); err != nil {
		return nil, catalogInput("storageProfile", "storage profile", in.StorageProfile, err)
	}
	if p.sp.IsBackup() {
		return nil, badInput("storageProfile", "storage profile %s holds backups, not disks", in.StorageProfile)
	}
	if p.storage, ok = p.sp.PoolFor(z.Name); !ok {
		return nil, badInput("storageProfile", "storage profile %s has no pool in zone %s", in.StorageProfile, z.Name)
	}
	if in.DiskGiB < 1 || in.DiskGiB > MaxDiskGiB {
		return nil, badInput("diskGiB", "diskGiB must be between 1 and %d", MaxDiskGiB)
	}
	if len(in.NICs) < 1 || len(in.NICs) > MaxNICs {
		return nil, badInput("nics", "a VM has 1 to %d NICs", MaxNICs)
	}
	seen := map[string]bool{}
	for i, n := range in.NICs {
		field := fmt.Sprintf("nics[%d]", i)
		sub, err := d.find.network(ctx, z, in.VDC, n.Network)
		if err != nil {
			if errors.Is(err, errNoNetwork) {
				return nil, badInput(field+".network", "no network %q in zone %s", n.Network, z.Name)
			}
			return nil, zoneDown(z.Name, err)
		}
		np := nicPlan{network: n.Network, subnet: sub}
		if n.Address != "" {
			a, err := netip.ParseAddr(n.Address)
			if err != nil {
				return nil, badInput(field+".address", "%q is not an IP address", n.Address)
			}
			if !sub.Assignable(a) {
				return nil, badInput(field+".address", "%s is not an assignable address of %s (outside it, or its network, broadcast or gateway address)", a, sub.Prefix)
			}
			if seen[a.String()] {
				return nil, badInput(field+".address", "%s is given twice", a)
			}
			seen[a.String()] = true
			np.static = a
		}
		p.nics = append(p.nics, np)
	}
	keys, err := sshKeys(ctx, d, in)
	if err != nil {
		return nil, err
	}
	p.keys = keys
	if !userRE.MatchString(in.User) {
		return nil, badInput("user", "user must be 1 to 32 of a-z, 0-9, '_', '-', starting with a letter or '_'")
	}
	if systemUser(in.User) {
		return nil, badInput("user", "user %q is a system account of the image; choose another name", in.User)
	}
	if !p.cloudInit() && len(p.keys) > 0 {
		field := "sshKeys"
		if len(in.SSHKeys) == 0 {
			field = "sshKeyNames"
		}
		return nil, badInput(field, "%s", p.noCloudInit())
	}
	if len(in.UserData) > 0 {
		if in.UserDataVerbatim && len(in.UserData) > MaxUserData {
			return nil, badInput("userData", "user-data is %d bytes, more than %d", len(in.UserData), MaxUserData)
		}
		if !in.UserDataVerbatim {
			if err := checkUserData(in.UserData, in.User); err != nil {
				return nil, err
			}
		}
		if !p.cloudInit() {
			return nil, badInput("userData", "%s", p.noCloudInit())
		}
		if d.snips.w == nil {
			return nil, badInput("userData", "this installation delivers no user-data (no snippet writer is configured)")
		}
		p.userData, p.verbatim = in.UserData, in.UserDataVerbatim
	}
	if p.groups, err = createGroups(ctx, d.cfg.Catalog, in.VDC, in.SecurityGroups); err != nil {
		return nil, err
	}
	if p.pgroup, err = createPlacementGroup(ctx, d.cfg.Catalog, in.VDC, z.Name, in.PlacementGroup); err != nil {
		return nil, err
	}
	if err := placeCreate(ctx, d, p, in); err != nil {
		return nil, err
	}
	if len(p.userData) > 0 {
		// The guest lands on the host placement chose (else on its
		// template's): that host must keep snippets.
		host := ""
		switch {
		case p.slot != nil:
			host = p.slot.node
		case p.tpl != nil:
			host = p.tpl.Node
		}
		if host != "" {
			if _, err := snippetStorage(ctx, z, host, false); err != nil {
				p.slot.release()
				return nil, badInput("userData", "zone %s keeps no snippets on host %s (no storage of it allows snippets content), which user-data needs", z.Name, host)
			}
		}
	}
	return p, nil
}

// sshKeys checks in's SSHKeys and resolves its SSHKeyNames among the
// owner's keys, and returns them merged, each key (its options, type and
// key, whatever its comment) once.
func sshKeys(ctx context.Context, d *deps, in CreateInput) ([]string, error) {
	var (
		out  []string
		seen = map[string]bool{}
	)
	add := func(info *catalog.SSHKeyInfo) {
		id := strings.Join(info.Options, ",") + " " + info.Fingerprint
		if !seen[id] {
			seen[id] = true
			out = append(out, info.Line)
		}
	}
	if len(in.SSHKeys) > MaxSSHKeys {
		return nil, badInput("sshKeys", "at most %d SSH keys", MaxSSHKeys)
	}
	for i, k := range in.SSHKeys {
		field := fmt.Sprintf("sshKeys[%d]", i)
		info, err := catalog.ParseSSHKey(field, k)
		if err != nil {
			return nil, keyInput(field, err)
		}
		add(info)
	}
	if len(in.SSHKeyNames) == 0 {
		return out, nil
	}
	if len(in.SSHKeyNames) > MaxSSHKeys {
		return nil, badInput("sshKeyNames", "at most %d SSH keys", MaxSSHKeys)
	}
	var owned []catalog.UserSSHKey
	if in.Owner != "" {
		var err error
		if owned, err = catalog.SSHKeysOf(ctx, d.cfg.Catalog, in.Owner); err != nil {
			return nil, internal("reading the caller's SSH keys failed", err)
		}
	}
	for i, name := range in.SSHKeyNames {
		field := fmt.Sprintf("sshKeyNames[%d]", i)
		j := slices.IndexFunc(owned, func(k catalog.UserSSHKey) bool { return k.Name == name })
		if j < 0 {
			return nil, badInput(field, "you have no SSH key named %q", name)
		}
		info, err := catalog.ParseSSHKey(field, owned[j].PublicKey)
		if err != nil {
			return nil, keyInput(field, err)
		}
		add(info)
	}
	if len(out) > MaxSSHKeys {
		return nil, badInput("sshKeyNames", "at most %d SSH keys in all, sshKeys and sshKeyNames together", MaxSSHKeys)
	}
	return out, nil
}

// keyInput is the bad input of a key catalog.ParseSSHKey refused.
func keyInput(field string, err error) error {
	var ve *catalog.ValidationError
	if errors.As(err, &ve) {
		return badInput(field, "%s", ve.Message)
	}
	return internal("checking an SSH key failed", err)
}

func catalogInput(field, what, name string, err error) error {
	if errors.Is(err, catalog.ErrNotFound) {
		return badInput(field, "no %s %q", what, name)
	}
	return internal("reading the catalog failed", err)
}

// cloudInit reports whether the plan's VM runs cloud-init: its image
// does (a VM of an ISO alone runs none).
func (p *plan) cloudInit() bool { return p.img != nil && p.img.CloudInit }

// noCloudInit says why the plan's VM takes no cloud-init settings.
func (p *plan) noCloudInit() string {
	if p.img == nil {
		return fmt.Sprintf("a VM of ISO %s alone runs no cloud-init", p.iso.ShortName())
	}
	return fmt.Sprintf("image %s does not run cloud-init", p.img.Name)
}

// imageName is the name of the plan's image, "" for none.
func (p *plan) imageName() string {
	if p.img == nil {
		return ""
	}
	return p.img.Name
}

// target is where the plan's image is staged.
func (p *plan) target() images.Target {
	return images.Target{Zone: p.zone.Name, Client: p.zone.Client, Storages: []string{p.storage}, Node: p.slot.templateNode()}
}

// CreateVM validates in, reserves quota, claims the addresses and starts
// the create: it returns at once with the VM in CREATING (nil while the
// image is still being staged into the zone) and the create's operation.
// Errors are *Error of KindBadInput (Field relative to in, e.g.
// "nics[0].address"), KindQuotaExceeded (wrapping the
// *quota.ExceededError), KindConflict (a taken static address, a full
// subnet), KindZoneUnavailable or KindInternal; on error nothing is left
// behind.
//
// The claim phase runs here, and so does the clone request when the image
// is staged (the caller gets the VM's id at once); a runner runs the
// other phases (createPhases).
func (s *Service) CreateVM(ctx context.Context, in CreateInput) (*VM, *Operation, error) {
	// The checks read the zone within the zone timeout: one cut off (its
	// hosts not yet OFFLINE) is ZONE_UNAVAILABLE, not a create that hangs.
	d := s.d
	vctx, cancel := context.WithTimeout(ctx, d.find.timeout)
	p, err := validate(vctx, d, in)
	cancel()
	if err != nil {
		return nil, nil, err
	}
	intent := &Intent{
		Op: newOpID(), Created: time.Now().UTC(), VDC: in.VDC, Name: in.Name, Image: p.imageName(), ISO: p.isoVol,
		VCPUs: p.cp.VCPUs, MemoryMiB: p.cp.MemoryMiB, DiskGiB: in.DiskGiB,
		Storage: p.storage, ReadMBps: p.sp.ReadMBps, WriteMBps: p.sp.WriteMBps,
		User: in.User, SSHKeys: p.keys, SecurityGroups: p.groups, NoHA: in.NoHA,
	}
	if p.pgroup != nil {
		intent.PlacementGroup = p.pgroup.ShortName()
	}
	return startCreate(ctx, d, p, intent)
}

// startCreate starts the create of plan p with intent: it claims (the
// claim phase), sends the clone (or the restore of a backup) when it can
// and starts the runner of the other phases. On error nothing is left
// behind.
func startCreate(ctx context.Context, d *deps, p *plan, intent *Intent) (*VM, *Operation, error) {
	sc := &createScope{deps: d, z: p.zone, p: p, in: intent}
	if p.userData != nil {
		sc.userData = p.userData
		if !p.verbatim {
			sc.userData = mergedUserData(intent, p.userData)
		}
		intent.UserDataSum = userDataSum(sc.userData)
	}
	// Until its operation is recorded, Recover knows it live from here.
	defer d.eng.begin(intent.Op)()
	fail := func(err error) (*VM, *Operation, error) {
		d.log.Info("create refused", "vm", intent.Name, "vdc", intent.VDC, "zone", p.zone.Name, "err", err)
		sc.release(context.WithoutCancel(ctx))
		return nil, nil, err
	}
	phases := createPhases()
	if err := runPhases(ctx, d.eng, "", intent.Op, phases[:1], sc); err != nil {
		return fail(cause(err))
	}
	if p.tpl == nil && p.restore == nil && p.img != nil {
		// The first create that needs the image stages it; its guest (and
		// so its VM id) exists once the template does.
		sc.opID = createOpID(p.zone.ID, 0, intent.Op)
		op := Operation{ID: sc.opID, Kind: OpCreate, State: OpRunning, Step: "stage", Started: intent.Created}
		d.eng.record(intent.VDC, p.zone.Name, op)
		d.eng.spawn(func(ctx context.Context) { sc.run(ctx, from(phases, "stage")) })
		return nil, &op, nil
	}
	if err := sc.cloneGuest(ctx); err != nil {
		return fail(err)
	}
	// Readers of the IPAM see the VM's addresses at once (the configure
	// phase assigns them again, idempotently, should this fail).
	if err := sc.assign(ctx); err != nil {
		d.log.Warn("assigning addresses", "vmid", sc.vmid, "err", err)
	}
	return sc.startRunner(from(phases, "clone")), sc.op(), nil
}

// createScope is what the phases of a create work on: the plan (nil for
// a create Recover took over) and intent, and what earlier phases found.
type createScope struct {
	*deps
	z    Zone
	p    *plan
	in   *Intent
	opID string // the create's operation
	// vmid is the guest the clone made (0 before); upid its clone task
	// while it is to be waited for.
	vmid int
	upid string
	// assigned: the guest is recorded on its IPAM mappings (in this run).
	assigned bool
	// userData is the snippet of the guest's user-data while this process
	// has it (nil for a create Recover took over: the snippet written
	// before is all there is).
	userData []byte
}

// createPhases are the phases of a create, in order: the names its
// operation's Step and Config.AfterStep say.
//
//   - claim: the addresses (IPAM mappings under new MACs), the quota
//     reservation and the VDC's pool;
//   - stage: the image's template in the zone, unless it is there;
//   - clone: the guest, cloned from the template with the whole intent in
//     its description, and its clone task waited for;
//   - configure: the guest recorded on its IPAM mappings, then cores,
//     memory, NICs, cloud-init, disk IO limits and the marker tags;
//   - resize: the disk grown to its size;
//   - user-data: the snippet of the guest's own user-data (if any);
//   - firewall: for a VM in security groups, its zone's firewall holding
//     them (Config.Firewall), waited for within Config.FirewallTimeout;
//   - start: the guest started;
//   - finish: the quota reservation released and the marker cleared.
//
// Each phase from configure on observes the guest, applies its change
// with the config digest it read and observes again until the guest has
// it; a guest already unmarked ends the create (someone else finished it).
func createPhases() []phase[createScope] {
	return []phase[createScope]{
		step("claim", (*createScope).claimPhase),
		step("stage", (*createScope).stagePhase),
		step("clone", (*createScope).clonePhase),
		guestPhase("configure", (*createScope).configureGuest),
		guestPhase("resize", (*createScope).resizeDisk),
		guestPhase("user-data", (*createScope).deliverUserData),
		step("firewall", (*createScope).firewallPhase),
		guestPhase("start", (*createScope).startGuest),
		guestPhase("finish", (*createScope).unmarkGuest),
	}
}

// claimPhase claims the addresses first: a create refused for its
// addresses has written nothing on the VDC (its resourceVersion is
// unchanged), and one refused for quota gives them back (CreateVM
// releases what the phase claimed).
func (sc *createScope) claimPhase(ctx context.Context) error {
	if err := sc.claim(ctx); err != nil {
		return err
	}
	if err := sc.reserve(ctx); err != nil {
		return err
	}
	if err := sc.ensurePool(ctx, sc.z, sc.in.VDC); err != nil {
		return zoneDown(sc.z.Name, err)
	}
	return nil
}

// reserve reserves the create's quota; a restore of a backup claims its
// VM's name with it (no two restores make one name).
func (sc *createScope) reserve(ctx context.Context) error {
	u := quota.Usage{VCPUs: sc.in.VCPUs, MemoryMiB: sc.in.MemoryMiB, StorageGiB: sc.in.DiskGiB}
	var err error
	if sc.p != nil && sc.p.restore != nil {
		err = sc.quota.ReserveNamed(ctx, sc.in.VDC, sc.in.Op, sc.z.ID, sc.in.Name, u)
	} else {
		err = sc.quota.Reserve(ctx, sc.in.VDC, sc.in.Op, sc.z.ID, u)
	}
	if errors.Is(err, quota.ErrNameTaken) {
		return &Error{Kind: KindConflict, Field: "name", Message: fmt.Sprintf("a VM named %s is being created in the VDC", sc.in.Name), Cause: err}
	}
	if err != nil {
		return quotaError(sc.in.VDC, err)
	}
	if sc.p != nil && sc.p.restore != nil {
		// Checked again under the reservation: a restore of that name
		// that released its own has named its guest by then.
		taken, err := nameTaken(ctx, sc.z, sc.in.VDC, sc.in.Name)
		if err != nil {
			return zoneDown(sc.z.Name, err)
		}
		if taken {
			return &Error{Kind: KindConflict, Field: "name", Message: fmt.Sprintf("the VDC has a VM named %s", sc.in.Name)}
		}
	}
	return nil
}

// stagePhase waits for the image to be staged in the zone (the first
// create that needs it stages it), unless it was there.
func (sc *createScope) stagePhase(ctx context.Context) error {
	if sc.p == nil || sc.p.tpl != nil || sc.p.restore != nil || sc.p.img == nil {
		return nil
	}
	tpl, err := sc.stageOnHost(ctx)
	if err != nil {
		return stageError(sc.p.img.Name, sc.z.Name, err)
	}
	if int64(sc.in.DiskGiB)<<30 < tpl.DiskBytes {
		return badInput("diskGiB", "diskGiB must be at least the size of image %s (%d bytes)", sc.p.img.Name, tpl.DiskBytes)
	}
	sc.p.tpl = &tpl
	return nil
}

// clonePhase clones the guest unless CreateVM did, and waits for the
// clone task.
func (sc *createScope) clonePhase(ctx context.Context) error {
	if sc.vmid == 0 {
		if err := sc.cloneGuest(ctx); err != nil {
			return err
		}
		sc.eng.update(sc.opID, func(op *Operation) { op.VMID = tenancy.VMRef{ZoneID: sc.z.ID, VMID: sc.vmid}.ID() })
		sc.eng.setLive(sc.z, sc.vmid, sc.in.Op)
	}
	if sc.upid != "" {
		if err := pveapi.Wait(ctx, sc.z.Client, sc.upid); err != nil {
			return err
		}
		sc.upid = ""
	}
	return nil
}

// cloneGuest sends the clone of the plan's template.
func (sc *createScope) cloneGuest(ctx context.Context) error {
	vmid, upid, err := sc.clone(ctx)
	if err != nil {
		return cloneError(err)
	}
	sc.vmid, sc.upid = vmid, upid
	return nil
}

// op is this process's record of the create.
func (sc *createScope) op() *Operation {
	st, _ := sc.eng.local(sc.opID)
	return &st.op
}

// startRunner records the create of the guest of sc and runs phases in
// the background.
func (sc *createScope) startRunner(phases []phase[createScope]) *VM {
	z, in := sc.z, sc.in
	ref := tenancy.VMRef{ZoneID: z.ID, VMID: sc.vmid}
	sc.opID = createOpID(z.ID, sc.vmid, in.Op)
	op := Operation{ID: sc.opID, Kind: OpCreate, State: OpRunning, Step: "clone", VMID: ref.ID(), Started: in.Created}
	sc.eng.record(in.VDC, z.Name, op)
	sc.eng.setLive(z, sc.vmid, in.Op)
	sc.eng.spawn(func(ctx context.Context) { sc.run(ctx, phases) })
	vm := &VM{ID: ref.ID(), Ref: ref, Name: in.Name, VDC: in.VDC, Zone: z.Name, Status: StatusCreating,
		VCPUs: in.VCPUs, MemoryMiB: in.MemoryMiB, DiskGiB: in.DiskGiB, Operation: op.ID}
	for _, n := range in.NICs {
		vm.Addresses = append(vm.Addresses, n.Address)
	}
	return vm
}

// run is the runner of a create: it runs phases and concludes.
func (sc *createScope) run(ctx context.Context, phases []phase[createScope]) {
	err := runPhases(ctx, sc.eng, sc.opID, sc.in.Op, phases, sc)
	if sc.vmid == 0 {
		// No guest was made: the claims are undone (unless the process
		// is only stopping: Recover releases them).
		if ctx.Err() == nil {
			sc.release(ctx)
		}
		sc.eng.finishOp(sc.opID, err)
		return
	}
	defer sc.eng.clearLive(sc.z, sc.vmid)
	sc.conclude(ctx, err)
}

// conclude ends a create: on failure (but not when the process is only
// stopping) the guest is deleted and its addresses released; the quota
// reservation is released either way.
func (sc *createScope) conclude(ctx context.Context, err error) {
	z, vmid, in := sc.z, sc.vmid, sc.in
	if ctx.Err() != nil {
		return // shutting down: the guest keeps its marker for Recover
	}
	if err != nil {
		sc.log.Warn("create failed; cleaning up", "vm", in.Name, "vdc", in.VDC, "zone", z.Name, "vmid", vmid, "err", err)
		if cerr := sc.cleanup(ctx); cerr != nil {
			sc.log.Error("cleanup failed", "vmid", vmid, "err", cerr)
		}
	} else {
		sc.log.Info("VM created", "vm", in.Name, "vdc", in.VDC, "zone", z.Name, "vmid", vmid)
	}
	if qerr := sc.quota.Release(ctx, in.VDC, in.Op); qerr != nil {
		sc.log.Warn("releasing quota", "op", in.Op, "err", qerr)
	}
	sc.unplace()
	sc.eng.finishOp(sc.opID, err)
}

// cleanup deletes the guest of a create that cannot be finished and
// releases its addresses.
func (sc *createScope) cleanup(ctx context.Context) error {
	z, vmid, in := sc.z, sc.vmid, sc.in
	g, ok, err := pveapi.FindGuest(ctx, z.Client, vmid)
	if err != nil {
		return err
	}
	if ok {
		cfg, err := pveapi.GuestConfig(ctx, z.Client, g.Node, vmid)
		if err != nil && !pveapi.IsNotFound(err) {
			return err
		}
		if got, _ := ParseIntent(cfg.Str("description")); got != nil && got.Op == in.Op {
			if _, err := sc.destroy(ctx, z, g, in); err != nil {
				return err
			}
			return nil
		}
	}
	sc.release(ctx)
	return nil
}

// adoptCreate is the create's recovery hook: it finishes an unfinished
// create found on guest vmid of zone z, or cleans it up.
func adoptCreate(ctx context.Context, d *deps, z Zone, vmid int, in *Intent) {
	d.log.Info("recovering an unfinished create", "vm", in.Name, "vdc", in.VDC, "zone", z.Name, "vmid", vmid, "op", in.Op)
	id := createOpID(z.ID, vmid, in.Op)
	d.eng.record(in.VDC, z.Name, Operation{ID: id, Kind: OpCreate, State: OpRunning, Step: "recover",
		VMID: tenancy.VMRef{ZoneID: z.ID, VMID: vmid}.ID(), Started: in.Created})
	d.eng.setLive(z, vmid, in.Op)
	defer d.eng.clearLive(z, vmid)
	// The guest exists: the phases from configure on finish it (they
	// wait for a clone still running).
	sc := &createScope{deps: d, z: z, in: in, opID: id, vmid: vmid}
	phases := from(createPhases(), "configure")
	var err error
	for range 3 {
		sc.assigned = false
		if err = runPhases(ctx, d.eng, id, in.Op, phases, sc); err == nil || errors.Is(err, errGone) || ctx.Err() != nil {
			break
		}
	}
	if errors.Is(err, errGone) {
		// Someone else finished or removed it; nothing is ours to undo.
		d.eng.finishOp(id, nil)
		return
	}
	sc.conclude(ctx, err)
}

// cloneError is the client-safe account of a clone that failed.
func cloneError(err error) error {
	if pveapi.IsLockTimeout(err) {
		return internal(fmt.Sprintf("cloning the template failed: Proxmox could not lock it in time %d times (it is busy with other clones); try again", maxLockRetries+1), err)
	}
	return internal("cloning the template failed", err)
}

// stageError is the client-safe account of a failed staging of image in
// zone; err (its cause) stays in the logs.
func stageError(image, zone string, err error) error {
	why := "see the orchestrator's logs"
	if te, ok := pveapi.AsTaskError(err); ok {
		why = taskFailure(te)
	}
	return &Error{Kind: KindInternal, Message: fmt.Sprintf("staging image %s in zone %s failed: %s", image, zone, why), Cause: err}
}

// bind records the VMID of the create's guest on its quota reservation
// before the clone makes it (the guest is counted through the reservation,
// and listed as CREATING, from its first moment); should that fail, the
// guest is counted twice until the create finishes: too much, never too
// little.
func (sc *createScope) bind(ctx context.Context, vmid int) {
	in := sc.in
	if err := sc.quota.Bind(ctx, in.VDC, in.Op, vmid); err != nil {
		sc.log.Warn("binding the guest to its quota reservation", "op", in.Op, "vmid", vmid, "err", err)
	}
}

// release undoes the claims of a create that has no guest.
func (sc *createScope) release(ctx context.Context) {
	z, in := sc.z, sc.in
	var macs []string
	for _, n := range in.NICs {
		macs = append(macs, n.MAC)
	}
	if err := ipam.ReleaseMACs(ctx, z.Client, macs); err != nil {
		sc.log.Warn("releasing addresses", "op", in.Op, "err", err)
	}
	sc.addrs.drop(macs...)
	if err := sc.quota.Release(ctx, in.VDC, in.Op); err != nil {
		sc.log.Warn("releasing quota", "op", in.Op, "err", err)
	}
	sc.unplace()
}

// claim claims an address per NIC in the IPAM and records them in the intent.
func (sc *createScope) claim(ctx context.Context) error {
	p, in := sc.p, sc.in
	for i, n := range p.nics {
		mac := ipam.NewMAC()
		sc.addrs.hold(mac)
		addr, err := ipam.Claim(ctx, p.zone.Client, n.subnet, n.static, mac)
		if err != nil {
			sc.addrs.drop(mac)
			field := fmt.Sprintf("nics[%d].address", i)
			switch {
			case errors.Is(err, ipam.ErrTaken):
				return &Error{Kind: KindConflict, Field: field, Message: fmt.Sprintf("address %s is already in use", n.static), Cause: err}
			case errors.Is(err, ipam.ErrExhausted):
				return &Error{Kind: KindConflict, Field: fmt.Sprintf("nics[%d].network", i), Message: fmt.Sprintf("no free address left in %s", n.subnet.Prefix), Cause: err}
			}
			// A network deleted since it was validated (Proxmox refuses
			// the claim) is the caller's race, not the zone's failure.
			if _, nerr := sc.find.network(ctx, p.zone, in.VDC, n.network); errors.Is(nerr, errNoNetwork) {
				return &Error{Kind: KindConflict, Field: fmt.Sprintf("nics[%d].network", i), Message: "the network was deleted while the VM was being created", Cause: err}
			}
			return zoneDown(p.zone.Name, err)
		}
		in.NICs = append(in.NICs, NICIntent{SDNZone: n.subnet.Zone, VNet: n.subnet.VNet, MAC: mac, Address: addr.String(),
			Bits: n.subnet.Prefix.Bits(), Gateway: gatewayString(n.subnet.Gateway)})
	}
	return nil
}

func gatewayString(a netip.Addr) string {
	if !a.IsValid() {
		return ""
	}
	return a.String()
}

// ensurePool creates the VDC's Proxmox pool if it is missing.
func (d *deps) ensurePool(ctx context.Context, z Zone, vdc string) error {
	err := z.Client.Post(ctx, "/pools", map[string]any{"poolid": tenancy.PoolID(vdc)}, nil)
	if err != nil && !pveapi.IsAlreadyExists(err) {
		return fmt.Errorf("compute: create pool: %w", err)
	}
	return nil
}

// RemovePool deletes the Proxmox pool of vdc in the zone of c, once the
// VDC's guests are gone (Proxmox refuses a pool that is not empty); a pool
// that does not exist is no error.
func RemovePool(ctx context.Context, c *proxmox.Client, vdc string) error {
	var pools []struct {
		PoolID string `json:"poolid"`
	}
	if err := c.Get(ctx, "/pools", &pools); err != nil {
		return fmt.Errorf("compute: remove pool: %w", err)
	}
	id := tenancy.PoolID(vdc)
	for _, p := range pools {
		if p.PoolID == id {
			if err := c.Delete(ctx, "/pools/"+id, nil); err != nil {
				return fmt.Errorf("compute: remove pool %s: %w", id, err)
			}
		}
	}
	return nil
}

// clone clones the template into a new guest carrying the intent; the
// VMID from /cluster/nextid is a guess, a taken one is replaced.
func (sc *createScope) clone(ctx context.Context) (int, string, error) {
	z, in := sc.z, sc.in
	vmid, err := pveapi.NextID(ctx, z.Client)
	if err != nil {
		return 0, "", err
	}
	// A VM that moved out of z keeps the id its VMID here made: that VMID
	// is not the new VM's to take.
	kept := sc.find.keptVMIDs(ctx, z)
	base, locks := vmid, 0
	for attempt := 1; ; attempt++ {
		for kept[vmid] {
			vmid++
		}
		var upid string
		sc.bind(ctx, vmid)
		sc.p.slot.bind(vmid)
		err := sc.requestGuest(ctx, vmid, &upid)
		switch {
		case err == nil:
			for _, n := range in.NICs {
				sc.addrs.drop(n.MAC)
			}
			return vmid, upid, nil
		case pveapi.IsLockTimeout(err) && locks < maxLockRetries:
			locks++
			// The template's lock is busy (other clones of it): nothing
			// was done; the same clone again, after a while.
			sc.log.Debug("clone: lock timeout; retrying", "vmid", vmid, "attempt", locks, "err", err)
			sleep(ctx, lockRetryDelay(locks))
			if err := ctx.Err(); err != nil {
				return 0, "", fmt.Errorf("compute: clone: %w", err)
			}
			continue
		case (pveapi.IsAlreadyExists(err) || pveapi.IsLocked(err)) && attempt < 200:
			// Taken since nextid answered: guess again, spread out so
			// concurrent creates do not keep colliding.
			vmid = base + 1 + rand.IntN(8*attempt)
			continue
		default:
			return 0, "", fmt.Errorf("compute: clone: %w", err)
		}
	}
}

// requestGuest asks Proxmox for guest vmid: a full clone of the plan's
// template, or the restore of its backup, carrying the intent.
func (sc *createScope) requestGuest(ctx context.Context, vmid int, upid *string) error {
	in := sc.in
	if r := sc.p.restore; r != nil {
		return sc.z.Client.Post(ctx, fmt.Sprintf("/nodes/%s/qemu", sc.p.slot.host(r.node)), r.params(vmid, in), upid)
	}
	if sc.p.img == nil {
		return sc.z.Client.Post(ctx, fmt.Sprintf("/nodes/%s/qemu", sc.p.slot.host(sc.p.isoNode)), blankGuest(vmid, in), upid)
	}
	tpl := *sc.p.tpl
	return sc.z.Client.Post(ctx, fmt.Sprintf("/nodes/%s/qemu/%d/clone", tpl.Node, tpl.VMID), map[string]any{
		"newid": vmid, "name": in.Name, "full": 1, "storage": in.Storage,
		"pool": tenancy.PoolID(in.VDC), "description": in.Description(), "target": sc.p.slot.host(tpl.Node),
	}, upid)
}

// errGone: the guest vanished or is no longer the one of the intent.
var errGone = errors.New("compute: the guest of the create is gone")

// maxSteps bounds the observe/apply rounds of one phase.
const maxSteps = 100

// guestStep is the work of a phase on the guest of a create: given the
// guest as it is now (g, cfg; base is its API path), it applies the
// phase's change if the guest still needs it (applied), or reports that
// it does not.
type guestStep func(sc *createScope, ctx context.Context, g pveapi.Resource, cfg pveapi.Config, base string) (applied bool, err error)

// guestPhase is the phase name that drives the guest with apply: observe
// (a guest gone, or no longer the one of the intent, is errGone), apply
// conditional on the digest it read, observe again, until apply has
// nothing left to do. Every step is idempotent, so any number of
// processes may run the phases on one guest, one after another or at once
// (a concurrent writer only makes the other re-read). A guest found
// unmarked has been finished: by this phase (it is done) or by someone
// else (the create is done, errDone).
func guestPhase(name string, apply guestStep) phase[createScope] {
	return phase[createScope]{name: name, run: func(ctx context.Context, sc *createScope) error {
		applied := false
		for range maxSteps {
			if err := ctx.Err(); err != nil {
				return err
			}
			g, ok, err := pveapi.FindGuest(ctx, sc.z.Client, sc.vmid)
			if err != nil {
				return err
			}
			if !ok {
				return errGone
			}
			if g.Lock != "" {
				sleep(ctx, pveapi.PollInterval)
				continue
			}
			cfg, err := pveapi.GuestConfig(ctx, sc.z.Client, g.Node, sc.vmid)
			if err != nil {
				return err
			}
			if got, _ := ParseIntent(cfg.Str("description")); got == nil || got.Op != sc.in.Op {
				return errGone
			}
			if !isCreating(g) {
				if applied {
					return nil
				}
				return errDone
			}
			if !sc.assigned {
				if err := sc.assign(ctx); err != nil {
					return err
				}
				sc.assigned = true
			}
			did, err := apply(sc, ctx, g, cfg, fmt.Sprintf("/nodes/%s/qemu/%d", g.Node, sc.vmid))
			if pveapi.IsLockTimeout(err) {
				sc.log.Debug("lock timeout; retrying", "vmid", sc.vmid, "step", name, "err", err)
				sleep(ctx, pveapi.PollInterval)
				continue
			}
			if retryable(err) {
				continue
			}
			if err != nil {
				return internal(fmt.Sprintf("creating the VM failed at its %s step: Proxmox refused it (see the orchestrator's logs)", name),
					fmt.Errorf("compute: %s: %w", name, err))
			}
			if !did {
				return nil
			}
			applied = true
		}
		return fmt.Errorf("compute: guest %d did not converge in %d steps", sc.vmid, maxSteps)
	}}
}

// assign records the guest on its IPAM mappings.
func (sc *createScope) assign(ctx context.Context) error {
	z, vmid, in := sc.z, sc.vmid, sc.in
	for _, n := range in.NICs {
		a, err := netip.ParseAddr(n.Address)
		if err != nil {
			return fmt.Errorf("compute: intent address %q: %w", n.Address, err)
		}
		if err := ipam.Assign(ctx, z.Client, n.SDNZone, n.VNet, a, n.MAC, vmid); err != nil {
			return err
		}
	}
	return nil
}

// configureGuest writes the config the intent plans.
func (sc *createScope) configureGuest(ctx context.Context, g pveapi.Resource, cfg pveapi.Config, base string) (bool, error) {
	changes, del := plannedConfig(cfg, sc.in)
	if len(changes) == 0 && del == "" {
		return false, nil
	}
	sc.log.Debug("configure", "vmid", g.VMID, "changes", changes, "delete", del)
	changes["digest"] = cfg.Digest()
	if del != "" {
		changes["delete"] = del
	}
	_, err := pveapi.Run(ctx, sc.z.Client, "POST", base+"/config", changes)
	return true, err
}

// resizeDisk grows the disk to the intent's size.
func (sc *createScope) resizeDisk(ctx context.Context, _ pveapi.Resource, cfg pveapi.Config, base string) (bool, error) {
	if size, _ := parseSize(propOf(cfg.Str("scsi0"), "size")); size >= int64(sc.in.DiskGiB)<<30 {
		return false, nil
	}
	_, err := pveapi.Run(ctx, sc.z.Client, "PUT", base+"/resize", map[string]any{
		"disk": "scsi0", "size": fmt.Sprintf("%dG", sc.in.DiskGiB), "digest": cfg.Digest()})
	return true, err
}

// deliverUserData writes the snippet of the guest's own user-data.
func (sc *createScope) deliverUserData(ctx context.Context, g pveapi.Resource, cfg pveapi.Config, base string) (bool, error) {
	return sc.snips.writeUserData(ctx, sc.z, g, cfg, sc.in, sc.userData, base)
}

// firewallPhase waits until the zone's firewall holds the security groups
// of a VM in groups, before its guest is first started: a VM in groups
// never runs open. A firewall not written in time fails the create.
func (sc *createScope) firewallPhase(ctx context.Context) error {
	return sc.waitFirewall(ctx, sc.z.Name, sc.in, sc.vmid)
}

// waitFirewall waits, within Config.FirewallTimeout, until zone's firewall
// holds the security groups in's VM (guest vmid) is in; at once for a VM
// in no group or without a Config.Firewall.
func (d *deps) waitFirewall(ctx context.Context, zone string, in *Intent, vmid int) error {
	if d.cfg.Firewall == nil || len(in.SecurityGroups) == 0 {
		return nil
	}
	wctx, cancel := context.WithTimeout(ctx, d.cfg.FirewallTimeout)
	defer cancel()
	if err := d.cfg.Firewall.WaitVM(wctx, zone, in.VDC, vmid); err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return &Error{Kind: KindInternal, Message: fmt.Sprintf("the VM's security groups could not be written to zone %s's firewall within %s, so it was not started",
			zone, d.cfg.FirewallTimeout), Cause: err}
	}
	return nil
}

// startGuest starts the guest: a VM to be highly available on shared
// storage becomes an HA resource with state started, which Proxmox's HA
// manager starts on its next round (ha.go); the others are started. Both
// are waited for (an HA VM within Config.HARequestTimeout, hawait.go), so
// that the phase observes the guest running rather than asking again.
func (sc *createScope) startGuest(ctx context.Context, g pveapi.Resource, _ pveapi.Config, base string) (bool, error) {
	if g.HAState == "" && !sc.in.NoHA {
		did, err := sc.enrollHA(ctx, sc.z, g, sc.in, "started")
		if err != nil {
			return did, err
		}
		if did {
			return true, sc.waitHAStarted(ctx, sc.z, g.VMID, time.Now())
		}
	}
	if g.Status == "running" {
		return false, nil
	}
	err := sc.runHA(ctx, sc.z, base+"/status/start", nil, g.VMID)
	if err != nil && strings.Contains(err.Error(), "already running") {
		err = nil
	}
	return true, err
}

// unmarkGuest ends a verified create (configured, sized and running):
// it releases the quota reservation first (from now on Proxmox counts the
// guest: its op tag is no longer covered by a reservation, so it is never
// counted twice nor missed), then clears the marker.
func (sc *createScope) unmarkGuest(ctx context.Context, _ pveapi.Resource, cfg pveapi.Config, base string) (bool, error) {
	if err := sc.quota.Release(ctx, sc.in.VDC, sc.in.Op); err != nil {
		return true, err
	}
	_, err := pveapi.Run(ctx, sc.z.Client, "POST", base+"/config", map[string]any{
		"tags": tenancy.GuestTags(sc.in.VDC), "digest": cfg.Digest()})
	return true, err
}

// maxLockRetries bounds the clones sent again after a lock timeout (about
// 15s of waiting in all, besides Proxmox's own waits).
const maxLockRetries = 10

// lockRetryDelay is the wait before attempt+1 of a request that met a lock
// timeout: growing, jittered (concurrent creates do not retry in step),
// at most 2s.
func lockRetryDelay(attempt int) time.Duration {
	d := min(100*time.Millisecond<<min(attempt, 5), 2*time.Second)
	return d/2 + rand.N(d/2)
}

// retryable: the guest changed under us (re-observe and plan again).
func retryable(err error) bool {
	return pveapi.IsDigestMismatch(err) || pveapi.IsLocked(err)
}

func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// plannedConfig returns the config changes (and keys to delete) that bring
// cfg to the intent, apart from the disk size, power state and marker.
func plannedConfig(cfg pveapi.Config, in *Intent) (map[string]any, string) {
	ch := map[string]any{}
	if want := tenancy.GuestTags(in.VDC, tenancy.CreatingTag, tenancy.OpTag(in.Op)); tenancy.JoinTags(tenancy.SplitTags(cfg.Str("tags"))) != want {
		ch["tags"] = want
	}
	if cfg.Str("name") != in.Name {
		ch["name"] = in.Name
	}
	if cfg.Int("cores") != in.VCPUs {
		ch["cores"] = in.VCPUs
	}
	if cfg.Int("memory") != in.MemoryMiB {
		ch["memory"] = in.MemoryMiB
	}
	var del []string
	for i := range MaxNICs {
		nk, ik := "net"+strconv.Itoa(i), "ipconfig"+strconv.Itoa(i)
		if i >= len(in.NICs) {
			for _, k := range []string{nk, ik} {
				if cfg.Str(k) != "" {
					del = append(del, k)
				}
			}
			continue
		}
		n := in.NICs[i]
		cur := cfg.Str(nk)
		// A VM in security groups has its NICs' firewall on from the
		// start (sgsync keeps it so).
		fw := len(in.SecurityGroups) > 0
		if !strings.EqualFold(propOf(cur, "virtio"), n.MAC) || propOf(cur, "bridge") != n.VNet || (fw && propOf(cur, "firewall") != "1") {
			ch[nk] = "virtio=" + n.MAC + ",bridge=" + n.VNet
			if fw {
				ch[nk] = ch[nk].(string) + ",firewall=1"
			}
		}
		ip := "ip=" + n.Address + "/" + strconv.Itoa(n.Bits)
		if n.Gateway != "" {
			ip += ",gw=" + n.Gateway
		}
		if cfg.Str(ik) != ip {
			ch[ik] = ip
		}
	}
	if in.User != "" && cfg.Str("ciuser") != in.User {
		ch["ciuser"] = in.User
	}
	if len(in.SSHKeys) > 0 {
		if want := encodeKeys(in.SSHKeys); cfg.Str("sshkeys") != want {
			ch["sshkeys"] = want
		}
	}
	if in.UserDataSum == "" && in.UserData == "" && cfg.Str("cicustom") != "" {
		// A restored guest names the snippets of the VM it was backed up
		// from: never this VM's.
		del = append(del, "cicustom")
	}
	if in.ISO != "" {
		ch, del = plannedISO(cfg, in, ch, del)
	}
	if disk := cfg.Str("scsi0"); disk != "" && (!limitIs(disk, "mbps_rd", in.ReadMBps) || !limitIs(disk, "mbps_wr", in.WriteMBps)) {
		ch["scsi0"] = setProp(setProp(disk, "mbps_rd", in.ReadMBps), "mbps_wr", in.WriteMBps)
	}
	return ch, strings.Join(del, ",")
}

// encodeKeys renders SSH keys as Proxmox's sshkeys wants them: one per
// line, percent-encoded (spaces as %20).
func encodeKeys(keys []string) string {
	return strings.ReplaceAll(url.QueryEscape(strings.Join(keys, "\n")), "+", "%20")
}

// propOf returns key of a Proxmox property string ("vol,key=v,...").
func propOf(s, key string) string { return pveapi.Prop(s, key) }

// limitIs reports whether disk's limit key is v (0: unset).
func limitIs(disk, key string, v int) bool {
	cur := propOf(disk, key)
	if v == 0 {
		return cur == ""
	}
	return cur == strconv.Itoa(v)
}

// setProp sets key of a property string to v, or removes it when v is 0.
func setProp(s, key string, v int) string {
	parts := slices.DeleteFunc(strings.Split(s, ","), func(p string) bool { return strings.HasPrefix(p, key+"=") })
	if v > 0 {
		parts = append(parts, key+"="+strconv.Itoa(v))
	}
	return strings.Join(parts, ",")
}

// parseSize parses a Proxmox size ("32G", "512M", "4096"): a byte count,
// never negative.
func parseSize(s string) (int64, error) { return pveapi.ConfigSize(s) }

// quotaError maps an error of reserving quota in vdc.
func quotaError(vdc string, err error) error {
	if qe := (*quota.ExceededError)(nil); errors.As(err, &qe) {
		return &Error{Kind: KindQuotaExceeded, Message: qe.Error(), Cause: err}
	}
	if ze := (*quota.ZoneUnavailableError)(nil); errors.As(err, &ze) {
		return &Error{Kind: KindZoneUnavailable, Zone: ze.Zone,
			Message: fmt.Sprintf("the quota of VDC %s cannot be checked: the usage in zone %s cannot be counted", vdc, ze.Zone), Cause: err}
	}
	return internal("reserving quota failed", err)
}
