package graph

import (
	"context"

	"github.com/flexplane/flexplane/graph/model"
	"github.com/flexplane/flexplane/graph/server/apierr"
	"github.com/flexplane/flexplane/pkg/console"
)

// openConsole checks VM id in the request's VDC and issues a console
// ticket for it.
func (r *Resolver) openConsole(ctx context.Context, id string) (*model.ConsoleSession, error) {
	scope, _ := VDCScopeFrom(ctx) // @vdc guarantees it
	p, err := caller(ctx)
	if err != nil {
		return nil, err
	}
	svc, err := r.compute()
	if err != nil {
		return nil, err
	}
	if r.Consoles == nil {
		return nil, apierr.New(apierr.Internal, "consoles are not available")
	}
	t, err := svc.Console(ctx, scope.VDC.Name, id)
	if err != nil {
		return nil, computeError(err, "")
	}
	ticket, exp, err := r.Consoles.Issue(ctx, console.Target{ZoneID: t.ZoneID, Node: t.Node, VMID: t.VMID, VMName: t.Name,
		VM: id, VDC: scope.VDC.Name, Subject: p.Subject})
	if err != nil {
		name := t.ZoneID
		if z, ok := r.zoneByID(t.ZoneID); ok {
			name = z.Name
		}
		return nil, apierr.ZoneDown(name, err)
	}
	return &model.ConsoleSession{Path: console.PathPrefix + ticket, ExpiresAt: exp}, nil
}
