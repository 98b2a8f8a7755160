package compute

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/flexplane/flexplane/pkg/catalog"
	"github.com/flexplane/flexplane/pkg/compute/images"
	"github.com/flexplane/flexplane/pkg/proxmox/pveapi"
	"github.com/flexplane/flexplane/pkg/tenancy"
)

// A VDC's image staged into another zone (stageVDCImage). A VDC's image
// has no address to download it from: its template is copied from a zone
// that holds it, agent to agent over the mesh, as a move across zones
// copies a VM's disks (VolumeMover). The source template is marked
// images.OutgoingTag for the copy, and the source agent offers only the
// disks of a template so marked; the target is a stopped guest marked
// images.IncomingTag, into which alone the target agent writes, and which
// becomes the image's template there once its disks arrived. The state in
// every zone is read from Proxmox as a platform image's: the copy is
// STAGING while its guest exists, STAGED once it is a template.

// vdcStageScope is what the phases of a VDC image's staging work on.
type vdcStageScope struct {
	*deps
	im  *Images
	img *catalog.Image
	// begin: the source zone and template, the target zone.
	src     Zone
	srcTpl  images.Template
	disks   []images.Disk
	dst     Zone
	dstT    images.Target
	copyTpl images.Template // the target guest made
	copies  []images.Disk   // its disks, in the order of disks
}

// vdcStagePhases are the phases of stageVDCImage, in order: begin (the
// source template marked outgoing and the target guest made, before the
// request returns), copy (in the background: every disk copied agent to
// agent) and finish (the target made a template, the source unmarked).
// A failure deletes the target guest and unmarks the source.
func vdcStagePhases() []phase[vdcStageScope] {
	return []phase[vdcStageScope]{
		step("begin", (*vdcStageScope).begin),
		step("copy", (*vdcStageScope).copyDisks),
		step("finish", (*vdcStageScope).finish),
	}
}

// StageVDC starts copying vdc's image called name into the zone called
// zone, and returns its state there: nothing to do when it is staged or
// being staged there (idempotent). NOT_FOUND for none (another VDC's
// image, a platform image); BAD_INPUT on "zone" for a zone that is not
// one the VDC may use or not reachable; CONFLICT when no reachable zone
// holds a template of it to copy.
func (im *Images) StageVDC(ctx context.Context, vdc, name, zone string) (ImageState, error) {
	d := im.s.d
	img, err := vdcImage(ctx, d.cfg.Catalog, vdc, name)
	if err != nil {
		return ImageState{}, err
	}
	if zone == "" {
		return ImageState{}, badInput("zone", "name the zone to stage the image into")
	}
	dst, err := im.imageZone(ctx, vdc, zone, "zone")
	if err != nil {
		return ImageState{}, err
	}
	t, err := stagingTarget(ctx, d.cfg.Catalog, dst)
	if err != nil {
		return ImageState{}, internal("reading the catalog failed", err)
	}
	st, err := d.stager.Status(ctx, t, img)
	if err != nil {
		return ImageState{}, zoneDown(dst.Name, err)
	}
	if st.State == images.StateStaging {
		// A copy whose copier stopped beating was cut off (a crash):
		// remove it and copy afresh, so that STAGING never sticks.
		stale, ok, err := images.StaleCopy(ctx, t, img, d.cfg.StaleAfter, time.Now())
		if err != nil {
			return ImageState{}, zoneDown(dst.Name, err)
		}
		if ok {
			d.log.Warn("removing a copy of a VDC image that was cut off", "vdc", vdc, "image", name, "zone", dst.Name, "vmid", stale.VMID)
			im.dropTemplate(dst, stale.Node, stale.VMID)
			if st, err = d.stager.Status(ctx, t, img); err != nil {
				return ImageState{}, zoneDown(dst.Name, err)
			}
		}
	}
	if st.State == images.StateStaged || st.State == images.StateStaging {
		return ImageState{Zone: dst.Name, Status: st}, nil
	}
	if d.cfg.Volumes == nil {
		return ImageState{}, newError(KindInternal, "copies between zones are not available")
	}
	sc := &vdcStageScope{deps: d, im: im, img: img, dst: dst, dstT: t}
	if err := sc.source(ctx); err != nil {
		return ImageState{}, err
	}
	if err := catalog.RecordVDCZone(ctx, d.cfg.Catalog, vdc, dst.ID); err != nil {
		return ImageState{}, internal("recording the zone in the VDC's zone set failed", err)
	}
	phases := vdcStagePhases()
	if err := runPhases(ctx, d.eng, "", "", phases[:1], sc); err != nil {
		sc.undo()
		return ImageState{}, cause(err)
	}
	d.eng.spawn(func(ctx context.Context) {
		if err := runPhases(ctx, d.eng, "", "", phases[1:], sc); err != nil {
			sc.undo()
			d.log.Warn("staging a VDC image failed", "vdc", vdc, "image", name, "zone", dst.Name, "from", sc.src.Name, "err", cause(err))
		}
	})
	return ImageState{Zone: dst.Name, Status: images.Status{State: images.StateStaging, Reason: "copying the template from zone " + sc.src.Name}}, nil
}

// source finds the zone to copy from: a reachable zone where the image's
// template is ready (the zone it was made in first).
func (sc *vdcStageScope) source(ctx context.Context) error {
	zs := sc.im.s.ZoneList(ctx)
	for _, first := range []bool{true, false} {
		for _, z := range zs {
			if z.Client == nil || z.ID == sc.dst.ID || (z.Name == sc.img.Zone) != first {
				continue
			}
			t, err := stagingTarget(ctx, sc.cfg.Catalog, z)
			if err != nil {
				return internal("reading the catalog failed", err)
			}
			st, err := sc.stager.Status(ctx, t, sc.img)
			if err != nil || st.State != images.StateStaged {
				continue
			}
			disks, err := images.Disks(ctx, z.Client, st.Template)
			if err != nil {
				continue
			}
			sc.src, sc.srcTpl, sc.disks = z, st.Template, disks
			return nil
		}
	}
	return newError(KindConflict, "no reachable zone holds a template of image %q to copy", sc.img.ShortName())
}

// begin marks the source template outgoing and makes the target guest.
func (sc *vdcStageScope) begin(ctx context.Context) error {
	if err := images.SetMark(ctx, sc.src.Client, sc.srcTpl.Node, sc.srcTpl.VMID, images.OutgoingTag, true); err != nil {
		return zoneDown(sc.src.Name, err)
	}
	tpl, copies, err := sc.stager.BeginCopy(ctx, sc.dstT, sc.img, sc.disks)
	sc.copyTpl = tpl
	if err != nil {
		return zoneDown(sc.dst.Name, err)
	}
	sc.copies = copies
	// Two requests (two replicas) may have begun a copy at once: the one
	// with the lower VMID goes on, the other's guest is deleted.
	if w, ok, err := images.Winner(ctx, sc.dstT, sc.img); err == nil && ok && w.VMID != tpl.VMID {
		sc.im.dropTemplate(sc.dst, tpl.Node, tpl.VMID)
		sc.copyTpl = images.Template{}
		return errDone
	}
	return nil
}

// copyDisks copies every disk of the source template into the target
// guest's, agent to agent.
func (sc *vdcStageScope) copyDisks(ctx context.Context) error {
	if sc.copyTpl.VMID == 0 {
		return errDone // another request's copy goes on
	}
	defer sc.heartbeat(ctx)()
	for i, dk := range sc.disks {
		from := VolumeRef{ZoneID: sc.src.ID, Node: sc.srcTpl.Node, Volume: dk.Volume}
		to := VolumeRef{ZoneID: sc.dst.ID, Node: sc.copyTpl.Node, Volume: sc.copies[i].Volume}
		if _, err := sc.cfg.Volumes.MoveVolume(ctx, from, to, nil); err != nil {
			return fmt.Errorf("compute: copy disk %s of image %s: %w", dk.Key, sc.img.ShortName(), err)
		}
	}
	return nil
}

// heartbeat records on the target guest, every StaleAfter/4 until the
// returned stop is called, that its copy is alive (images.CopyBeat): a
// copy longer than StaleAfter is not taken for one cut off by another
// request's StageVDC. stop waits for a write in flight.
func (sc *vdcStageScope) heartbeat(ctx context.Context) (stop func()) {
	return keepBeating(ctx, sc.cfg.StaleAfter/4, func(ctx context.Context) error { return images.CopyBeat(ctx, sc.dst.Client, sc.copyTpl, time.Now()) },
		func(err error) {
			sc.log.Warn("recording an image copy's heartbeat", "zone", sc.dst.Name, "vmid", sc.copyTpl.VMID, "err", err)
		})
}

// finish makes the target guest the template and unmarks the source.
func (sc *vdcStageScope) finish(ctx context.Context) error {
	if _, err := sc.stager.EndCopy(ctx, sc.dstT, sc.img, sc.copyTpl); err != nil {
		return err
	}
	sc.unmarkSource()
	sc.log.Info("VDC image staged", "vdc", sc.img.VDC, "image", sc.img.ShortName(), "zone", sc.dst.Name, "from", sc.src.Name, "vmid", sc.copyTpl.VMID)
	return nil
}

// undo deletes the target guest (if one was made) and unmarks the
// source, on a context of its own.
func (sc *vdcStageScope) undo() {
	if sc.copyTpl.VMID != 0 {
		sc.im.dropTemplate(sc.dst, sc.copyTpl.Node, sc.copyTpl.VMID)
	}
	sc.unmarkSource()
}

// unmarkSource takes the outgoing mark off the source template, on a
// context of its own. Another copy of the same template that is still
// reading keeps its stream (the agent checks the mark when a read
// begins); one that has not begun fails and can be asked again.
func (sc *vdcStageScope) unmarkSource() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := images.SetMark(ctx, sc.src.Client, sc.srcTpl.Node, sc.srcTpl.VMID, images.OutgoingTag, false); err != nil {
		sc.log.Warn("unmarking an image's template", "zone", sc.src.Name, "vmid", sc.srcTpl.VMID, "err", err)
	}
}

// recoverCopies is Run's periodic pass (every ImageCopyRecoverInterval,
// while Recovers says so) over the reachable zones, in name order, and
// their guests, in VMID order, for
// copies of VDC images cut off by the end of the process that ran them:
// copy guests (images.IncomingTag, no VM's intent) whose copier has not
// beaten within StaleAfter. It resumes the staging the VDC asked for: the
// leftover guest is deleted and the image staged into the zone afresh
// (StageVDC, from a zone holding its template), so that the zone's state
// goes on from STAGING to STAGED without another request. A leftover of
// an image deleted meanwhile is only deleted; an image that cannot be
// copied again (no reachable zone holds its template, or the VDC may no
// longer use the zone) ends ABSENT there, as a copy that fails. A copy
// still beating is left to its copier.
//
// listings are the zones' guests by zone ID as a recovery pass of the
// same tick read them; a zone without one (its listing failed) is left to
// the next pass.
func (im *Images) recoverCopies(ctx context.Context, listings map[string][]pveapi.Resource) error {
	all, err := catalog.List[*catalog.Image](ctx, im.s.d.cfg.Catalog)
	if err != nil {
		return fmt.Errorf("compute: recover image copies: %w", err)
	}
	byTag := map[string]*catalog.Image{}
	for _, img := range all {
		if img.VDC != "" {
			byTag[images.Tag(img)] = img
		}
	}
	zs := slices.Clone(im.s.ZoneList(ctx))
	slices.SortFunc(zs, func(a, b Zone) int { return strings.Compare(a.Name, b.Name) })
	var errs []error
	for _, z := range zs {
		guests, ok := listings[z.ID]
		if z.Client == nil || !ok {
			continue
		}
		if err := im.recoverCopiesIn(ctx, z, guests, byTag); err != nil {
			errs = append(errs, fmt.Errorf("compute: recover image copies in zone %s: %w", z.Name, err))
		}
	}
	return errors.Join(errs...)
}

// recoverCopiesIn is recoverCopies in zone z, whose guests are listed;
// byTag are the VDCs' images by their template's tag.
func (im *Images) recoverCopiesIn(ctx context.Context, z Zone, listed []pveapi.Resource, byTag map[string]*catalog.Image) error {
	d := im.s.d
	guests := slices.Clone(listed)
	slices.SortFunc(guests, func(a, b pveapi.Resource) int { return cmp.Compare(a.VMID, b.VMID) })
	now := time.Now()
	for _, g := range guests {
		tag := imageTagOf(g)
		if g.Template == 1 || tag == "" || !g.HasTag(tenancy.ManagedTag) || !g.HasTag(images.IncomingTag) {
			continue
		}
		cfg, err := pveapi.GuestConfig(ctx, z.Client, g.Node, g.VMID)
		if err != nil {
			continue // gone meanwhile
		}
		desc := cfg.Str("description")
		if _, ok := ParseIntent(desc); ok || !images.CopyCutOff(desc, d.cfg.StaleAfter, now) {
			continue // a VM's move target (Recover's), or a copy still beating
		}
		img := byTag[tag]
		if img == nil {
			d.log.Warn("removing a copy of a deleted VDC image that was cut off", "zone", z.Name, "vmid", g.VMID)
			im.dropTemplate(z, g.Node, g.VMID)
			continue
		}
		d.log.Warn("removing a copy of a VDC image that was cut off, to copy it again", "vdc", img.VDC, "image", img.ShortName(), "zone", z.Name, "vmid", g.VMID)
		im.dropTemplate(z, g.Node, g.VMID)
		if _, err := im.StageVDC(ctx, img.VDC, img.ShortName(), z.Name); err != nil {
			d.log.Warn("staging a VDC image again after its copy was cut off", "vdc", img.VDC, "image", img.ShortName(), "zone", z.Name, "err", err)
		}
	}
	return nil
}

// imageTagOf is the image tag (images.Tag) guest g carries; "" for none.
func imageTagOf(g pveapi.Resource) string {
	for _, t := range g.Tags() {
		if strings.HasPrefix(t, images.TagPrefix) {
			return t
		}
	}
	return ""
}
