package compute_test

import (
	"fmt"
	"sync"
	"testing"

	"github.com/flexplane/flexplane/pkg/catalog"
	"github.com/flexplane/flexplane/pkg/compute"
	"github.com/flexplane/flexplane/pkg/compute/images"
	"github.com/flexplane/flexplane/pkg/dev/vmtest"
	"github.com/flexplane/flexplane/pkg/proxmox/pveapi"
)

// Two replicas each get creates of one unstaged image in one zone at once
// (the dev stack's demo VM and a user's VM): every create succeeds and the
// zone ends with one template of the image per node (VMs of local storage
// are cloned on their host's own template).
func TestConcurrentCreatesStageOnce(t *testing.T) {
	t.Parallel()
	e := newEnv(t, bigQuota, "fra1")
	replicas := []*compute.Service{e.svc, e.newService(e.cfg)}
	ctx := vmtest.Ctx(t)
	const n = 4
	start := make(chan struct{})
	ops := make([]*compute.Operation, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			<-start
			_, op, err := replicas[i%2].CreateVM(ctx, e.input("fra1", fmt.Sprintf("web-%d", i)))
			if err != nil {
				t.Errorf("create %d: %v", i, err)
				return
			}
			ops[i] = op
		})
	}
	close(start)
	wg.Wait()
	for i, op := range ops {
		if op == nil {
			continue
		}
		if last := e.wait(replicas[i%2], "blue", op.ID); last.State != compute.OpSucceeded {
			t.Errorf("create %d: %+v", i, last)
		}
	}
	img, err := catalog.Get[*catalog.Image](ctx, e.store, "tiny")
	if err != nil {
		t.Fatal(err)
	}
	guests, err := pveapi.Guests(ctx, e.zones[0].Client)
	if err != nil {
		t.Fatal(err)
	}
	tpls := map[string]int{}
	for _, g := range guests {
		if g.HasTag(images.Tag(img)) {
			tpls[g.Node]++
		}
	}
	if len(tpls) != 2 || tpls["pve1"] != 1 || tpls["pve2"] != 1 {
		t.Errorf("templates of the image per node %v, want one on each of pve1 and pve2", tpls)
	}
}
