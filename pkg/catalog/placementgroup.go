package catalog

import "strings"

// Policies of a placement group.
const (
	// PlacementSpread keeps the group's VMs on distinct hosts.
	PlacementSpread = "SPREAD"
	// PlacementPack keeps the group's VMs on one host while it has room.
	PlacementPack = "PACK"
)

// MaxPlacementGroups bounds the placement groups of one VDC.
const MaxPlacementGroups = 100

// PlacementGroup is a placement group of a VDC in one zone: a rule for
// the hosts its VMs are placed on. Its name is PlacementGroupName(vdc,
// name). Which VMs are its members is a fact of each VM (recorded on the
// guest), not of the group.
type PlacementGroup struct {
	TypeMeta
	ObjectMeta         `json:"metadata"`
	PlacementGroupSpec `json:"spec"`
}

// PlacementGroupSpec is what a VDC wants of a placement group.
type PlacementGroupSpec struct {
	// VDC is the VDC the group belongs to.
	VDC string `json:"vdc"`
	// Zone is the name of the zone its VMs are in: a group is zonal.
	Zone string `json:"zone"`
	// Policy is PlacementSpread or PlacementPack.
	Policy string `json:"policy"`
	// BestEffort makes a SPREAD group soft: a VM goes to a host with the
	// fewest of the group's VMs, and shares one when every host holds
	// some, instead of being refused (the groups of Kubernetes node
	// pools). Ignored for PACK, which is best effort anyway.
	BestEffort bool `json:"bestEffort,omitempty"`
}

// PlacementGroupName is the name of vdc's placement group called name.
func PlacementGroupName(vdc, name string) string { return vdc + "." + name }

// ShortName is the group's name within its VDC.
func (g *PlacementGroup) ShortName() string {
	_, n, _ := strings.Cut(g.Name, ".")
	return n
}

// ObjectKind implements Object.
func (*PlacementGroup) ObjectKind() Kind { return KindPlacementGroup }

// DeepCopyObject implements Object.
func (g *PlacementGroup) DeepCopyObject() Object { c := *g; return &c }

// Validate implements Object.
func (g *PlacementGroup) Validate() error {
	if err := firstError(ValidateLabel("vdc", g.VDC), ValidateName(KindPlacementGroup, g.Name), ValidateLabel("zone", g.Zone)); err != nil {
		return err
	}
	if vdc, _, _ := strings.Cut(g.Name, "."); vdc != g.VDC {
		return invalid("name", "%q must start with its VDC %q", g.Name, g.VDC)
	}
	switch g.Policy {
	case PlacementSpread, PlacementPack:
	default:
		return invalid("policy", "%q is not %s or %s", g.Policy, PlacementSpread, PlacementPack)
	}
	return nil
}
