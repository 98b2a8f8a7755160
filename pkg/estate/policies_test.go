package estate

import (
	"errors"
	"slices"
	"testing"

	"github.com/flexplane/flexplane/pkg/catalog"
	"github.com/flexplane/flexplane/pkg/mesh/fleet"
	"github.com/flexplane/flexplane/pkg/support/fault"
)

// TestVisibleAndPlaceable: a zone dedicated to VDCs is seen and taken by
// them only (and seen by platform admins); a region narrows the zones; an
// invalid region is the catalog's validation error on its field.
func TestVisibleAndPlaceable(t *testing.T) {
	t.Parallel()
	store, err := catalog.OpenDir(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	for _, p := range []*catalog.ZonePolicy{
		{ObjectMeta: catalog.ObjectMeta{Name: "fra1"}, ZonePolicySpec: catalog.ZonePolicySpec{Region: "eu"}},
		{ObjectMeta: catalog.ObjectMeta{Name: "fra2"}, ZonePolicySpec: catalog.ZonePolicySpec{Region: "eu", DedicatedTo: []string{"red"}}},
	} {
		if _, err := catalog.Create(ctx, store, p); err != nil {
			t.Fatal(err)
		}
	}
	all := []fleet.Zone{{ID: "a", Name: "fra1"}, {ID: "b", Name: "fra2"}, {ID: "c", Name: "nyc1"}}
	names := func(zs []fleet.Zone) []string {
		var out []string
		for _, z := range zs {
			out = append(out, z.Name)
		}
		return out
	}
	rd := New(Config{Catalog: store}).NewRead()
	eu := "eu"
	for _, c := range []struct {
		v      Viewer
		region *string
		want   []string
	}{
		{Viewer{}, nil, []string{"fra1", "nyc1"}},
		{Viewer{VDC: "blue"}, nil, []string{"fra1", "nyc1"}},
		{Viewer{VDC: "red"}, nil, []string{"fra1", "fra2", "nyc1"}},
		{Viewer{PlatformAdmin: true}, nil, []string{"fra1", "fra2", "nyc1"}},
		{Viewer{VDC: "red"}, &eu, []string{"fra1", "fra2"}},
		{Viewer{VDC: "blue"}, &eu, []string{"fra1"}},
	} {
		got, err := rd.Visible(ctx, c.v, all, c.region, "region")
		if err != nil || !slices.Equal(names(got), c.want) {
			t.Errorf("%+v in %v: %v, %v; want %v", c.v, c.region, names(got), err, c.want)
		}
	}
	bad := "Not A Label"
	var ve *catalog.ValidationError
	if _, err := rd.Visible(ctx, Viewer{}, all, &bad, "filter.region"); !errors.As(err, &ve) || ve.Field != "filter.region" {
		t.Errorf("bad region: %v", err)
	}
	var fe *fault.Error
	if err := rd.Placeable(ctx, all[1], "blue", "input.zone"); !errors.As(err, &fe) || fe.Kind != fault.BadInput || fe.Field != "input.zone" {
		t.Errorf("blue in fra2: %v", err)
	}
	for _, vdc := range []string{"red", "blue"} {
		if err := rd.Placeable(ctx, all[0], vdc, "input.zone"); err != nil {
			t.Errorf("%s in fra1: %v", vdc, err)
		}
	}
	if p, err := rd.Policy(ctx, "fra2"); err != nil || p == nil || p.Region != "eu" {
		t.Errorf("policy of fra2: %+v, %v", p, err)
	}
	if p, err := rd.Policy(ctx, "nyc1"); err != nil || p != nil {
		t.Errorf("policy of nyc1: %+v, %v", p, err)
	}
}
