package images_test

import (
	"strings"
	"testing"

	"github.com/flexplane/flexplane/pkg/catalog"
	"github.com/flexplane/flexplane/pkg/compute/images"
	"github.com/flexplane/flexplane/pkg/dev/vmtest"
	"github.com/flexplane/flexplane/pkg/proxmox/pveapi"
)

func TestStageMakesOneTemplate(t *testing.T) {
	t.Parallel()
	z := vmtest.StartZone(t, "alpha", 2)
	url, sum := vmtest.ImageServer(t, 3<<20)
	img := &catalog.Image{ObjectMeta: catalog.ObjectMeta{Name: "tiny"}, ImageSpec: catalog.ImageSpec{URL: url, Checksum: sum}}
	s := images.New(nil)
	tgt := images.Target{Zone: z.Name, Client: z.Client, Storages: []string{"local-lvm"}}
	ctx := vmtest.Ctx(t)

	st, err := s.Status(ctx, tgt, img)
	if err != nil || st.State != images.StateAbsent {
		t.Fatalf("before: %+v, %v; want ABSENT", st, err)
	}
	st, err = s.Stage(ctx, tgt, img)
	if err != nil || st.State != images.StateStaging || st.UPID == "" {
		t.Fatalf("stage: %+v, %v; want STAGING with a task", st, err)
	}
	// Concurrent Ensure calls share the run and yield one template.
	tpls := make(chan images.Template, 4)
	errs := make(chan error, 4)
	for range 4 {
		go func() {
			tpl, err := s.Ensure(ctx, tgt, img)
			tpls <- tpl
			errs <- err
		}()
	}
	var first images.Template
	for i := range 4 {
		tpl := <-tpls
		if err := <-errs; err != nil {
			t.Fatalf("ensure: %v", err)
		}
		if i == 0 {
			first = tpl
		} else if tpl != first {
			t.Fatalf("templates differ: %+v vs %+v", tpl, first)
		}
	}
	st, err = s.Status(ctx, tgt, img)
	if err != nil || st.State != images.StateStaged || st.Template != first {
		t.Fatalf("after: %+v, %v; want STAGED %+v", st, err, first)
	}
	if first.DiskBytes < 3<<20 {
		t.Errorf("template disk %d bytes, smaller than the image", first.DiskBytes)
	}
	guests, err := pveapi.Guests(ctx, z.Client)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, g := range guests {
		if g.HasTag(images.Tag(img)) {
			n++
			if g.Template != 1 || !g.HasTag("flexplane") {
				t.Errorf("template guest %+v not a tagged template", g)
			}
		}
	}
	if n != 1 {
		t.Errorf("%d template guests, want 1", n)
	}
}

func TestStageWrongChecksumFails(t *testing.T) {
	t.Parallel()
	z := vmtest.StartZone(t, "beta", 1)
	url, _ := vmtest.ImageServer(t, 1<<20)
	img := &catalog.Image{ObjectMeta: catalog.ObjectMeta{Name: "bad"}, ImageSpec: catalog.ImageSpec{URL: url, Checksum: "sha256:" + strings.Repeat("ab", 32)}}
	s := images.New(nil)
	tgt := images.Target{Zone: z.Name, Client: z.Client, Storages: []string{"local-lvm"}}
	ctx := vmtest.Ctx(t)
	if _, err := s.Ensure(ctx, tgt, img); err == nil {
		t.Fatal("ensure with a wrong checksum succeeded")
	}
	st, err := s.Status(ctx, tgt, img)
	if err != nil || st.State != images.StateFailed || !strings.Contains(st.Reason, "checksum mismatch") {
		t.Fatalf("status %+v, %v; want FAILED with the checksum mismatch", st, err)
	}
	// Staging again retries the download (and fails the same way).
	st, err = s.Stage(ctx, tgt, img)
	if err != nil || st.State != images.StateStaging {
		t.Fatalf("restage: %+v, %v", st, err)
	}
}
