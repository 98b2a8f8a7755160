package compute

import (
	"cmp"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/flexplane/flexplane/pkg/catalog"
	"github.com/flexplane/flexplane/pkg/compute/images"
	"github.com/flexplane/flexplane/pkg/proxmox/pveapi"
	"github.com/flexplane/flexplane/pkg/tenancy"
)

// The images a VDC owns. Where each fact lives: the image's record (its
// name, owner, origin, format, checksum, size, creation time) is a
// catalog object (an Image with spec.vdc, named
// catalog.VDCImageName(vdc, name)); what it is made of is a template
// guest in each zone that holds it (tagged images.Tag, as the platform's
// images' templates), which Proxmox keeps. An image is listed and usable
// once its record exists, and its record is written only once its first
// template is ready: an upload that breaks, or a template that cannot be
// made, leaves no image (the volume or guest it made is deleted).
//
// An upload streams: the API hands the request body's file part on as it
// is read, the fleet's uploader sends it to the agent of the zone's
// staging node in chunks of 1 MiB, and the agent writes them into a file
// storage's directory itself, or forwards them to its Proxmox's upload
// endpoint as one multipart POST (VolumeUploader). The orchestrator
// counts the bytes as they pass and stops the stream past the size limit
// or the VDC's imageGiB quota, which leaves nothing stored.

// MaxImageBytes bounds the file of an uploaded image (the agent's bound).
const MaxImageBytes = 64 << 30

// UploadRef names where an upload goes: a storage of a node of a zone,
// its content type and file name there.
type UploadRef struct {
	ZoneID, Node, Storage string
	// Content is the Proxmox content type ("import" or "iso").
	Content, Filename string
	// MaxSize is the most bytes the upload may carry (the VDC's
	// allowance, at most MaxImageBytes); 0 is the agent's bound.
	MaxSize int64
}

// UploadResult is what an upload's agent reports.
type UploadResult struct {
	// UPID is the Proxmox task that stores the file; "" when the agent
	// wrote the file into the storage's directory itself: it is then
	// stored.
	UPID string
	// SHA256 is the lower-case hex SHA-256 of the bytes the agent stored
	// (computed there, as they were written: the image's checksum), Size
	// their number.
	SHA256 string
	Size   int64
	// Volume is the file's Proxmox volume id.
	Volume string
}

// VolumeUploader streams files into the storages of the nodes of zones
// (the agent of the node writes them into a file storage's directory, or
// forwards them to Proxmox's upload endpoint).
type VolumeUploader interface {
	// UploadVolume sends what r reads, size bytes (0: until r ends); an
	// error reading r aborts the upload, so that Proxmox stores nothing.
	UploadVolume(ctx context.Context, ref UploadRef, size int64, r io.Reader) (UploadResult, error)
}

// UploadImageInput is what uploadImage asks for.
type UploadImageInput struct {
	// VDC is the caller's VDC.
	VDC string
	// Name is the image's name in the VDC: lower-case letters, digits,
	// '-' and '.', unique in the VDC and not a platform image's name.
	Name, Description string
	// Format is catalog.ImageFormatQCOW2, catalog.ImageFormatRaw or
	// catalog.ImageFormatISO (an installation medium: its file is kept
	// as it is, on a shared storage of the zone, isos.go).
	Format string
	// CloudInit says whether the image runs cloud-init on first boot.
	CloudInit bool
	// Zone is the zone to upload into; "" is the first, by name, of the
	// reachable zones the VDC may place in.
	Zone string
	// Size is the file's size when the client told it, else -1.
	Size int64
	// File is the file's bytes, read once as they arrive.
	File io.Reader
}

// VDCImage is a VDC's image of the catalog whose name, in its VDC, is
// name: NOT_FOUND (KindNotFound) for a platform image, another VDC's
// image or none.
func vdcImage(ctx context.Context, cat catalog.Store, vdc, name string) (*catalog.Image, error) {
	img, err := catalog.Get[*catalog.Image](ctx, cat, catalog.VDCImageName(vdc, name))
	if errors.Is(err, catalog.ErrNotFound) || (err == nil && img.VDC != vdc) {
		return nil, &Error{Kind: KindNotFound, Field: "name", Message: fmt.Sprintf("no image %q in VDC %s", name, vdc)}
	}
	if err != nil {
		return nil, internal("reading the catalog failed", err)
	}
	return img, nil
}

// resolveImage is the image called name for VMs of vdc: the platform's
// image of that name, else vdc's own. Another VDC's image is never found
// (its catalog name, <vdc>.<name>, is not a platform image).
func resolveImage(ctx context.Context, cat catalog.Store, vdc, name string) (*catalog.Image, error) {
	img, err := catalog.Get[*catalog.Image](ctx, cat, name)
	if err == nil && img.VDC == "" {
		return img, nil
	}
	if err != nil && !errors.Is(err, catalog.ErrNotFound) {
		return nil, err
	}
	if vdc == "" {
		return nil, &catalog.NotFoundError{Kind: catalog.KindImage, Name: name}
	}
	img, err = catalog.Get[*catalog.Image](ctx, cat, catalog.VDCImageName(vdc, name))
	if err == nil && img.VDC != vdc {
		return nil, &catalog.NotFoundError{Kind: catalog.KindImage, Name: name}
	}
	if errors.Is(err, catalog.ErrNotFound) {
		return nil, &catalog.NotFoundError{Kind: catalog.KindImage, Name: name}
	}
	return img, err
}

// ListImages returns the platform's images of cat and, when vdc is set,
// vdc's own, sorted by the name their VDC sees. It reads the catalog only
// (no zone), so an API without VMs lists images too.
func ListImages(ctx context.Context, cat catalog.Store, vdc string) ([]*catalog.Image, error) {
	all, err := catalog.List[*catalog.Image](ctx, cat)
	if err != nil {
		return nil, internal("reading the catalog failed", err)
	}
	out := slices.DeleteFunc(all, func(i *catalog.Image) bool { return i.VDC != "" && i.VDC != vdc })
	slices.SortFunc(out, func(a, b *catalog.Image) int {
		return cmp.Or(cmp.Compare(a.ShortName(), b.ShortName()), cmp.Compare(a.VDC, b.VDC))
	})
	return out, nil
}

// GetImage returns the image of cat called name for vdc (see
// ListImages): NOT_FOUND for another VDC's image.
func GetImage(ctx context.Context, cat catalog.Store, vdc, name string) (*catalog.Image, error) {
	img, err := resolveImage(ctx, cat, vdc, name)
	if errors.Is(err, catalog.ErrNotFound) {
		return nil, &Error{Kind: KindNotFound, Field: "name", Message: fmt.Sprintf("no image %q", name)}
	}
	if err != nil {
		return nil, internal("reading the catalog failed", err)
	}
	return img, nil
}

// imageUsage is the bytes vdc's images hold (each counted once).
func imageUsage(ctx context.Context, cat catalog.Store, vdc string) (int64, error) {
	all, err := catalog.List[*catalog.Image](ctx, cat)
	if err != nil {
		return 0, err
	}
	var n int64
	for _, i := range all {
		if i.VDC == vdc {
			n += i.SizeBytes
		}
	}
	return n, nil
}

// imageAllowance is how many more bytes of images vdc may hold (its
// imageGiB quota less its images), and whether a quota bounds it.
func imageAllowance(ctx context.Context, cat catalog.Store, vdc string) (int64, bool, error) {
	v, err := catalog.Get[*catalog.VDC](ctx, cat, vdc)
	if err != nil {
		return 0, false, internal("reading the VDC failed", err)
	}
	if v.Quotas.ImageGiB == nil {
		return MaxImageBytes, false, nil
	}
	used, err := imageUsage(ctx, cat, vdc)
	if err != nil {
		return 0, false, internal("reading the catalog failed", err)
	}
	return max(int64(*v.Quotas.ImageGiB)<<30-used, 0), true, nil
}

// checkNewImageName refuses a name vdc may not give a new image: not a
// valid name (BAD_INPUT on field), a platform image's or one of its own
// (CONFLICT).
func checkNewImageName(ctx context.Context, cat catalog.Store, vdc, name, field string) error {
	if err := catalog.ValidateName(catalog.KindImage, catalog.VDCImageName(vdc, name)); err != nil || name == "" || strings.Contains(name, "..") {
		return badInput(field, "%q must be lower-case letters, digits, '-' and '.', starting and ending with a letter or digit, at most %d characters with the VDC's name", name, 62-len(vdc))
	}
	if p, err := catalog.Get[*catalog.Image](ctx, cat, name); err == nil && p.VDC == "" {
		return &Error{Kind: KindConflict, Field: field, Message: fmt.Sprintf("%q is the name of a platform image", name)}
	} else if err != nil && !errors.Is(err, catalog.ErrNotFound) {
		return internal("reading the catalog failed", err)
	}
	if _, err := catalog.Get[*catalog.Image](ctx, cat, catalog.VDCImageName(vdc, name)); err == nil {
		return &Error{Kind: KindConflict, Field: field, Message: fmt.Sprintf("the VDC has an image %q already", name)}
	} else if !errors.Is(err, catalog.ErrNotFound) {
		return internal("reading the catalog failed", err)
	}
	return nil
}

// imageZone is the zone a VDC's new image is made in: zone when set (a
// reachable zone vdc may place in, else BAD_INPUT on field), else the
// first such zone by name.
func (im *Images) imageZone(ctx context.Context, vdc, zone, field string) (Zone, error) {
	d := im.s.d
	if zone != "" {
		z, ok := d.find.zoneByName(ctx, zone)
		if !ok || z.Client == nil {
			return Zone{}, badInput(field, "there is no reachable zone %q", zone)
		}
		if err := placeable(ctx, d, z.Name, vdc, badInput(field, "there is no reachable zone %q", zone)); err != nil {
			return Zone{}, err
		}
		return z, nil
	}
	zs := slices.Clone(im.s.ZoneList(ctx))
	slices.SortFunc(zs, func(a, b Zone) int { return cmp.Compare(a.Name, b.Name) })
	for _, z := range zs {
		if z.Client == nil {
			continue
		}
		if placeable(ctx, d, z.Name, vdc, badInput(field, "")) == nil {
			return z, nil
		}
	}
	return Zone{}, badInput(field, "no reachable zone takes the VDC's images")
}

// sha256Hex reports whether s is a lower-case hex SHA-256.
func sha256Hex(s string) bool {
	b, err := hex.DecodeString(s)
	return err == nil && len(b) == sha256.Size && s == strings.ToLower(s)
}

// errImageTooLarge stops an upload past its allowance.
var errImageTooLarge = errors.New("the image is larger than allowed")

// meter counts what passes through it and fails past limit.
type meter struct {
	r     io.Reader
	n     int64
	limit int64
}

func (m *meter) Read(p []byte) (int, error) {
	n, err := m.r.Read(p)
	m.n += int64(n)
	if m.n > m.limit {
		return n, errImageTooLarge
	}
	return n, err
}

// Upload makes in.File a new image of in.VDC: the file goes to an
// `import` storage of the chosen zone's staging node, the image's
// template is made from it there, the file is deleted, and the image is
// recorded. BAD_INPUT for a bad name, format or zone, or a file over
// MaxImageBytes; CONFLICT for a name taken (the VDC's or a platform
// image's); QUOTA_EXCEEDED past the VDC's imageGiB. A refused or broken
// upload leaves nothing behind.
func (im *Images) Upload(ctx context.Context, in UploadImageInput) (*catalog.Image, error) {
	d := im.s.d
	if d.cfg.Uploads == nil {
		return nil, newError(KindInternal, "uploads are not available")
	}
	if in.File == nil {
		return nil, badInput("file", "the file must be a part of a multipart request (the GraphQL multipart request spec)")
	}
	cat := d.cfg.Catalog
	if err := checkNewImageName(ctx, cat, in.VDC, in.Name, "name"); err != nil {
		return nil, err
	}
	ext := ""
	switch in.Format {
	case catalog.ImageFormatQCOW2:
		ext = "qcow2"
	case catalog.ImageFormatRaw:
		ext = "raw"
	case catalog.ImageFormatISO:
		ext = "iso"
	default:
		return nil, badInput("format", "%q is not QCOW2, RAW or ISO", in.Format)
	}
	if len(in.Description) > 1024 {
		return nil, badInput("description", "must be at most 1024 bytes")
	}
	if in.Size > MaxImageBytes {
		return nil, badInput("file", "the file is larger than %d bytes", int64(MaxImageBytes))
	}
	allow, bounded, err := imageAllowance(ctx, cat, in.VDC)
	if err != nil {
		return nil, err
	}
	if bounded && in.Size > allow {
		return nil, imageQuotaError(in.VDC, in.Size, allow)
	}
	z, err := im.imageZone(ctx, in.VDC, in.Zone, "zone")
	if err != nil {
		return nil, err
	}
	iso := in.Format == catalog.ImageFormatISO
	var (
		t         images.Target
		node, imp string
		ref       UploadRef
		file      = in.File
	)
	if iso {
		// An ISO is a file the VMs read where it is: on a storage every
		// node of the zone shares.
		node, imp, err = isoUploadTarget(ctx, z)
		if errors.Is(err, errNoISOStorage) {
			return nil, badInput("zone", "zone %s has no shared storage for ISO images", z.Name)
		}
		if err != nil {
			return nil, zoneDown(z.Name, err)
		}
		ref = UploadRef{ZoneID: z.ID, Node: node, Storage: imp, Content: "iso", Filename: isoFilename(&catalog.Image{ObjectMeta: catalog.ObjectMeta{Name: catalog.VDCImageName(in.VDC, in.Name)}})}
		file = &isoSniffer{r: in.File}
	} else {
		if t, err = stagingTarget(ctx, cat, z); err != nil {
			return nil, internal("reading the catalog failed", err)
		}
		if node, imp, err = uploadTarget(ctx, t); err != nil {
			return nil, zoneDown(z.Name, err)
		}
		var nonce [6]byte
		_, _ = rand.Read(nonce[:])
		ref = UploadRef{ZoneID: z.ID, Node: node, Storage: imp, Content: "import", Filename: "fp-upload-" + hex.EncodeToString(nonce[:]) + "." + ext}
	}
	m := &meter{r: file, limit: min(allow, MaxImageBytes)}
	ref.MaxSize = m.limit
	size := max(in.Size, 0)
	res, err := d.cfg.Uploads.UploadVolume(ctx, ref, size, m)
	switch {
	case errors.Is(err, errNotISO):
		return nil, badInput("file", "the file is not an ISO 9660 image (no CD001 signature at byte %d); nothing was kept", isoSignatureAt)
	case errors.Is(err, errImageTooLarge) && bounded && m.n > allow:
		return nil, imageQuotaError(in.VDC, m.n, allow)
	case errors.Is(err, errImageTooLarge):
		return nil, badInput("file", "the file is larger than %d bytes", int64(MaxImageBytes))
	case err != nil:
		return nil, &Error{Kind: KindBadInput, Field: "file", Message: "the upload did not complete; nothing was kept", Cause: err}
	}
	// The checksum is the agent's, of the bytes it wrote to Proxmox as
	// they passed (one hash of the file, on the node that keeps it); the
	// hops to it are authenticated and integrity-checked (the mesh, or TLS
	// to a pinned certificate), and the count must be what was sent.
	sum := res.SHA256
	drop := func() { im.dropVolume(z, node, imp, res.Volume) }
	if !sha256Hex(sum) || res.Size != m.n {
		drop()
		return nil, internal("the upload arrived changed", fmt.Errorf("sent %d bytes, agent forwarded %d bytes with SHA-256 %q", m.n, res.Size, res.SHA256))
	}
	if m.n == 0 {
		drop()
		return nil, badInput("file", "the file is empty")
	}
	// Without a task, the agent wrote the file itself: it is there.
	if res.UPID != "" {
		if err := pveapi.Wait(ctx, z.Client, res.UPID); err != nil {
			drop()
			return nil, &Error{Kind: KindBadInput, Field: "file", Message: "Proxmox did not store the file: " + err.Error(), Cause: err}
		}
	}
	now := time.Now().UTC()
	img := &catalog.Image{}
	img.Name, img.VDC, img.Description = catalog.VDCImageName(in.VDC, in.Name), in.VDC, in.Description
	img.Format, img.URL, img.Checksum = in.Format, catalog.ImageOriginUpload+sum, "sha256:"+sum
	img.Version, img.SizeBytes, img.Zone, img.CloudInit = now.Format(imageVersionLayout), m.n, z.Name, in.CloudInit && !iso
	if iso {
		return im.recordISO(ctx, z, img, node, imp, res.Volume)
	}
	tpl, err := d.stager.TemplateFromVolume(ctx, t, img, node, res.Volume)
	drop() // the template holds its own copy
	if err != nil {
		return nil, stageError(in.Name, z.Name, err)
	}
	return im.record(ctx, z, img, tpl)
}

// record writes img, whose first template tpl is ready in z, into the
// catalog; when it cannot (its name was taken meanwhile), the template
// goes.
func (im *Images) record(ctx context.Context, z Zone, img *catalog.Image, tpl images.Template) (*catalog.Image, error) {
	out, err := catalog.Create(ctx, im.s.d.cfg.Catalog, img)
	if err == nil {
		im.s.d.log.Info("VDC image made", "vdc", img.VDC, "image", img.ShortName(), "zone", z.Name, "vmid", tpl.VMID, "origin", img.URL)
		return out, nil
	}
	im.dropTemplate(z, tpl.Node, tpl.VMID)
	if errors.Is(err, catalog.ErrAlreadyExists) {
		return nil, &Error{Kind: KindConflict, Field: "name", Message: fmt.Sprintf("the VDC has an image %q already", img.ShortName()), Cause: err}
	}
	return nil, internal("recording the image failed", err)
}

// imageQuotaError is an image of size bytes over vdc's allowance.
func imageQuotaError(vdc string, size, allow int64) *Error {
	return &Error{Kind: KindQuotaExceeded, Message: fmt.Sprintf("the image (at least %d bytes) exceeds the imageGiB quota of VDC %s (%d bytes left)", size, vdc, allow)}
}

// uploadTarget is where t's zone takes an upload: its staging node and
// that node's first `import` storage among t's (else any of the node's).
func uploadTarget(ctx context.Context, t images.Target) (node, storage string, err error) {
	if node, err = onlineNode(ctx, Zone{Name: t.Zone, Client: t.Client}); err != nil {
		return "", "", err
	}
	var sts []struct {
		Storage string `json:"storage"`
		Active  int    `json:"active"`
	}
	if err := t.Client.Get(ctx, "/nodes/"+url.PathEscape(node)+"/storage?content=import&enabled=1", &sts); err != nil {
		return "", "", fmt.Errorf("compute: storages of %s: %w", node, err)
	}
	var ids []string
	for _, s := range sts {
		if s.Active == 1 {
			ids = append(ids, s.Storage)
		}
	}
	for _, want := range t.Storages {
		if slices.Contains(ids, want) {
			return node, want, nil
		}
	}
	if len(ids) == 0 {
		return "", "", fmt.Errorf("compute: node %s has no storage for imports", node)
	}
	slices.Sort(ids)
	return node, ids[0], nil
}

// dropVolume deletes vol (an upload's file) from storage of node, on a
// context of its own: it runs when the request's may have ended.
func (im *Images) dropVolume(z Zone, node, storage, vol string) {
	if vol == "" {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	path := "/nodes/" + url.PathEscape(node) + "/storage/" + url.PathEscape(storage) + "/content/" + vol
	if _, err := pveapi.Run(ctx, z.Client, "DELETE", path, nil); err != nil && !pveapi.IsNotFound(err) {
		im.s.d.log.Warn("deleting an uploaded file", "zone", z.Name, "node", node, "volume", vol, "err", err)
	}
}

// dropTemplate deletes the template guest vmid of node, on a context of
// its own.
func (im *Images) dropTemplate(z Zone, node string, vmid int) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := pveapi.Run(ctx, z.Client, "DELETE", fmt.Sprintf("/nodes/%s/qemu/%d", node, vmid), map[string]any{"purge": 1}); err != nil && !pveapi.IsNotFound(err) {
		im.s.d.log.Warn("deleting an image's template", "zone", z.Name, "vmid", vmid, "err", err)
	}
}

// imageGuests are the template guests of img in zone z (tagged
// flexplane's and the image's).
func imageGuests(ctx context.Context, z Zone, img *catalog.Image) ([]pveapi.Resource, error) {
	guests, err := pveapi.Guests(ctx, z.Client)
	if err != nil {
		return nil, err
	}
	tag := images.Tag(img)
	return slices.DeleteFunc(guests, func(g pveapi.Resource) bool { return !g.HasTag(tenancy.ManagedTag) || !g.HasTag(tag) }), nil
}

// Delete deletes vdc's image called name: its templates in every
// reachable zone, then its record. NOT_FOUND for none (another VDC's
// image, a platform image); ZONE_UNAVAILABLE when a zone that may hold a
// template of it cannot be reached (the image stays).
func (im *Images) Delete(ctx context.Context, vdc, name string) (*catalog.Image, error) {
	d := im.s.d
	img, err := vdcImage(ctx, d.cfg.Catalog, vdc, name)
	if err != nil {
		return nil, err
	}
	if img.Format == catalog.ImageFormatISO {
		return im.deleteISO(ctx, vdc, img)
	}
	for _, z := range im.s.ZoneList(ctx) {
		if z.Client == nil {
			return nil, zoneDown(z.Name, errUnreachable)
		}
		guests, err := imageGuests(ctx, z, img)
		if err != nil {
			return nil, zoneDown(z.Name, err)
		}
		for _, g := range guests {
			_, err := pveapi.Run(ctx, z.Client, "DELETE", fmt.Sprintf("/nodes/%s/qemu/%d", g.Node, g.VMID), map[string]any{"purge": 1})
			switch {
			case err == nil || pveapi.IsNotFound(err):
			case pveapi.IsLocked(err):
				return nil, newError(KindConflict, "a template of the image is busy in zone %s (Proxmox holds it locked); try again", z.Name)
			default:
				return nil, zoneDown(z.Name, err)
			}
		}
	}
	if err := catalog.Delete[*catalog.Image](ctx, d.cfg.Catalog, img.Name, ""); err != nil && !errors.Is(err, catalog.ErrNotFound) {
		return nil, internal("deleting the image's record failed", err)
	}
	d.log.Info("VDC image deleted", "vdc", vdc, "image", name)
	return img, nil
}

// ImageFromVMInput is what createImageFromVM asks for.
type ImageFromVMInput struct {
	// VDC is the caller's VDC; VM the id of its VM to copy.
	VDC, VM string
	// Name and Description are the new image's (as UploadImageInput's).
	Name, Description string
}

// imageFromVMScope is what the phases of createImageFromVM work on.
type imageFromVMScope struct {
	*deps
	im   *Images
	in   ImageFromVMInput
	opID string
	// check: the VM's zone, guest and configuration, and the image.
	z    Zone
	g    pveapi.Resource
	conf pveapi.Config
	img  *catalog.Image
	// copy: the template guest made.
	vmid int
	node string
}

// imageFromVMPhases are createImageFromVM's phases, in order: check (the
// name, the VM: created, stopped, unlocked, and the quota; before the
// operation starts), copy (a new template guest on the VM's node, tagged
// as the image's from its creation, whose disks are full copies of the
// VM's, imported from them: nothing else of the VM, no network device,
// MAC, key or cicustom, is carried over, and the VM is only read),
// template (converted), record (the image written into the catalog). A
// failure after the copy deletes it.
func imageFromVMPhases() []phase[imageFromVMScope] {
	return []phase[imageFromVMScope]{
		step("check", (*imageFromVMScope).check),
		step("copy", (*imageFromVMScope).copyDisks),
		step("record", (*imageFromVMScope).record),
	}
}

// CreateFromVM starts making a new image of in.VDC from its stopped VM
// in.VM: the operation ends once the image's template is ready in the
// VM's zone and the image is listed. The VM is not changed. NOT_FOUND
// for a VM not of the VDC; CONFLICT while the VM runs, is being created
// or is locked, or for a name taken; QUOTA_EXCEEDED when its disks would
// take the VDC past its imageGiB.
func (im *Images) CreateFromVM(ctx context.Context, in ImageFromVMInput) (*Operation, error) {
	d := im.s.d
	sc := &imageFromVMScope{deps: d, im: im, in: in}
	phases := imageFromVMPhases()
	if err := runPhases(ctx, d.eng, "", "", phases[:1], sc); err != nil {
		return nil, cause(err)
	}
	op := Operation{ID: sc.opID, Kind: OpCreateImage, State: OpRunning, Step: "copy", VMID: in.VM, Started: time.Now()}
	d.eng.record(in.VDC, sc.z.Name, op)
	d.eng.spawn(func(ctx context.Context) {
		err := runPhases(ctx, d.eng, sc.opID, "", phases[1:], sc)
		if err != nil && sc.vmid != 0 {
			im.dropTemplate(sc.z, sc.node, sc.vmid)
		}
		d.eng.finishOp(sc.opID, cause(err))
	})
	out := op
	return &out, nil
}

// check checks the name, the VM and the quota.
func (sc *imageFromVMScope) check(ctx context.Context) error {
	in := sc.in
	if len(in.Description) > 1024 {
		return badInput("description", "must be at most 1024 bytes")
	}
	if err := checkNewImageName(ctx, sc.deps.cfg.Catalog, in.VDC, in.Name, "name"); err != nil {
		return err
	}
	z, g, _, cfg, err := sc.find.lookupConfig(ctx, in.VDC, in.VM)
	if err != nil {
		if IsKind(err, KindNotFound) {
			return &Error{Kind: KindNotFound, Field: "vm", Message: "no such VM"}
		}
		return err
	}
	switch {
	case isCreating(g):
		return &Error{Kind: KindConflict, Field: "vm", Message: "the VM is still being created"}
	case g.Status != "stopped":
		return &Error{Kind: KindConflict, Field: "vm", Message: "the VM is " + g.Status + ": stop it first"}
	case g.Lock != "":
		return &Error{Kind: KindConflict, Field: "vm", Message: "the VM is busy (Proxmox holds it locked: " + g.Lock + ")"}
	}
	sc.z, sc.g, sc.conf = z, g, cfg
	var size int64
	for _, d := range ParseHardware(cfg).Disks {
		size += d.SizeBytes
	}
	allow, bounded, err := imageAllowance(ctx, sc.deps.cfg.Catalog, in.VDC)
	if err != nil {
		return err
	}
	if bounded && size > allow {
		return imageQuotaError(in.VDC, size, allow)
	}
	now := time.Now().UTC()
	img := &catalog.Image{}
	img.Name, img.VDC, img.Description = catalog.VDCImageName(in.VDC, in.Name), in.VDC, in.Description
	img.Format, img.URL, img.Version = catalog.ImageFormatQCOW2, catalog.ImageOriginVM+in.VM, now.Format(imageVersionLayout)
	img.SizeBytes, img.Zone, img.CloudInit = size, z.Name, true
	sc.img = img
	// The operation's id says what any replica needs to derive its state
	// (imageOperation).
	sc.opID = imageOpID(z.ID, img.Version, in.Name, in.VM)
	return nil
}

// copyDisks makes the image's template from copies of the VM's disks.
func (sc *imageFromVMScope) copyDisks(ctx context.Context) error {
	var disks []images.DiskSource
	for _, v := range sc.conf.Volumes() {
		if !strings.HasPrefix(v.Slot, "unused") {
			disks = append(disks, images.DiskSource{Storage: v.Storage, Volume: v.VolID})
		}
	}
	t, err := stagingTarget(ctx, sc.deps.cfg.Catalog, sc.z)
	if err != nil {
		return internal("reading the catalog failed", err)
	}
	t.Node = sc.g.Node
	tpl, err := sc.stager.TemplateFromDisks(ctx, t, sc.img, sc.g.Node, disks)
	if err != nil {
		// A guest it made is the image's (its tag says so): deleted.
		if gs, gerr := imageGuests(ctx, sc.z, sc.img); gerr == nil {
			for _, g := range gs {
				sc.im.dropTemplate(sc.z, g.Node, g.VMID)
			}
		}
		return stageError(sc.in.Name, sc.z.Name, err)
	}
	sc.vmid, sc.node = tpl.VMID, tpl.Node
	return nil
}

// record writes the image into the catalog (the template is its once the
// record exists; a record that cannot be written deletes it).
func (sc *imageFromVMScope) record(ctx context.Context) error {
	if _, err := sc.im.record(ctx, sc.z, sc.img, images.Template{Node: sc.node, VMID: sc.vmid}); err != nil {
		sc.vmid = 0 // record deleted it
		return err
	}
	return nil
}

// imageOpGrace is how long after it began a createImageFromVM another
// replica takes for running when the template guest is not in Proxmox
// yet (the copy has not created it): after it, no guest and no image
// means the operation failed and was cleaned up (NOT_FOUND, as a create
// that failed).
const imageOpGrace = time.Minute

// imageOpID is the id of a createImageFromVM: base64url of
// "i/<zoneID>/<version>/<name>/<vm id>", all any replica needs to derive
// its state (imageOperation).
func imageOpID(zoneID, version, name, vm string) string {
	return base64.RawURLEncoding.EncodeToString(fmt.Appendf(nil, "i/%s/%s/%s/%s", zoneID, version, name, vm))
}

// parseImageOpID reads an id imageOpID gave, exactly (see parseOpID).
func parseImageOpID(id string) (zoneID, version, name, vm string, ok bool) {
	raw, err := base64.RawURLEncoding.DecodeString(id)
	if err != nil || base64.RawURLEncoding.EncodeToString(raw) != id {
		return "", "", "", "", false
	}
	parts := strings.SplitN(string(raw), "/", 5)
	if len(parts) != 5 || parts[0] != "i" || slices.Contains(parts[1:], "") {
		return "", "", "", "", false
	}
	return parts[1], parts[2], parts[3], parts[4], true
}

// imageOperation derives the createImageFromVM id of vdc from Proxmox
// and the catalog, so that any replica answers for it: SUCCEEDED once
// the image's record (of the id's version) exists, which is written only
// once its template is ready; RUNNING while its template guest is in the
// VM's zone, or within imageOpGrace of its start; NOT_FOUND otherwise
// (another VDC's, or one that failed: its guest is deleted, or whose VM
// was deleted before its image was made).
func imageOperation(ctx context.Context, d *deps, vdc, id string) (*Operation, error) {
	zoneID, version, name, vm, ok := parseImageOpID(id)
	started, err := time.Parse(imageVersionLayout, version)
	if !ok || err != nil || vdc == "" {
		return nil, newError(KindNotFound, "no such operation")
	}
	op := &Operation{ID: id, Kind: OpCreateImage, VMID: vm, Started: started, Updated: time.Now()}
	img, err := catalog.Get[*catalog.Image](ctx, d.cfg.Catalog, catalog.VDCImageName(vdc, name))
	switch {
	case err == nil && img.VDC == vdc && img.Version == version && img.URL == catalog.ImageOriginVM+vm:
		op.State, op.Step = OpSucceeded, "record"
		return op, nil
	case err != nil && !errors.Is(err, catalog.ErrNotFound):
		return nil, internal("reading the catalog failed", err)
	}
	// Not done: the VM must be the caller's VDC's (the id is the client's
	// to forge), and the operation is what its zone holds.
	if _, _, _, err := d.find.lookup(ctx, vdc, vm); err != nil {
		if IsKind(err, KindNotFound) {
			return nil, newError(KindNotFound, "no such operation")
		}
		return nil, err
	}
	z, ok := d.find.zoneByID(ctx, zoneID)
	if !ok || z.Client == nil {
		return nil, zoneDown(zoneID, errUnreachable)
	}
	want := &catalog.Image{}
	want.Name, want.VDC, want.Version = catalog.VDCImageName(vdc, name), vdc, version
	guests, err := imageGuests(ctx, z, want)
	if err != nil {
		return nil, zoneDown(z.Name, err)
	}
	if len(guests) > 0 || time.Since(started) < imageOpGrace {
		op.State, op.Step = OpRunning, "copy"
		if len(guests) > 0 && guests[0].Template == 1 && guests[0].Lock == "" {
			op.Step = "record"
		}
		return op, nil
	}
	return nil, newError(KindNotFound, "no such operation")
}

// imageVersionLayout is the layout of a VDC image's version: the time it
// was made.
const imageVersionLayout = "20060102T150405.000Z"
