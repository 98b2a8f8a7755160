// Package images stages catalog images into zones and keeps a template
// guest per image per zone to clone VMs from: one on the zone's staging
// node, and one on each node a VM of local storage is placed on (a clone
// of a template on local storage stays on the template's node).
//
// Staging downloads the image with Proxmox's own download-url (checksum
// verified by Proxmox) as `import` content onto a storage of the zone, then
// creates a template guest whose disk is imported from it (qemu create with
// import-from, a cloud-init drive, converted to a template, tagged
// "flexplane" plus the image's tag). Nothing is kept of our own: the state
// of an image in a zone is derived from Proxmox at every request — the
// template guest, the downloaded volume and the download tasks.
package images

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	proxmox "github.com/luthermonson/go-proxmox"

	"github.com/flexplane/flexplane/pkg/catalog"
	"github.com/flexplane/flexplane/pkg/proxmox/pveapi"
	"github.com/flexplane/flexplane/pkg/tenancy"
)

// State is the staging state of an image in a zone.
type State string

// States of an image in a zone.
const (
	// StateAbsent: nothing of the image is in the zone.
	StateAbsent State = "ABSENT"
	// StateStaging: a download is running, or the template is being made.
	StateStaging State = "STAGING"
	// StateStaged: the template is ready to clone.
	StateStaged State = "STAGED"
	// StateFailed: the last download failed (Status.Reason says why).
	StateFailed State = "FAILED"
)

// Status is the state of an image in one zone.
type Status struct {
	State State
	// Reason is the failed task's exit status (StateFailed) or what is
	// being done (StateStaging).
	Reason string
	// Template is the template guest (StateStaged).
	Template Template
	// UPID is the running or failed download task, if any.
	UPID string
}

// Template is an image's template guest in a zone.
type Template struct {
	Node string
	VMID int
	// DiskBytes is the size of the template's disk.
	DiskBytes int64
}

// Tag is the Proxmox tag that marks the template of img: it changes with
// the image's name and checksum, so a new image version gets a new template.
// A VDC's image's tag changes with its version (its creation time) too,
// so that an image made again under a name never adopts a template its
// predecessor left in a zone that was down when it was deleted.
func Tag(img *catalog.Image) string {
	key := img.Name + "\x00" + img.Checksum
	if img.VDC != "" {
		key += "\x00" + img.Version
	}
	sum := sha256.Sum256([]byte(key))
	return TagPrefix + hex.EncodeToString(sum[:6])
}

// TagPrefix begins every image's tag (Tag).
const TagPrefix = "fp-img-"

// downloadable reports whether img is staged by a download of its URL
// (the platform's images): a VDC's image is never downloaded, its
// template is made where it is uploaded or made (and copied to other
// zones by its owner's request).
func downloadable(img *catalog.Image) bool {
	return strings.HasPrefix(img.URL, "http://") || strings.HasPrefix(img.URL, "https://")
}

// ErrNotInZone is the staging of an image that cannot be downloaded (a
// VDC's image) into a zone that has no template of it.
var ErrNotInZone = errors.New("the image has no template in the zone")

// fileName is the name of the downloaded volume of img.
func fileName(img *catalog.Image) string { return Tag(img) + ".qcow2" }

// Stager stages images. It is safe for concurrent use; concurrent requests
// for one image in one process share one staging run.
type Stager struct {
	log *slog.Logger

	mu     sync.Mutex
	flight map[string]chan struct{} // zone/tag -> closed when the run ends; protected by mu
}

// New returns a Stager; log may be nil.
func New(log *slog.Logger) *Stager {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Stager{log: log, flight: map[string]chan struct{}{}}
}

// Target is where an image is staged: a zone's client and the Proxmox
// storages its storage profiles map for the zone, in preference order. The
// download goes to the first of them that holds `import` content (else to
// any storage of the node that does), the template's disk to the first that
// holds `images`.
//
// Node, when set, is the node to stage on: its own template (the tagged
// template guest on that node) is looked for and made there, and the
// download goes to that node's import storage (unless the volume is on a
// shared storage already). Empty: the zone's staging node, the first online
// one by name, and the zone's template on whichever node it is.
type Target struct {
	Zone     string
	Client   *proxmox.Client
	Storages []string
	Node     string
}

// node is the node t stages on: t.Node, or the zone's staging node.
func (t Target) node(ctx context.Context) (string, error) {
	if t.Node != "" {
		return t.Node, nil
	}
	return stagingNode(ctx, t.Client)
}

type storageInfo struct {
	Storage string `json:"storage"`
	Content string `json:"content"`
}

func (s storageInfo) has(content string) bool {
	return slices.Contains(strings.Split(s.Content, ","), content)
}

// pickStorages chooses the import and disk storages of t.
func pickStorages(ctx context.Context, t Target) (imp, disk string, err error) {
	all, err := listStorages(ctx, t)
	if err != nil {
		return "", "", err
	}
	return pickFrom(all, t)
}

// listStorages are the storages of the zone of t.
func listStorages(ctx context.Context, t Target) ([]storageInfo, error) {
	var all []storageInfo
	if err := t.Client.Get(ctx, "/storage", &all); err != nil {
		return nil, fmt.Errorf("images: list storage: %w", err)
	}
	return all, nil
}

// pickFrom chooses the import and disk storages of t among all.
func pickFrom(all []storageInfo, t Target) (imp, disk string, err error) {
	byID := map[string]storageInfo{}
	for _, s := range all {
		byID[s.Storage] = s
	}
	for _, id := range t.Storages {
		s, ok := byID[id]
		if !ok {
			continue
		}
		if imp == "" && s.has("import") {
			imp = id
		}
		if disk == "" && s.has("images") {
			disk = id
		}
	}
	if imp == "" {
		for _, s := range all {
			if s.has("import") {
				imp = s.Storage
				break
			}
		}
	}
	if imp == "" || disk == "" {
		return "", "", fmt.Errorf("images: zone %s has no storage for imports and disks among %v", t.Zone, t.Storages)
	}
	return imp, disk, nil
}

// stagingNode is the node the zone stages images on: the first online one.
func stagingNode(ctx context.Context, c *proxmox.Client) (string, error) {
	var nodes []struct {
		Node   string `json:"node"`
		Status string `json:"status"`
	}
	if err := c.Get(ctx, "/nodes", &nodes); err != nil {
		return "", fmt.Errorf("images: list nodes: %w", err)
	}
	names := []string{}
	for _, n := range nodes {
		if n.Status == "online" {
			names = append(names, n.Node)
		}
	}
	if len(names) == 0 {
		return "", errors.New("images: no online node")
	}
	slices.Sort(names)
	return names[0], nil
}

// findTemplate returns the template guest of img in the zone (on t.Node
// when it is set): the tagged guest with the lowest VMID, if two callers
// (replicas) raced to make one.
// It is done once it is an unlocked template, else pending. Guests that
// lost the race are never returned, so nothing clones from them and their
// makers may delete them.
func findTemplate(ctx context.Context, t Target, img *catalog.Image) (done, pending *pveapi.Resource, err error) {
	guests, err := pveapi.Guests(ctx, t.Client)
	if err != nil {
		return nil, nil, err
	}
	tag := Tag(img)
	var win *pveapi.Resource
	for i := range guests {
		g := &guests[i]
		if !g.HasTag(tenancy.ManagedTag) || !g.HasTag(tag) || (t.Node != "" && g.Node != t.Node) {
			continue
		}
		if win == nil || g.VMID < win.VMID {
			win = g
		}
	}
	switch {
	case win == nil:
		return nil, nil, nil
	case win.Template == 1 && win.Lock == "":
		return win, nil, nil
	}
	return nil, win, nil
}

type taskEntry struct {
	UPID   string `json:"upid"`
	Type   string `json:"type"`
	ID     string `json:"id"`
	Status string `json:"status"`
}

// lastDownload is the newest download task of img on node, if any.
func lastDownload(ctx context.Context, c *proxmox.Client, node string, img *catalog.Image) (*taskEntry, error) {
	var tasks []taskEntry
	if err := c.Get(ctx, "/nodes/"+node+"/tasks?typefilter=download&source=all&limit=500", &tasks); err != nil {
		return nil, fmt.Errorf("images: list tasks: %w", err)
	}
	for i := range tasks { // newest first
		if tasks[i].ID == fileName(img) {
			return &tasks[i], nil
		}
	}
	return nil, nil
}

// importVolume returns the downloaded volume of img on node, if any.
func importVolume(ctx context.Context, c *proxmox.Client, node, storage string, img *catalog.Image) (string, bool, error) {
	var vols []struct {
		VolID string `json:"volid"`
	}
	if err := c.Get(ctx, "/nodes/"+node+"/storage/"+storage+"/content?content=import", &vols); err != nil {
		return "", false, fmt.Errorf("images: list volumes: %w", err)
	}
	want := storage + ":import/" + fileName(img)
	for _, v := range vols {
		if v.VolID == want {
			return want, true, nil
		}
	}
	return want, false, nil
}

// Status derives the state of img in the zone of t from Proxmox.
func (s *Stager) Status(ctx context.Context, t Target, img *catalog.Image) (Status, error) {
	done, pending, err := findTemplate(ctx, t, img)
	if err != nil {
		return Status{}, err
	}
	if done != nil {
		return Status{State: StateStaged, Template: Template{Node: done.Node, VMID: done.VMID, DiskBytes: done.MaxDisk}}, nil
	}
	if pending != nil && pending.HasTag(IncomingTag) {
		return Status{State: StateStaging, Reason: "copying the template from another zone"}, nil
	}
	if pending != nil {
		return Status{State: StateStaging, Reason: "creating the template"}, nil
	}
	if !downloadable(img) {
		return Status{State: StateAbsent}, nil
	}
	node, err := t.node(ctx)
	if err != nil {
		return Status{}, err
	}
	task, err := lastDownload(ctx, t.Client, node, img)
	if err != nil {
		return Status{}, err
	}
	imp, _, err := pickStorages(ctx, t)
	if err != nil {
		return Status{}, err
	}
	_, downloaded, err := importVolume(ctx, t.Client, node, imp, img)
	if err != nil {
		return Status{}, err
	}
	switch {
	case task != nil && task.Status == "running":
		return Status{State: StateStaging, Reason: "downloading", UPID: task.UPID}, nil
	case downloaded:
		return Status{State: StateStaging, Reason: "downloaded; the template is not made yet"}, nil
	case task != nil && task.Status != "OK":
		return Status{State: StateFailed, Reason: task.Status, UPID: task.UPID}, nil
	}
	return Status{State: StateAbsent}, nil
}

// Stage makes sure img is staged or staging in the zone of t: it starts the
// download if nothing of the image is there (or the last attempt failed)
// and returns the state at once. Call Ensure to wait for the template.
func (s *Stager) Stage(ctx context.Context, t Target, img *catalog.Image) (Status, error) {
	st, err := s.Status(ctx, t, img)
	if err != nil || st.State == StateStaged || st.State == StateStaging {
		return st, err
	}
	if !downloadable(img) {
		return Status{}, fmt.Errorf("images: stage %s in %s: %w", img.Name, t.Zone, ErrNotInZone)
	}
	node, err := t.node(ctx)
	if err != nil {
		return Status{}, err
	}
	imp, _, err := pickStorages(ctx, t)
	if err != nil {
		return Status{}, err
	}
	algo, sum, _ := strings.Cut(img.Checksum, ":")
	var upid string
	err = t.Client.Post(ctx, "/nodes/"+node+"/storage/"+imp+"/download-url", map[string]any{
		"url": img.URL, "content": "import", "filename": fileName(img),
		"checksum": sum, "checksum-algorithm": algo,
	}, &upid)
	if err != nil {
		return Status{}, fmt.Errorf("images: start download of %s in %s: %w", img.Name, t.Zone, err)
	}
	s.log.Info("staging image", "image", img.Name, "zone", t.Zone, "node", node, "upid", upid)
	return Status{State: StateStaging, Reason: "downloading", UPID: upid}, nil
}

// Ensure stages img in the zone of t if needed, waits for the download and
// makes the template; it returns the template. Concurrent calls in one
// process share the work. Across replicas (or beside Stage) Proxmox decides:
// a download that fails because another one stored the file adopts that
// file, and of two templates made at once the one with the lower VMID wins
// (the other is deleted by its maker, and never returned).
//
// Without t.Node, when the template's disk storage is not shared, the
// image is then staged on every other online node that has that storage
// too, at once (a VM of local storage is cloned on its template's node,
// and placement may put it on any of them); the staging node's template
// is returned, with the errors of the other nodes.
func (s *Stager) Ensure(ctx context.Context, t Target, img *catalog.Image) (Template, error) {
	tpl, err := s.ensureOn(ctx, t, img)
	if err != nil || t.Node != "" {
		return tpl, err
	}
	nodes, err := hostingNodes(ctx, t)
	if err != nil {
		return tpl, err
	}
	errs := make([]error, len(nodes))
	var wg sync.WaitGroup
	for i, n := range nodes {
		if n == tpl.Node {
			continue
		}
		wg.Go(func() {
			tn := t
			tn.Node = n
			if _, err := s.ensureOn(ctx, tn, img); err != nil {
				errs[i] = fmt.Errorf("images: stage %s on node %s: %w", img.Name, n, err)
			}
		})
	}
	wg.Wait()
	return tpl, errors.Join(errs...)
}

// hostingNodes are the nodes of the zone of t that may host a VM of its
// disk storage when that storage is local (none when it is shared: one
// template serves every node): those where it is available.
func hostingNodes(ctx context.Context, t Target) ([]string, error) {
	_, disk, err := pickStorages(ctx, t)
	if err != nil {
		return nil, err
	}
	rs, err := pveapi.Resources(ctx, t.Client, "storage")
	if err != nil {
		return nil, err
	}
	var nodes []string
	for _, r := range rs {
		if r.Type != "storage" || r.Storage != disk {
			continue
		}
		if r.Shared == 1 {
			return nil, nil
		}
		if r.Status == "available" {
			nodes = append(nodes, r.Node)
		}
	}
	slices.Sort(nodes)
	return nodes, nil
}

// ensureOn is Ensure on the one node of t.
func (s *Stager) ensureOn(ctx context.Context, t Target, img *catalog.Image) (Template, error) {
	key := t.Zone + "/" + t.Node + "/" + Tag(img)
	for {
		s.mu.Lock()
		ch, busy := s.flight[key]
		if !busy {
			ch = make(chan struct{})
			s.flight[key] = ch
		}
		s.mu.Unlock()
		if busy {
			select {
			case <-ch:
				continue
			case <-ctx.Done():
				return Template{}, fmt.Errorf("images: ensure %s: %w", img.Name, ctx.Err())
			}
		}
		tpl, err := s.ensure(ctx, t, img)
		for try := 0; errors.Is(err, errVanished) && try < 3; try++ {
			// The template waited for lost a race and was deleted: look again.
			tpl, err = s.ensure(ctx, t, img)
		}
		s.mu.Lock()
		delete(s.flight, key)
		close(ch)
		s.mu.Unlock()
		return tpl, err
	}
}

func (s *Stager) ensure(ctx context.Context, t Target, img *catalog.Image) (Template, error) {
	st, err := s.Stage(ctx, t, img)
	if err != nil {
		return Template{}, err
	}
	if st.State == StateStaged {
		return st.Template, nil
	}
	if st.UPID != "" {
		if err := pveapi.Wait(ctx, t.Client, st.UPID); err != nil {
			// Another caller's download may have won the race (ours then
			// fails refusing to override its file): adopt its volume.
			if ok, verr := s.downloaded(ctx, t, img); verr != nil || !ok {
				return Template{}, fmt.Errorf("images: download %s into %s: %w", img.Name, t.Zone, err)
			}
			s.log.Info("adopting the image another download staged", "image", img.Name, "zone", t.Zone, "upid", st.UPID)
		}
	}
	// The download is done (here or by another replica): make the template
	// unless one appeared meanwhile.
	done, pending, err := findTemplate(ctx, t, img)
	if err != nil {
		return Template{}, err
	}
	if done != nil {
		return Template{Node: done.Node, VMID: done.VMID, DiskBytes: done.MaxDisk}, nil
	}
	if pending != nil && pending.HasTag(IncomingTag) {
		// A copy from another zone: only its end makes it a template.
		return Template{}, fmt.Errorf("images: %s is being copied into %s: %w", img.Name, t.Zone, ErrNotInZone)
	}
	if pending != nil {
		return s.finishTemplate(ctx, t, img, pending.Node, pending.VMID)
	}
	tpl, err := s.makeTemplate(ctx, t, img)
	if err != nil {
		return Template{}, err
	}
	return s.settle(ctx, t, img, tpl)
}

// downloaded reports whether the downloaded volume of img is in the zone.
func (s *Stager) downloaded(ctx context.Context, t Target, img *catalog.Image) (bool, error) {
	node, err := t.node(ctx)
	if err != nil {
		return false, err
	}
	imp, _, err := pickStorages(ctx, t)
	if err != nil {
		return false, err
	}
	_, ok, err := importVolume(ctx, t.Client, node, imp, img)
	return ok, err
}

// settle checks that mine is the template of img in the zone: if another
// caller (replica) made one with a lower VMID meanwhile, mine lost the race,
// is deleted, and the winner is returned once it is done.
func (s *Stager) settle(ctx context.Context, t Target, img *catalog.Image, mine Template) (Template, error) {
	done, pending, err := findTemplate(ctx, t, img)
	if err != nil {
		return Template{}, err
	}
	win := done
	if win == nil {
		win = pending
	}
	if win == nil || win.VMID == mine.VMID {
		return mine, nil
	}
	s.log.Info("deleting a template that lost a race", "image", img.Name, "zone", t.Zone, "vmid", mine.VMID, "winner", win.VMID)
	if _, err := pveapi.Run(ctx, t.Client, "DELETE", fmt.Sprintf("/nodes/%s/qemu/%d", mine.Node, mine.VMID), map[string]any{"purge": 1}); err != nil && !pveapi.IsNotFound(err) {
		s.log.Warn("deleting a template that lost a race", "image", img.Name, "zone", t.Zone, "vmid", mine.VMID, "err", err)
	}
	if done != nil {
		return Template{Node: done.Node, VMID: done.VMID, DiskBytes: done.MaxDisk}, nil
	}
	return s.finishTemplate(ctx, t, img, pending.Node, pending.VMID)
}

// makeTemplate creates the template guest from the downloaded volume.
func (s *Stager) makeTemplate(ctx context.Context, t Target, img *catalog.Image) (Template, error) {
	node, err := t.node(ctx)
	if err != nil {
		return Template{}, err
	}
	imp, disk, err := pickStorages(ctx, t)
	if err != nil {
		return Template{}, err
	}
	vol, ok, err := importVolume(ctx, t.Client, node, imp, img)
	if err != nil {
		return Template{}, err
	}
	if !ok {
		return Template{}, fmt.Errorf("images: %s: downloaded volume %s is missing", img.Name, vol)
	}
	return s.templateFrom(ctx, t, img, node, []DiskSource{{Storage: disk, Volume: vol}})
}

// DiskSource is a disk of a template to make: the storage it goes to and
// the volume it is copied from (import-from).
type DiskSource struct{ Storage, Volume string }

// TemplateFromDisks makes the template of img on node of the zone of t
// from disks, volumes of that node (a stopped guest's, the boot disk
// first), each copied onto its storage: the sources are read, not
// changed. It returns the template once it is one.
//
// The copies go to a storage of t.Storages every node of the zone shares
// when there is one (a template there serves a VM placed on any node),
// else each stays on its source's storage.
func (s *Stager) TemplateFromDisks(ctx context.Context, t Target, img *catalog.Image, node string, disks []DiskSource) (Template, error) {
	if len(disks) == 0 {
		return Template{}, errors.New("images: a template needs a disk")
	}
	if len(t.Storages) > 0 {
		all, err := listStorages(ctx, t)
		if err != nil {
			return Template{}, err
		}
		shared, err := sharedDisk(ctx, t, all)
		if err != nil {
			return Template{}, err
		}
		if shared != "" {
			disks = slices.Clone(disks)
			for i := range disks {
				disks[i].Storage = shared
			}
		}
	}
	return s.templateFrom(ctx, t, img, node, disks)
}

// TemplateFromVolume makes the template of img on node of the zone of t
// from vol, an `import` volume of that node (an uploaded file), and
// returns it once it is one. The volume is left as it is.
func (s *Stager) TemplateFromVolume(ctx context.Context, t Target, img *catalog.Image, node, vol string) (Template, error) {
	t.Node = node
	_, disk, err := templateStorages(ctx, t)
	if err != nil {
		return Template{}, err
	}
	return s.templateFrom(ctx, t, img, node, []DiskSource{{Storage: disk, Volume: vol}})
}

// templateStorages chooses the import storage of t and the storage of a
// template's disks: a storage of t.Storages every node shares when there
// is one, else the first that holds disks.
func templateStorages(ctx context.Context, t Target) (imp, disk string, err error) {
	all, err := listStorages(ctx, t)
	if err != nil {
		return "", "", err
	}
	if imp, disk, err = pickFrom(all, t); err != nil {
		return "", "", err
	}
	shared, err := sharedDisk(ctx, t, all)
	if err != nil {
		return "", "", err
	}
	if shared != "" {
		disk = shared
	}
	return imp, disk, nil
}

// sharedDisk is the first of t's storages (all, as listed) that holds disks and that every
// node of the zone shares, "" when none does. A template there serves a
// VM cloned onto any node; on a node's local storage Proxmox refuses to
// clone it to another node.
func sharedDisk(ctx context.Context, t Target, all []storageInfo) (string, error) {
	rs, err := pveapi.Resources(ctx, t.Client, "storage")
	if err != nil {
		return "", fmt.Errorf("images: storages of zone %s: %w", t.Zone, err)
	}
	for _, id := range t.Storages {
		disks := slices.ContainsFunc(all, func(s storageInfo) bool { return s.Storage == id && s.has("images") })
		shared := slices.ContainsFunc(rs, func(r pveapi.Resource) bool { return r.Type == "storage" && r.Storage == id && r.Shared == 1 })
		if disks && shared {
			return id, nil
		}
	}
	return "", nil
}

// templateFrom creates the template guest of img on node, its disks
// (scsi0, scsi1, ...) imported from disks, and converts it.
func (s *Stager) templateFrom(ctx context.Context, t Target, img *catalog.Image, node string, disks []DiskSource) (Template, error) {
	for attempt := 0; ; attempt++ {
		vmid, err := pveapi.NextID(ctx, t.Client)
		if err != nil {
			return Template{}, err
		}
		params := templateParams(img, vmid, disks[0].Storage)
		for i, d := range disks {
			params[fmt.Sprintf("scsi%d", i)] = d.Storage + ":0,import-from=" + d.Volume
		}
		_, err = pveapi.Run(ctx, t.Client, "POST", "/nodes/"+node+"/qemu", params)
		if pveapi.IsAlreadyExists(err) && attempt < 10 {
			continue // the VMID was only a guess: someone took it
		}
		if err != nil {
			return Template{}, fmt.Errorf("images: create template of %s: %w", img.Name, err)
		}
		return s.finishTemplate(ctx, t, img, node, vmid)
	}
}

// templateParams are the settings of the template guest vmid of img (its
// cloud-init drive on storage), tagged as the image's and with extra.
func templateParams(img *catalog.Image, vmid int, storage string, extra ...string) map[string]any {
	return map[string]any{
		"vmid": vmid, "name": "fp-template-" + img.Name,
		"tags":        tenancy.JoinTags(append([]string{tenancy.ManagedTag, Tag(img)}, extra...)),
		"description": fmt.Sprintf("flexplane template of image %s %s (%s)", img.Name, img.Version, img.Checksum),
		"scsihw":      "virtio-scsi-pci",
		"ide2":        storage + ":cloudinit",
		"boot":        "order=scsi0",
		"serial0":     "socket",
		"vga":         "serial0",
		"agent":       "1",
		"ostype":      "l26",
		"memory":      512,
		"cores":       1,
	}
}

// finishTemplate converts a created template guest into a template.
func (s *Stager) finishTemplate(ctx context.Context, t Target, img *catalog.Image, node string, vmid int) (Template, error) {
	for {
		g, ok, err := pveapi.FindGuest(ctx, t.Client, vmid)
		if err != nil {
			return Template{}, err
		}
		if !ok {
			return Template{}, fmt.Errorf("images: template %d of %s: %w", vmid, img.Name, errVanished)
		}
		if g.Template == 1 && g.Lock == "" {
			s.log.Info("image staged", "image", img.Name, "zone", t.Zone, "vmid", vmid)
			return Template{Node: node, VMID: vmid, DiskBytes: g.MaxDisk}, nil
		}
		if g.Lock == "" && g.Template == 0 {
			_, err := pveapi.Run(ctx, t.Client, "POST", fmt.Sprintf("/nodes/%s/qemu/%d/template", node, vmid), nil)
			if err != nil && !pveapi.IsLocked(err) {
				// Another caller may have converted it meanwhile ("can't
				// convert a template to a template"): success if it is one now.
				if now, ok, gerr := pveapi.FindGuest(ctx, t.Client, vmid); gerr != nil || !ok || now.Template != 1 {
					return Template{}, fmt.Errorf("images: convert %d to a template: %w", vmid, err)
				}
			}
			continue
		}
		if err := waitUnlocked(ctx); err != nil {
			return Template{}, err
		}
	}
}

// errVanished is a template guest deleted while it was waited for.
var errVanished = errors.New("template guest vanished")

func waitUnlocked(ctx context.Context) error {
	t := time.NewTimer(pveapi.PollInterval)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return fmt.Errorf("images: wait for template: %w", ctx.Err())
	case <-t.C:
		return nil
	}
}

// Marks of a template's copy from one zone into another (a VDC's image
// staged where its owner asks): the agents copy disks agent to agent, and
// read a template's disks only while it is marked OutgoingTag, and write
// only into a stopped guest marked IncomingTag (pkg/agent's volumes.go
// reads both marks in Proxmox itself). A guest marked IncomingTag is an
// unfinished copy: it is never made a template but by the copy's end.
const (
	OutgoingTag = "fp-image-out"
	IncomingTag = "fp-incoming"
)

// Disk is a disk of a template guest: its config key, volume id and size.
type Disk struct {
	Key, Volume string
	Size        int64
}

// Disks returns the disks of the template guest tpl of the zone of c, in
// key order (scsi0, scsi1, ...).
func Disks(ctx context.Context, c *proxmox.Client, tpl Template) ([]Disk, error) {
	cfg, err := pveapi.GuestConfig(ctx, c, tpl.Node, tpl.VMID)
	if err != nil {
		return nil, fmt.Errorf("images: config of template %d: %w", tpl.VMID, err)
	}
	var out []Disk
	for _, v := range cfg.Volumes() {
		if !strings.HasPrefix(v.Slot, "scsi") || v.VolID == "" {
			continue
		}
		out = append(out, Disk{Key: v.Slot, Volume: v.VolID, Size: v.SizeBytes})
	}
	slices.SortFunc(out, func(a, b Disk) int { return strings.Compare(a.Key, b.Key) })
	if len(out) == 0 {
		return nil, fmt.Errorf("images: template %d has no disk", tpl.VMID)
	}
	return out, nil
}

// SetMark adds (on) or removes the tag mark on guest vmid of node,
// conditional on the config's digest.
func SetMark(ctx context.Context, c *proxmox.Client, node string, vmid int, mark string, on bool) error {
	cfg, err := pveapi.GuestConfig(ctx, c, node, vmid)
	if err != nil {
		return fmt.Errorf("images: config of guest %d: %w", vmid, err)
	}
	tags := tenancy.SplitTags(cfg.Str("tags"))
	if slices.Contains(tags, mark) == on {
		return nil
	}
	if on {
		tags = append(tags, mark)
	} else {
		tags = slices.DeleteFunc(tags, func(t string) bool { return t == mark })
	}
	if _, err := pveapi.Run(ctx, c, "POST", fmt.Sprintf("/nodes/%s/qemu/%d/config", node, vmid),
		map[string]any{"tags": tenancy.JoinTags(tags), "digest": cfg.Digest()}); err != nil {
		return fmt.Errorf("images: mark guest %d %s: %w", vmid, mark, err)
	}
	return nil
}

// BeginCopy begins the template of img in the zone of t as a copy of
// disks (another zone's template's): a stopped guest on t's node (the
// zone's staging node by default) tagged as the image's and IncomingTag,
// with empty disks at least the sources' sizes (whole GiB) on t's disk
// storage. It returns the guest and its disks, in the sources' order.
// While it exists the image's state in the zone is STAGING. Its
// description holds the copier's first beat (see CopyBeat).
func (s *Stager) BeginCopy(ctx context.Context, t Target, img *catalog.Image, disks []Disk) (Template, []Disk, error) {
	node, err := t.node(ctx)
	if err != nil {
		return Template{}, nil, err
	}
	_, storage, err := templateStorages(ctx, t)
	if err != nil {
		return Template{}, nil, err
	}
	for attempt := 0; ; attempt++ {
		vmid, err := pveapi.NextID(ctx, t.Client)
		if err != nil {
			return Template{}, nil, err
		}
		params := templateParams(img, vmid, storage, IncomingTag)
		params["description"] = withBeat(params["description"].(string), time.Now())
		for i, d := range disks {
			params[fmt.Sprintf("scsi%d", i)] = fmt.Sprintf("%s:%d", storage, max((d.Size+1<<30-1)>>30, 1))
		}
		_, err = pveapi.Run(ctx, t.Client, "POST", "/nodes/"+node+"/qemu", params)
		if pveapi.IsAlreadyExists(err) && attempt < 10 {
			continue // the VMID was only a guess: someone took it
		}
		if err != nil {
			return Template{}, nil, fmt.Errorf("images: create the copy of %s in %s: %w", img.Name, t.Zone, err)
		}
		tpl := Template{Node: node, VMID: vmid}
		got, err := Disks(ctx, t.Client, tpl)
		if err != nil || len(got) != len(disks) {
			return tpl, nil, fmt.Errorf("images: the copy of %s in %s has disks %v, want %d: %w", img.Name, t.Zone, got, len(disks), err)
		}
		s.log.Info("copying an image's template", "image", img.Name, "zone", t.Zone, "vmid", vmid)
		return tpl, got, nil
	}
}

// EndCopy makes the copy guest tpl, whose disks are filled, the template
// of img in the zone of t: unmarked IncomingTag and converted.
func (s *Stager) EndCopy(ctx context.Context, t Target, img *catalog.Image, tpl Template) (Template, error) {
	if err := SetMark(ctx, t.Client, tpl.Node, tpl.VMID, IncomingTag, false); err != nil {
		return Template{}, err
	}
	return s.finishTemplate(ctx, t, img, tpl.Node, tpl.VMID)
}

// Winner is the template guest of img in the zone of t that VMs are
// cloned from (see findTemplate), done or not; false for none.
func Winner(ctx context.Context, t Target, img *catalog.Image) (Template, bool, error) {
	done, pending, err := findTemplate(ctx, t, img)
	if err != nil {
		return Template{}, false, err
	}
	w := cmp.Or(done, pending)
	if w == nil {
		return Template{}, false, nil
	}
	return Template{Node: w.Node, VMID: w.VMID, DiskBytes: w.MaxDisk}, true, nil
}
