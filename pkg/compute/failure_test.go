package compute_test

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/flexplane/flexplane/pkg/compute"
	"github.com/flexplane/flexplane/pkg/dev/vmtest"
)

// recorder is a slog handler that keeps the records it is given.
type recorder struct {
	mu   sync.Mutex
	recs []slog.Record // protected by mu
}

func (r *recorder) Enabled(context.Context, slog.Level) bool { return true }
func (r *recorder) WithAttrs([]slog.Attr) slog.Handler       { return r }
func (r *recorder) WithGroup(string) slog.Handler            { return r }
func (r *recorder) Handle(_ context.Context, rec slog.Record) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.recs = append(r.recs, rec.Clone())
	return nil
}

// find returns the attributes of the first record at level with message msg.
func (r *recorder) find(level slog.Level, msg string) (map[string]string, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, rec := range r.recs {
		if rec.Level != level || rec.Message != msg {
			continue
		}
		attrs := map[string]string{}
		rec.Attrs(func(a slog.Attr) bool {
			attrs[a.Key] = a.Value.String()
			return true
		})
		return attrs, true
	}
	return nil, false
}

// A create whose image cannot be staged (a wrong checksum) fails at step
// stage with a message saying which image, zone and why, and the cause is
// logged at Error level with the operation.
func TestStagingFailureIsReportedAndLogged(t *testing.T) {
	t.Parallel()
	z := vmtest.StartZone(t, "fra1", 1)
	lan := vmtest.AddNetwork(t, z, "blue", "lan", "10.1.0.0/24", "10.1.0.1")
	url, _ := vmtest.ImageServer(t, 1<<20)
	store := vmtest.Catalog(t, []string{"blue"}, bigQuota, url, "sha256:"+strings.Repeat("ab", 32), z)
	rec := &recorder{}
	e := &env{t: t}
	svc := e.newService(compute.Config{Catalog: store, Logger: slog.New(rec),
		Zones: compute.StaticZones{{ID: z.Name, Name: z.Name, Client: z.Client}}})
	ctx := vmtest.Ctx(t)
	start := time.Now()
	_, op, err := svc.CreateVM(ctx, compute.CreateInput{VDC: "blue", Name: "web-1", Zone: z.Name, Image: "tiny",
		ComputeProfile: "small", StorageProfile: "ssd", DiskGiB: 4, NICs: []compute.NICInput{{Network: lan}}, User: "ops"})
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	last := e.wait(svc, "blue", op.ID)
	t.Logf("failed after %v", time.Since(start))
	want := "staging image tiny in zone fra1 failed: download task ended: checksum mismatch"
	if last.State != compute.OpFailed || last.Step != "stage" || !strings.HasPrefix(last.Error, want) {
		t.Fatalf("operation %+v; want FAILED at stage with %q", last, want)
	}
	attrs, ok := rec.find(slog.LevelError, "operation failed")
	if !ok {
		t.Fatal("no Error record of the failed operation")
	}
	for k, v := range map[string]string{"op": op.ID, "kind": string(compute.OpCreate), "step": "stage", "zone": "fra1"} {
		if attrs[k] != v {
			t.Errorf("log attribute %s = %q, want %q (all: %v)", k, attrs[k], v, attrs)
		}
	}
	if !strings.Contains(attrs["err"], "checksum mismatch") {
		t.Errorf("logged err %q lacks the cause", attrs["err"])
	}
}
