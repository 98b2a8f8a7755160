package graph_test

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"mime/multipart"
	"net/http"
	"os"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/flexplane/flexplane/pkg/dev/gqltest"
	"github.com/flexplane/flexplane/pkg/dev/meshtest"
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

// rssKiB is this process's resident set (VmRSS) in KiB.
func rssKiB(b testing.TB) int64 {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
			n, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			if err != nil {
				b.Fatal(err)
			}
			return n
		}
	}
	b.Fatal("no VmRSS in /proc/self/status")
	return 0
}

// BenchmarkUploadThroughput measures uploadImage of a 2 GiB file
// (multipart, through the API, the agent and Proxmox's upload endpoint,
// until the image's template is made) against a plain multipart POST of
// the same bytes straight to the same storage of the simulated Proxmox
// (until its task ends), and the resident memory the upload adds. The
// whole harness (orchestrator, agent, simulator and client) is this
// process, so its growth bounds the orchestrator's. Goals: throughput
// ratio ≥ 0.8, growth < 64 MiB (docs/performance/index.md).
func BenchmarkUploadThroughput(b *testing.B) {
	size := int64(2 << 30)
	if s := os.Getenv("UPLOAD_BENCH_BYTES"); s != "" {
		size, _ = strconv.ParseInt(s, 10, 64)
	}
	h := meshtest.New(b, meshtest.WithClusters(meshtest.ClusterSpec{Name: "alpha", Nodes: 1}), meshtest.WithAPI(meshtest.APISpec{}))
	h.WaitOnline(b, 30*time.Second)
	seedCatalog(b, h, "alpha")
	c := h.Clusters[0]
	direct := simClient(b, c)
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(c.Sim.CACertPEM())
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	ctx := context.Background()

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
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.Sim.URL()+"/api2/json/nodes/pve1/storage/local/upload", pr)
		if err != nil {
			b.Fatal(err)
		}
		req.Header.Set("Content-Type", mw.FormDataContentType())
		req.Header.Set("Authorization", "PVEAPIToken="+c.Token)
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
		if _, err := pveapi.Run(ctx, direct, "DELETE", "/nodes/pve1/storage/local/content/local:import/"+name, nil); err != nil {
			b.Fatal(err)
		}
		return d
	}
	viaAPI := func(name string) (time.Duration, int64) {
		runtime.GC()
		debug.FreeOSMemory()
		before := rssKiB(b)
		var peak atomic.Int64
		stop := make(chan struct{})
		sampled := make(chan struct{})
		go func() {
			defer close(sampled)
			t := time.NewTicker(20 * time.Millisecond)
			defer t.Stop()
			// poll:own-loop: samples the resident set at a fixed pace for the upload's whole length.
			for {
				if n := rssKiB(b); n > peak.Load() {
					peak.Store(n)
				}
				select {
				case <-stop:
					return
				case <-t.C:
				}
			}
		}()
		start := time.Now()
		r, err := gqltest.Post(ctx, nil, h.GraphQLURL(), gqltest.Request{Query: uploadImage,
			Variables:     map[string]any{"in": map[string]any{"name": name, "format": "RAW", "zone": "alpha", "file": nil}},
			Authorization: "Bearer " + h.Token(b, "bob"), VDC: "blue", File: newPatternReader(size), FileVariable: "in.file"})
		d := time.Since(start)
		close(stop)
		<-sampled
		if err != nil || len(r.Errors) > 0 {
			b.Fatalf("uploadImage: %v %v", err, r)
		}
		h.GraphQL(b, "bob", "blue", `mutation($n: String!) { deleteVDCImage(name: $n) { name } }`, map[string]any{"n": name}).OK(b)
		return d, (peak.Load() - before) >> 10
	}

	b.ResetTimer()
	var plainD, apiD time.Duration
	var growth int64
	for i := range b.N {
		plainD += plain(fmt.Sprintf("plain-%d.raw", i))
		d, g := viaAPI(fmt.Sprintf("bench-%d", i))
		apiD += d
		growth = max(growth, g)
	}
	mbps := func(d time.Duration) float64 { return float64(size) * float64(b.N) / d.Seconds() / 1e6 }
	ratio := mbps(apiD) / mbps(plainD)
	b.ReportMetric(mbps(plainD), "plain-MB/s")
	b.ReportMetric(mbps(apiD), "uploadImage-MB/s")
	b.ReportMetric(ratio, "uploadImage/plain")
	b.ReportMetric(float64(growth), "rss-growth-MiB")
	b.Logf("goal uploadImage/plain ≥ 0.8: %.2f (pass %v); goal RSS growth < 64 MiB: %d MiB (pass %v)", ratio, ratio >= 0.8, growth, growth < 64)
}
