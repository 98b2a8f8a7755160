package images_test

import (
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/flexplane/flexplane/pkg/catalog"
	"github.com/flexplane/flexplane/pkg/compute/images"
	"github.com/flexplane/flexplane/pkg/dev/pvetest"
	"github.com/flexplane/flexplane/pkg/dev/vmtest"
	"github.com/flexplane/flexplane/pkg/proxmox/pveapi"
	"github.com/flexplane/flexplane/pkg/pvesim"
)

// Two replicas (two Stagers) and several callers each stage one unstaged
// image into one zone at once, with tasks slow enough that the download
// and the template overlap: all get the same template, and one template
// guest is left on each node (local storage: each node has its own).
func TestConcurrentStagingConverges(t *testing.T) {
	t.Parallel()
	_, c := pvetest.Start(t, pvesim.Config{Cluster: "race", Nodes: 2, Timing: pvesim.Timing{Base: 150 * time.Millisecond}}, "root@pam!vmtest=vmtest-secret")
	url, sum := vmtest.ImageServer(t, 2<<20)
	img := &catalog.Image{ObjectMeta: catalog.ObjectMeta{Name: "debian-12"}, ImageSpec: catalog.ImageSpec{URL: url, Checksum: sum}}
	tgt := images.Target{Zone: "fra1", Client: c, Storages: []string{"local-lvm"}}
	ctx := vmtest.Ctx(t)
	log := slog.New(slog.NewTextHandler(tWriter{t}, nil))
	replicas := []*images.Stager{images.New(log), images.New(log)}

	const n = 6
	var wg sync.WaitGroup
	start := make(chan struct{})
	tpls := make([]images.Template, n)
	errs := make([]error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			tpls[i], errs[i] = replicas[i%2].Ensure(ctx, tgt, img)
		}()
	}
	close(start)
	wg.Wait()
	for i := range n {
		if errs[i] != nil {
			t.Errorf("caller %d: %v", i, errs[i])
		} else if tpls[i] != tpls[0] {
			t.Errorf("caller %d got template %+v, caller 0 %+v", i, tpls[i], tpls[0])
		}
	}
	guests, err := pveapi.Guests(ctx, c)
	if err != nil {
		t.Fatal(err)
	}
	var tagged []pveapi.Resource
	perNode := map[string]int{}
	for _, g := range guests {
		if g.HasTag(images.Tag(img)) {
			tagged = append(tagged, g)
			perNode[g.Node]++
		}
	}
	if len(tagged) != 2 || perNode["pve1"] != 1 || perNode["pve2"] != 1 {
		t.Errorf("%d template guests, want one on each node: %+v", len(tagged), tagged)
	}
}

// tWriter writes log lines to the test's log.
type tWriter struct{ t *testing.T }

func (w tWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSuffix(string(p), "\n"))
	return len(p), nil
}
