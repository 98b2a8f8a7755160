package compute

import (
	"context"
	"fmt"

	"github.com/flexplane/flexplane/pkg/catalog"
	"github.com/flexplane/flexplane/pkg/compute/images"
)

// Images staged into the zones: where each zone takes them is what the
// storage profiles map for it.

// stagingTarget is where an image is staged in zone z: the storages the
// storage profiles map for the zone.
func stagingTarget(ctx context.Context, cat catalog.Store, z Zone) (images.Target, error) {
	sps, err := catalog.List[*catalog.StorageProfile](ctx, cat)
	if err != nil {
		return images.Target{}, fmt.Errorf("compute: staging target: %w", err)
	}
	t := images.Target{Zone: z.Name, Client: z.Client}
	for _, sp := range sps {
		if p, ok := sp.PoolFor(z.Name); ok {
			t.Storages = append(t.Storages, p)
		}
	}
	return t, nil
}

// ImageState is an image's staging state in one zone; Err is the zone
// failing to tell (a *Error of KindZoneUnavailable).
type ImageState struct {
	Zone   string
	Status images.Status
	Err    error
}

// Images returns the service's part about images: the staging of the
// catalog's images into zones, and the images a VDC owns (vdcimages.go).
func (s *Service) Images() *Images { return &Images{s: s} }

// Images stages images and keeps the VDCs' own (Service.Images).
type Images struct{ s *Service }

// Stager returns the stager the service uses.
func (im *Images) Stager() *images.Stager { return im.s.d.stager }

// States reads img's staging state in every reachable zone, or in the
// one called zone when it is set. A VDC's image is not told of in a zone
// dedicated to other VDCs (which does not exist for its VDC) unless it is
// there (its template, made before the zone was dedicated away, stays the
// VDC's).
func (im *Images) States(ctx context.Context, img *catalog.Image, zone *string) ([]ImageState, error) {
	s := im.s
	var out []ImageState
	for _, z := range s.ZoneList(ctx) {
		if zone != nil && *zone != z.Name {
			continue
		}
		open := true
		if img.VDC != "" {
			var err error
			if open, err = catalog.ZoneAllows(ctx, s.d.cfg.Catalog, z.Name, img.VDC); err != nil {
				return nil, internal("reading the zone's policy failed", err)
			}
		}
		t, err := stagingTarget(ctx, s.d.cfg.Catalog, z)
		if err != nil {
			return nil, err
		}
		st, err := s.d.stager.Status(ctx, t, img)
		if !open && (err != nil || st.State == images.StateAbsent) {
			continue
		}
		if err != nil {
			out = append(out, ImageState{Zone: z.Name, Err: zoneDown(z.Name, err)})
			continue
		}
		out = append(out, ImageState{Zone: z.Name, Status: st})
	}
	return out, nil
}

// StageIn starts staging img into the reachable zone called zone (or
// with that ID; Service.StageImage) and returns its state there: a *Error
// of KindBadInput on "zone" when there is none, of KindZoneUnavailable
// when the zone fails.
func (im *Images) StageIn(ctx context.Context, img *catalog.Image, zone string) (ImageState, error) {
	s := im.s
	z, ok := s.Zone(ctx, zone)
	if !ok {
		return ImageState{}, badInput("zone", "there is no reachable zone %q", zone)
	}
	t, err := stagingTarget(ctx, s.d.cfg.Catalog, z)
	if err != nil {
		return ImageState{}, err
	}
	st, err := s.StageImage(ctx, t, img)
	if err != nil {
		return ImageState{}, zoneDown(z.Name, err)
	}
	return ImageState{Zone: z.Name, Status: st}, nil
}

// StageImage starts staging img into the zone of t (see images.Stager.Stage)
// and lets the service finish it in the background: waiting for the
// download and making the template. It returns the state at once.
func (s *Service) StageImage(ctx context.Context, t images.Target, img *catalog.Image) (images.Status, error) {
	d := s.d
	sc := &stageScope{deps: d, t: t, img: img}
	phases := stagePhases()
	if err := runPhases(ctx, d.eng, "", "", phases[:1], sc); err != nil || sc.st.State == images.StateStaged {
		return sc.st, cause(err)
	}
	d.eng.spawn(func(ctx context.Context) {
		if err := runPhases(ctx, d.eng, "", "", from(phases, "template"), sc); err != nil && ctx.Err() == nil {
			d.log.Warn("staging failed", "image", img.Name, "zone", t.Zone, "err", cause(err))
		}
	})
	return sc.st, nil
}

// stageScope is what the phases of an image's staging work on.
type stageScope struct {
	*deps
	t   images.Target
	img *catalog.Image
	st  images.Status // the state the request found or began
}

// stagePhases are the phases of an image's staging into a zone, in
// order: request (the download begun, unless the image is staged there:
// then the staging is done), template (in the background: the download
// waited for and the template made).
func stagePhases() []phase[stageScope] {
	return []phase[stageScope]{
		step("request", (*stageScope).request),
		step("template", (*stageScope).template),
	}
}

// request begins the download unless the image is staged.
func (sc *stageScope) request(ctx context.Context) error {
	st, err := sc.stager.Stage(ctx, sc.t, sc.img)
	sc.st = st
	if err != nil {
		return err
	}
	if st.State == images.StateStaged {
		return errDone
	}
	return nil
}

// template waits for the download and makes the template.
func (sc *stageScope) template(ctx context.Context) error {
	_, err := sc.stager.Ensure(ctx, sc.t, sc.img)
	return err
}
