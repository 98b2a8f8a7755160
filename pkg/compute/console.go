package compute

import "context"

// ConsoleTarget is where the console of a VM is: the node of its zone
// that runs it.
type ConsoleTarget struct {
	ZoneID, Node string
	VMID         int
	Name         string
}

// Console finds VM id of vdc for a console session: another VDC's VM (or
// none) is KindNotFound, a VM that is not running (or still being
// created) KindConflict.
func (s *Service) Console(ctx context.Context, vdc, id string) (ConsoleTarget, error) {
	z, g, _, err := s.d.find.lookup(ctx, vdc, id)
	if err != nil {
		return ConsoleTarget{}, err
	}
	if isCreating(g) || s.d.eng.isLive(z, g.VMID) {
		return ConsoleTarget{}, newError(KindConflict, "the VM is still being created")
	}
	if g.Status != "running" {
		return ConsoleTarget{}, newError(KindConflict, "the VM is not running: only a running VM has a console")
	}
	return ConsoleTarget{ZoneID: z.ID, Node: g.Node, VMID: g.VMID, Name: g.Name}, nil
}
