package gateways

import (
	"cmp"
	"context"
	"encoding/base64"
	"net/netip"
	"slices"
	"strings"

	"github.com/flexplane/flexplane/pkg/catalog"
	"github.com/flexplane/flexplane/pkg/support/fault"
	"github.com/flexplane/flexplane/pkg/support/paging"
)

// View is a gateway as the API shows it: its objects in the order shown
// and the state of the running gateway.
type View struct {
	*catalog.EdgeGateway
	// ID is the gateway's opaque id (ID), ZoneID the identity of its zone.
	ID, ZoneID string
	// PortForwards are sorted by protocol and public port, OneToOne by
	// public address.
	PortForwards []catalog.PortForward
	OneToOne     []catalog.OneToOneAddress
	State        State
}

// ID is the opaque id of gateway g.
func ID(g *catalog.EdgeGateway) string {
	return base64.RawURLEncoding.EncodeToString([]byte("egw:" + g.Name))
}

// View is g, in the zone of id zoneID, as it runs now.
func (s *Service) View(ctx context.Context, zoneID string, g *catalog.EdgeGateway) View {
	v := View{EdgeGateway: g, ID: ID(g), ZoneID: zoneID, PortForwards: slices.Clone(g.PortForwards), OneToOne: slices.Clone(g.OneToOne),
		State: s.State(ctx, zoneID, g)}
	slices.SortFunc(v.PortForwards, func(a, b catalog.PortForward) int {
		return cmp.Or(cmp.Compare(a.Protocol, b.Protocol), cmp.Compare(a.PublicPort, b.PublicPort))
	})
	slices.SortFunc(v.OneToOne, func(a, b catalog.OneToOneAddress) int {
		return netip.MustParseAddr(a.PublicAddress).Compare(netip.MustParseAddr(b.PublicAddress))
	})
	return v
}

// Page lists vdc's gateways in the zones of zoneIDs (zone name to
// identity), sorted by zone, and cuts the page of at most first (default
// 50) after the cursor after (paging.List); the states of the page's
// gateways are read concurrently.
func (s *Service) Page(ctx context.Context, vdc string, zoneIDs map[string]string, first *int, after *string) (paging.Page[View], error) {
	gws, err := s.List(ctx, vdc)
	if err != nil {
		return paging.Page[View]{}, err
	}
	gws = slices.DeleteFunc(gws, func(g *catalog.EdgeGateway) bool { _, ok := zoneIDs[g.Zone]; return !ok })
	p, err := paging.List(gws, func(g *catalog.EdgeGateway) string { return paging.Key(g.Zone) }, first, 50, after)
	if err != nil {
		return paging.Page[View]{}, err
	}
	views := make([]View, len(p.Items))
	done := make(chan struct{}, len(p.Items))
	for i, g := range p.Items {
		go func() {
			defer func() { done <- struct{}{} }()
			views[i] = s.View(ctx, zoneIDs[g.Zone], g)
		}()
	}
	for range p.Items {
		<-done
	}
	return paging.Page[View]{Items: views, Cursors: p.Cursors, Total: p.Total, Before: p.Before, More: p.More}, nil
}

// DeleteByID deletes vdc's gateway of id (a NotFound for any other VDC's,
// or none) and gives its addresses back to the pool, returning its zone.
func (s *Service) DeleteByID(ctx context.Context, vdc, id string) (string, []netip.Addr, error) {
	notFound := fault.New(fault.NotFound, "edge gateway %q not found", id)
	raw, err := base64.RawURLEncoding.DecodeString(id)
	if err != nil {
		return "", nil, notFound
	}
	zone, ok := strings.CutPrefix(string(raw), "egw:"+vdc+".")
	if !ok || zone == "" {
		return "", nil, notFound
	}
	released, err := s.Delete(ctx, vdc, zone)
	if fault.Is(err, fault.NotFound) {
		return "", nil, notFound
	}
	return zone, released, err
}
