package network

import (
	"context"
	"errors"
	"fmt"

	"github.com/luthermonson/go-proxmox"
)

// Clients gives the Proxmox client of a zone by the zone's id (the fleet
// registry implements it: its clients reach the zone through its agents).
type Clients interface {
	Client(zoneID string) *proxmox.Client
}

// ZoneSet records the zones a VDC has resources in (the catalog's VDC
// zone set: catalog.RecordVDCZone).
type ZoneSet interface {
	// Record adds zoneID to the zone set of vdc.
	Record(ctx context.Context, vdc, zoneID string) error
}

// Service is the networks capability: it picks the zone's client and
// creates, lists and deletes the VDCs' networks there. The caller has
// resolved the zone (and checked that the VDC may use it).
type Service struct {
	clients Clients
	zones   ZoneSet // nil records none
}

// NewService returns the networks service over the zones' clients; a
// create first adds its zone to the VDC's zone set in zones (nil: there is
// none to keep).
func NewService(clients Clients, zones ZoneSet) (*Service, error) {
	if clients == nil {
		return nil, errors.New("network: a service needs the zones' clients")
	}
	return &Service{clients: clients, zones: zones}, nil
}

// Create creates the network spec describes in the zone of id zoneID
// (see Create), once the zone is in the VDC's zone set.
func (s *Service) Create(ctx context.Context, zoneID string, spec Spec) (Network, error) {
	if s.zones != nil {
		if _, _, err := spec.Validate(); err != nil {
			return Network{}, err
		}
		if err := s.zones.Record(ctx, spec.VDC, zoneID); err != nil {
			return Network{}, fmt.Errorf("network: create: %w", err)
		}
	}
	return Create(ctx, s.clients.Client(zoneID), spec)
}

// Delete deletes the network of vdc with VNet id vnet in the zone of id
// zoneID (see Delete).
func (s *Service) Delete(ctx context.Context, zoneID, vdc, vnet string) error {
	return Delete(ctx, s.clients.Client(zoneID), vdc, vnet)
}

// Get reads the network of vdc with VNet id vnet in the zone of id zoneID
// (see Get).
func (s *Service) Get(ctx context.Context, zoneID, vdc, vnet string) (Network, error) {
	return Get(ctx, s.clients.Client(zoneID), vdc, vnet)
}

// List returns the networks of vdc in the zone of id zoneID, sorted by
// name.
func (s *Service) List(ctx context.Context, zoneID, vdc string) ([]Network, error) {
	return List(ctx, s.clients.Client(zoneID), vdc)
}

// RemoveVDC removes the SDN zone of vdc from the zone of id zoneID once
// its networks are deleted (see RemoveVDC).
func (s *Service) RemoveVDC(ctx context.Context, zoneID, vdc string) error {
	return RemoveVDC(ctx, s.clients.Client(zoneID), vdc)
}
