package benchmark_test

import (
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"mime/multipart"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/flexplane/flexplane/pkg/dev/benchmark"
	"github.com/flexplane/flexplane/pkg/dev/gqltest"
	"github.com/flexplane/flexplane/pkg/orchestrator"
	"github.com/flexplane/flexplane/pkg/proxmox/pveapi"
)

// patternReader gives n bytes of a repeating block that is never zeros
// (a disk image's file: the copies skip no run of zeros), without
// holding more than the block.
type patternReader struct {
	block  []byte
	n, off int64
}

func newPatternReader(n int64) *patternReader {
	block := make([]byte, 1<<20)
	for i := range block {
		block[i] = byte(i*31+7) | 1
	}
	return &patternReader{block: block, n: n}
}

func (r *patternReader) Read(p []byte) (int, error) {
	if r.off >= r.n {
		return 0, io.EOF
	}
	k := copy(p[:min(int64(len(p)), r.n-r.off)], r.block[r.off%int64(len(r.block)):])
	r.off += int64(k)
	return k, nil
}

// BenchmarkUploadThroughput measures uploadImage of a 2 GiB file
// (UPLOAD_BENCH_BYTES; multipart, through the API, a ticket over the mesh
// and the bytes over TLS to the agent's data listener, or over the mesh
// with UPLOAD_BENCH_MESH=1, and the agent's write into the storage's
// import directory, until the image's template is made) against a plain multipart POST of the same bytes
// straight to the same storage of the same simulated Proxmox node (until
// its task ends), and the orchestrator's resident memory: cmd/orchestrator
// runs as its own process with production defaults (the stack of this
// package), and its VmRSS is sampled every 20 ms during the upload; the
// agent, the simulator and the client are this process. Goals: throughput
// ratio ≥ 0.8, orchestrator RSS growth < 64 MiB. UPLOAD_BENCH_PROFILE
// names a directory for the orchestrator's allocation profile and the
// CPU profiles of each upload's first 5 s;
// UPLOAD_BENCH_MEMORY_LIMIT is its -memory-limit (none by default);
// UPLOAD_BENCH_HELPER=1 runs the agent as the shipped units do, with its
// privileged helper, which writes the file (the bytes over its socket)
// (docs/performance/index.md).
func BenchmarkUploadThroughput(b *testing.B) {
	size := int64(2 << 30)
	if s := os.Getenv("UPLOAD_BENCH_BYTES"); s != "" {
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil || n <= 0 {
			b.Fatalf("UPLOAD_BENCH_BYTES: %q is not a byte count", s)
		}
		size = n
	}
	_, file, _, _ := runtime.Caller(0)
	moduleDir := filepath.Join(filepath.Dir(file), "..", "..", "..")
	ctx := b.Context()
	dir := b.TempDir()
	binDir := filepath.Join(dir, "bin")
	if err := benchmark.Build(ctx, moduleDir, binDir); err != nil {
		b.Fatal(err)
	}
	quiet := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	// UPLOAD_BENCH_PROFILE: a directory to write the orchestrator's
	// allocation profile (allocs.pb.gz, after the runs) and CPU profiles
	// (cpu-NAME.pb.gz, during each upload) into.
	profDir := os.Getenv("UPLOAD_BENCH_PROFILE")
	// UPLOAD_BENCH_MESH=1: the agents serve no data listener, and the
	// upload crosses the mesh. UPLOAD_BENCH_HELPER=1: each agent has its
	// privileged helper, which writes the uploads.
	st, err := benchmark.Start(ctx, benchmark.Config{Dir: filepath.Join(dir, "stack"), ModuleDir: moduleDir, BinDir: binDir, Logger: quiet, Profiling: profDir != "",
		MemoryLimit: os.Getenv("UPLOAD_BENCH_MEMORY_LIMIT"), MeshUploads: os.Getenv("UPLOAD_BENCH_MESH") == "1",
		Helpers: os.Getenv("UPLOAD_BENCH_HELPER") == "1"})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(st.Close)
	c, err := st.AddCluster(ctx, "alpha", 1, 0)
	if err != nil {
		b.Fatal(err)
	}
	if err := st.StartAgents(ctx, c); err != nil {
		b.Fatal(err)
	}
	if err := waitZones(ctx, st, 1, 1, 2*time.Minute); err != nil {
		b.Fatal(err)
	}
	if _, err := st.GraphQL(ctx, benchmark.AdminUser, false, `mutation {
	  createStorageProfile(input: {name: "ssd", tier: "ssd", readMBps: 200, writeMBps: 100, pools: [{zone: "alpha", pool: "local-lvm"}]}) { name } }`, nil); err != nil {
		b.Fatal(err)
	}
	node := c.Sim.NodeNames()[0]
	direct := c.Direct
	// No timeout: the POST of the whole file may be long on a busy machine.
	hc := &http.Client{Transport: c.HTTPClient().Transport}
	member, err := st.Token(ctx, benchmark.MemberUser)
	if err != nil {
		b.Fatal(err)
	}

	plain := func(name string) time.Duration {
		pr, pw := io.Pipe()
		mw := multipart.NewWriter(pw)
		go func() {
			err := mw.WriteField("content", "import")
			if err == nil {
				var fw io.Writer
				if fw, err = mw.CreateFormFile("filename", name); err == nil {
					_, err = io.Copy(fw, newPatternReader(size))
				}
			}
			if err == nil {
				err = mw.Close()
			}
			pw.CloseWithError(err)
		}()
		start := time.Now()
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.Sim.URL()+"/api2/json/nodes/"+node+"/storage/local/upload", pr)
		if err != nil {
			b.Fatal(err)
		}
		req.Header.Set("Content-Type", mw.FormDataContentType())
		req.Header.Set("Authorization", c.AuthHeader())
		resp, err := hc.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		var out struct{ Data string }
		err = json.NewDecoder(resp.Body).Decode(&out)
		resp.Body.Close()
		if err != nil || resp.StatusCode != http.StatusOK {
			b.Fatalf("plain upload: %s %v", resp.Status, err)
		}
		if err := pveapi.Wait(ctx, direct, out.Data); err != nil {
			b.Fatal(err)
		}
		d := time.Since(start)
		if _, err := pveapi.Run(ctx, direct, "DELETE", "/nodes/"+node+"/storage/local/content/local:import/"+name, nil); err != nil {
			b.Fatal(err)
		}
		return d
	}
	pid := st.OrchestratorPID()
	viaAPI := func(name string) (time.Duration, float64) {
		before, err := benchmark.ReadMemory(pid)
		if err != nil {
			b.Fatal(err)
		}
		var peak atomic.Int64 // KiB
		stop := make(chan struct{})
		sampled := make(chan struct{})
		go func() {
			defer close(sampled)
			t := time.NewTicker(20 * time.Millisecond)
			defer t.Stop()
			// poll:own-loop: samples the orchestrator's resident set at a fixed pace for the upload's whole length.
			for {
				if m, err := benchmark.ReadMemory(pid); err == nil && int64(m.RSS*1024) > peak.Load() {
					peak.Store(int64(m.RSS * 1024))
				}
				select {
				case <-stop:
					return
				case <-t.C:
				}
			}
		}()
		profiled := make(chan error, 1)
		if profDir != "" {
			// The orchestrator's CPU profile of the upload's first seconds.
			go func() {
				profiled <- st.OrchestratorProfile(ctx, "profile", "seconds=5", filepath.Join(profDir, "cpu-"+name+".pb.gz"))
			}()
		} else {
			profiled <- nil
		}
		start := time.Now()
		r, err := gqltest.Post(ctx, nil, st.URL()+orchestrator.APIPath, gqltest.Request{
			Query:         `mutation($in: UploadImageInput!) { uploadImage(input: $in) { name sizeBytes } }`,
			Variables:     map[string]any{"in": map[string]any{"name": name, "format": "RAW", "zone": "alpha", "file": nil}},
			Authorization: "Bearer " + member, VDC: benchmark.VDC, File: newPatternReader(size), FileVariable: "in.file"})
		d := time.Since(start)
		close(stop)
		<-sampled
		if err := <-profiled; err != nil {
			b.Fatal(err)
		}
		if err != nil || len(r.Errors) > 0 {
			b.Fatalf("uploadImage: %v %v", err, r)
		}
		if _, err := st.GraphQL(ctx, benchmark.MemberUser, true, `mutation($n: String!) { deleteVDCImage(name: $n) { name } }`, map[string]any{"n": name}); err != nil {
			b.Fatal(err)
		}
		return d, float64(peak.Load())/1024 - before.RSS
	}

	b.ResetTimer()
	var plainD, apiD time.Duration
	var growth float64
	for i := range b.N {
		plainD += plain(fmt.Sprintf("plain-%d.raw", i))
		d, g := viaAPI(fmt.Sprintf("bench-%d", i))
		apiD += d
		growth = max(growth, g)
	}
	b.StopTimer()
	if profDir != "" {
		if err := st.OrchestratorProfile(ctx, "allocs", "", filepath.Join(profDir, "allocs.pb.gz")); err != nil {
			b.Fatal(err)
		}
	}
	hwm, err := benchmark.ReadMemory(pid)
	if err != nil {
		b.Fatal(err)
	}
	mbps := func(d time.Duration) float64 { return float64(size) * float64(b.N) / d.Seconds() / 1e6 }
	ratio := mbps(apiD) / mbps(plainD)
	b.ReportMetric(mbps(plainD), "plain-MB/s")
	b.ReportMetric(mbps(apiD), "uploadImage-MB/s")
	b.ReportMetric(ratio, "uploadImage/plain")
	b.ReportMetric(growth, "orchestrator-rss-growth-MiB")
	b.ReportMetric(hwm.HWM, "orchestrator-peak-rss-MiB")
	b.Logf("goal uploadImage/plain ≥ 0.8: %.2f (pass %v); goal orchestrator RSS growth < 64 MiB: %.0f MiB (pass %v)", ratio, ratio >= 0.8, growth, growth < 64)
}
