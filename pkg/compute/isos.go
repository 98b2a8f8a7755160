package compute

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"
	"slices"
	"strings"

	"github.com/flexplane/flexplane/pkg/catalog"
	"github.com/flexplane/flexplane/pkg/proxmox/pveapi"
	"github.com/flexplane/flexplane/pkg/tenancy"
)

// ISOs. A VDC's image of format ISO is an installation medium: a file,
// not a template. Where each fact lives: the image's record is a catalog
// object as every VDC image's; its file is a volume of content `iso` on a
// shared storage of the zone it was uploaded into, named after its
// catalog name (isoFilename), so any node of the zone reads it and the
// file names the image back. A VM has it in its CD-ROM drive, ide2
// ("<storage>:iso/<file>,media=cdrom"), and boots from it first
// ("boot: order=ide2;scsi0"): the Proxmox configuration is the only record
// of which VM holds which ISO. Proxmox deletes an ISO a VM's configuration
// names (a VM holding it then fails to start), so deleteVDCImage refuses an
// ISO attached to a VM of the VDC.

// isoSlot is the drive slot of a VM's CD-ROM.
const isoSlot = "ide2"

// isoFilePrefix starts the file name of every VDC ISO image.
const isoFilePrefix = "fp-iso-"

// isoFilename is the file name of img (an ISO image) on its storage.
func isoFilename(img *catalog.Image) string { return isoFilePrefix + img.Name + ".iso" }

// isoImageOf is the catalog name of the ISO image whose file volid is
// ("<storage>:iso/fp-iso-<name>.iso"), or "" for any other volume.
func isoImageOf(volid string) string {
	_, path, ok := strings.Cut(volid, ":")
	if !ok {
		return ""
	}
	file, ok := strings.CutPrefix(path, "iso/"+isoFilePrefix)
	if !ok {
		return ""
	}
	name, ok := strings.CutSuffix(file, ".iso")
	if !ok {
		return ""
	}
	return name
}

// AttachedISO is the catalog name of the VDC ISO image in the CD-ROM drive
// of a guest's configuration cfg, or "" when it holds none (or a file
// that is no VDC image).
func AttachedISO(cfg pveapi.Config) string {
	v := cfg.Str(isoSlot)
	if pveapi.Prop(v, "media") != "cdrom" {
		return ""
	}
	vol, _, _ := strings.Cut(v, ",")
	return isoImageOf(vol)
}

// isoMedia is the drive value that holds volid as a CD-ROM.
func isoMedia(volid string) string { return volid + ",media=cdrom" }

// ejectedMedia is the value of an empty CD-ROM drive.
const ejectedMedia = "none,media=cdrom"

// cloudInitSlot is the slot of the cloud-init drive of a VM whose image
// had it in isoSlot (the templates' place for it): it moves there when the
// VM gets an ISO.
const cloudInitSlot = "ide0"

// isoBootOrder is the boot order of a VM booting its ISO first.
const isoBootOrder = "order=" + isoSlot + ";scsi0"

// errNoISOStorage: a zone keeps no shared storage for ISO images.
var errNoISOStorage = errors.New("compute: no shared storage takes ISO images")

// isoStorages are the active shared storages of node that take `iso`
// content, sorted.
func isoStorages(ctx context.Context, z Zone, node string) ([]string, error) {
	var sts []struct {
		Storage string `json:"storage"`
		Active  int    `json:"active"`
		Shared  int    `json:"shared"`
	}
	if err := z.Client.Get(ctx, "/nodes/"+url.PathEscape(node)+"/storage?content=iso&enabled=1", &sts); err != nil {
		return nil, fmt.Errorf("compute: storages of %s: %w", node, err)
	}
	var out []string
	for _, s := range sts {
		if s.Active == 1 && s.Shared == 1 {
			out = append(out, s.Storage)
		}
	}
	slices.Sort(out)
	return out, nil
}

// onlineNode is the first online node of z by name.
func onlineNode(ctx context.Context, z Zone) (string, error) {
	var nodes []struct {
		Node   string `json:"node"`
		Status string `json:"status"`
	}
	if err := z.Client.Get(ctx, "/nodes", &nodes); err != nil {
		return "", fmt.Errorf("compute: list nodes: %w", err)
	}
	var online []string
	for _, n := range nodes {
		if n.Status == "online" {
			online = append(online, n.Node)
		}
	}
	if len(online) == 0 {
		return "", errors.New("compute: no online node")
	}
	return slices.Min(online), nil
}

// isoUploadTarget is where z takes an ISO upload: its first online node
// and the first shared storage of it for ISO images (errNoISOStorage
// when it has none).
func isoUploadTarget(ctx context.Context, z Zone) (node, storage string, err error) {
	if node, err = onlineNode(ctx, z); err != nil {
		return "", "", err
	}
	sts, err := isoStorages(ctx, z, node)
	if err != nil {
		return "", "", err
	}
	if len(sts) == 0 {
		return "", "", errNoISOStorage
	}
	return node, sts[0], nil
}

// errNoISOFile: an ISO image's file is on none of its zone's storages.
var errNoISOFile = errors.New("compute: the ISO image's file is missing")

// locateISO finds the file of img (an ISO image) in z: the node it was
// read from, the storage and the file's volume id.
func locateISO(ctx context.Context, z Zone, img *catalog.Image) (node, storage, volid string, err error) {
	if node, err = onlineNode(ctx, z); err != nil {
		return "", "", "", err
	}
	sts, err := isoStorages(ctx, z, node)
	if err != nil {
		return "", "", "", err
	}
	file := isoFilename(img)
	for _, s := range sts {
		var vols []struct {
			VolID string `json:"volid"`
		}
		if err := z.Client.Get(ctx, "/nodes/"+url.PathEscape(node)+"/storage/"+url.PathEscape(s)+"/content?content=iso", &vols); err != nil {
			return "", "", "", fmt.Errorf("compute: ISO images of %s: %w", s, err)
		}
		for _, v := range vols {
			if v.VolID == s+":iso/"+file {
				return node, s, v.VolID, nil
			}
		}
	}
	return "", "", "", errNoISOFile
}

// isoSignatureAt is where an ISO 9660 image has its first volume
// descriptor's standard identifier, isoSignature.
const isoSignatureAt = 32769

var isoSignature = []byte("CD001")

// errNotISO stops an upload of format ISO that is no ISO 9660 image.
var errNotISO = errors.New("the file is not an ISO 9660 image")

// isoSniffer passes a file through and fails it (errNotISO) once it is
// known not to carry isoSignature at isoSignatureAt: at that offset, or
// at its end when it is shorter.
type isoSniffer struct {
	r   io.Reader
	off int64
	sig [5]byte
	got int
}

func (s *isoSniffer) Read(p []byte) (int, error) {
	n, err := s.r.Read(p)
	start, end := s.off, s.off+int64(n)
	s.off = end
	done := s.got == len(s.sig)
	for i := max(start, isoSignatureAt); !done && i < end && i < isoSignatureAt+int64(len(s.sig)); i++ {
		s.sig[i-isoSignatureAt] = p[i-start]
		s.got = int(i-isoSignatureAt) + 1
	}
	if !done && s.got == len(s.sig) && string(s.sig[:]) != string(isoSignature) {
		return n, errNotISO
	}
	if errors.Is(err, io.EOF) && s.got < len(s.sig) {
		return n, errNotISO
	}
	return n, err
}

// resolveISO is the ISO image name of vdc for a VM of zone z (field
// names the input): NOT_FOUND for none or another VDC's, BAD_INPUT for an
// image that is no ISO or one of another zone. It returns the image and
// a node of z that reads its file and the file's volume id.
func resolveISO(ctx context.Context, d *deps, z Zone, vdc, name, field string) (*catalog.Image, string, string, error) {
	img, err := resolveImage(ctx, d.cfg.Catalog, vdc, name)
	if errors.Is(err, catalog.ErrNotFound) {
		return nil, "", "", &Error{Kind: KindNotFound, Field: field, Message: fmt.Sprintf("no image %q", name)}
	}
	if err != nil {
		return nil, "", "", catalogInput(field, "image", name, err)
	}
	if img.Format != catalog.ImageFormatISO {
		return nil, "", "", badInput(field, "image %s is a disk image, not an ISO: give it as image", name)
	}
	if img.Zone != z.Name {
		return nil, "", "", badInput(field, "ISO image %s is in zone %s, not %s: create the VM in zone %s, or upload the ISO into zone %s", name, img.Zone, z.Name, img.Zone, z.Name)
	}
	node, _, volid, err := locateISO(ctx, z, img)
	if errors.Is(err, errNoISOFile) {
		return nil, "", "", internal(fmt.Sprintf("the file of ISO image %s is missing from zone %s", name, z.Name), err)
	}
	if err != nil {
		return nil, "", "", zoneDown(z.Name, err)
	}
	return img, node, volid, nil
}

// isoHolders are the names of the VMs of vdc in z whose CD-ROM holds img.
func isoHolders(ctx context.Context, z Zone, vdc string, img *catalog.Image) ([]string, error) {
	guests, err := pveapi.Guests(ctx, z.Client)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, g := range guests {
		if v, ok := tenancy.VDCOf(g.Tags()); !ok || v != vdc {
			continue
		}
		cfg, err := pveapi.GuestConfig(ctx, z.Client, g.Node, g.VMID)
		if pveapi.IsNotFound(err) {
			continue
		}
		if err != nil {
			return nil, err
		}
		if AttachedISO(cfg) == img.Name {
			out = append(out, g.Name)
		}
	}
	slices.Sort(out)
	return out, nil
}

// deleteISO deletes vdc's ISO image img: its file, then its record.
// CONFLICT while a VM of the VDC holds it; ZONE_UNAVAILABLE when its zone
// cannot be reached (the image stays).
func (im *Images) deleteISO(ctx context.Context, vdc string, img *catalog.Image) (*catalog.Image, error) {
	d := im.s.d
	z, ok := d.find.zoneByName(ctx, img.Zone)
	if !ok || z.Client == nil {
		return nil, zoneDown(img.Zone, errUnreachable)
	}
	holders, err := isoHolders(ctx, z, vdc, img)
	if err != nil {
		return nil, zoneDown(z.Name, err)
	}
	if len(holders) > 0 {
		return nil, &Error{Kind: KindConflict, Field: "name", Message: fmt.Sprintf("ISO image %s is attached to VM %s: detach it first (detachISO)",
			img.ShortName(), strings.Join(holders, ", "))}
	}
	node, storage, volid, err := locateISO(ctx, z, img)
	switch {
	case errors.Is(err, errNoISOFile):
	case err != nil:
		return nil, zoneDown(z.Name, err)
	default:
		path := "/nodes/" + url.PathEscape(node) + "/storage/" + url.PathEscape(storage) + "/content/" + volid
		if _, err := pveapi.Run(ctx, z.Client, "DELETE", path, nil); err != nil && !pveapi.IsNotFound(err) {
			return nil, zoneDown(z.Name, err)
		}
	}
	if err := catalog.Delete[*catalog.Image](ctx, d.cfg.Catalog, img.Name, ""); err != nil && !errors.Is(err, catalog.ErrNotFound) {
		return nil, internal("deleting the image's record failed", err)
	}
	d.log.Info("VDC ISO image deleted", "vdc", vdc, "image", img.ShortName(), "zone", z.Name)
	return img, nil
}

// recordISO writes img, whose file volid is on storage of node in z, into
// the catalog; when it cannot (its name was taken meanwhile), the file
// goes.
func (im *Images) recordISO(ctx context.Context, z Zone, img *catalog.Image, node, storage, volid string) (*catalog.Image, error) {
	out, err := catalog.Create(ctx, im.s.d.cfg.Catalog, img)
	if err == nil {
		im.s.d.log.Info("VDC ISO image uploaded", "vdc", img.VDC, "image", img.ShortName(), "zone", z.Name, "volume", volid)
		return out, nil
	}
	im.dropVolume(z, node, storage, volid)
	if errors.Is(err, catalog.ErrAlreadyExists) {
		return nil, &Error{Kind: KindConflict, Field: "name", Message: fmt.Sprintf("the VDC has an image %q already", img.ShortName()), Cause: err}
	}
	return nil, internal("recording the image failed", err)
}

// DetachISO ejects the ISO from the CD-ROM drive of VM id of vdc and
// boots it from its disk again: one config write, conditional on the
// digest read. A VM without an ISO is left as it is. NOT_FOUND for a VM
// not of vdc; CONFLICT while it is being created or is locked.
func (im *Images) DetachISO(ctx context.Context, vdc, id string) error {
	vm, err := findDiskVM(ctx, im.s.d, vdc, id)
	if err != nil {
		return err
	}
	cur := vm.cfg.Str(isoSlot)
	if pveapi.Prop(cur, "media") != "cdrom" || strings.HasPrefix(cur, "none") {
		return nil
	}
	params := map[string]any{isoSlot: ejectedMedia, "digest": vm.cfg.Digest(), "boot": diskBootOrder(vm.cfg)}
	base := fmt.Sprintf("/nodes/%s/qemu/%d/config", vm.g.Node, vm.g.VMID)
	if _, err := pveapi.Run(ctx, vm.z.Client, "POST", base, params); err != nil {
		if retryable(err) {
			return newError(KindConflict, "the VM changed meanwhile; try again")
		}
		return zoneDown(vm.z.Name, err)
	}
	im.s.d.log.Info("ISO detached", "vdc", vdc, "vm", vm.g.Name, "zone", vm.z.Name, "was", cur)
	return nil
}

// diskBootOrder is cfg's boot order without the CD-ROM drive: its other
// devices in order, or its boot disk alone when none is left.
func diskBootOrder(cfg pveapi.Config) string {
	var devs []string
	for dev := range strings.SplitSeq(pveapi.Prop(cfg.Str("boot"), "order"), ";") {
		if dev != "" && dev != isoSlot {
			devs = append(devs, dev)
		}
	}
	if len(devs) == 0 {
		devs = []string{cmp.Or(cfg.BootDisk(), "scsi0")}
	}
	return "order=" + strings.Join(devs, ";")
}

// blankGuest is the create request of guest vmid of a VM of an ISO alone
// (intent in): a blank disk of its size on its storage, the ISO in its
// CD-ROM drive, booted first. The configure phase sets the rest.
func blankGuest(vmid int, in *Intent) map[string]any {
	return map[string]any{
		"vmid": vmid, "name": in.Name, "pool": tenancy.PoolID(in.VDC), "description": in.Description(),
		"tags":   tenancy.GuestTags(in.VDC, tenancy.CreatingTag, tenancy.OpTag(in.Op)),
		"scsihw": "virtio-scsi-pci", "scsi0": fmt.Sprintf("%s:%d", in.Storage, in.DiskGiB),
		isoSlot: isoMedia(in.ISO), "boot": isoBootOrder, "ostype": "l26",
		"cores": in.VCPUs, "memory": in.MemoryMiB,
	}
}

// AttachedImage is the image of vdc whose catalog name is name (a
// Hardware's ISO), nil when name is "", names no image any more, or an
// image of another VDC.
func AttachedImage(ctx context.Context, cat catalog.Store, vdc, name string) (*catalog.Image, error) {
	short, ok := strings.CutPrefix(name, vdc+".")
	if name == "" || !ok {
		return nil, nil
	}
	img, err := vdcImage(ctx, cat, vdc, short)
	if IsKind(err, KindNotFound) {
		return nil, nil
	}
	return img, err
}

// plannedISO adds to ch and del what brings cfg to the ISO of in: the
// ISO in the CD-ROM drive, booted first. A clone of an image has its
// cloud-init drive in the CD-ROM's slot: that drive is removed first, and
// made again in its own slot with the ISO (one write cannot do both: the
// two drives would share the volume's name).
func plannedISO(cfg pveapi.Config, in *Intent, ch map[string]any, del []string) (map[string]any, []string) {
	cur := cfg.Str(isoSlot)
	if strings.Contains(cur, "cloudinit") {
		return ch, append(del, isoSlot)
	}
	if want := isoMedia(in.ISO); cur != want {
		ch[isoSlot] = want
	}
	if cfg.Str("boot") != isoBootOrder {
		ch["boot"] = isoBootOrder
	}
	if in.Image != "" && !strings.Contains(cfg.Str(cloudInitSlot), "cloudinit") {
		ch[cloudInitSlot] = in.Storage + ":cloudinit"
	}
	return ch, del
}
