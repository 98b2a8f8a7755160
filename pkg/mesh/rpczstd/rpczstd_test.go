package rpczstd

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"sync"
	"testing"

	"google.golang.org/grpc/encoding"
)

// resources is a /cluster/resources-like answer of n guests.
func resources(n int) []byte {
	type res struct {
		ID     string  `json:"id"`
		Type   string  `json:"type"`
		Node   string  `json:"node"`
		Name   string  `json:"name"`
		Status string  `json:"status"`
		VMID   int     `json:"vmid"`
		Tags   string  `json:"tags"`
		CPU    float64 `json:"cpu"`
		MaxMem int64   `json:"maxmem"`
	}
	rs := make([]res, n)
	for i := range rs {
		rs[i] = res{ID: fmt.Sprintf("qemu/%d", 1000+i), Type: "qemu", Node: fmt.Sprintf("pve%d", i%4+1),
			Name: fmt.Sprintf("z01-vm-%d", i), Status: "running", VMID: 1000 + i, Tags: "fp-t-acme;fp-vdc-bench",
			CPU: float64(i%100) / 100, MaxMem: 2 << 30}
	}
	b, err := json.Marshal(map[string]any{"data": rs})
	if err != nil {
		panic(err)
	}
	return b
}

func roundTrip(t testing.TB, c encoding.Compressor, in []byte) (compressed int, out []byte) {
	var buf bytes.Buffer
	w, err := c.Compress(&buf)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Write(in); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	compressed = buf.Len()
	r, err := c.Decompress(&buf)
	if err != nil {
		t.Fatal(err)
	}
	out, err = io.ReadAll(r)
	if err != nil {
		t.Fatal(err)
	}
	return compressed, out
}

func TestRegisteredRoundTrip(t *testing.T) {
	t.Parallel()
	c := encoding.GetCompressor(Name)
	if c == nil {
		t.Fatalf("no gRPC compressor %q registered", Name)
	}
	in := resources(1000)
	var wg sync.WaitGroup
	for range 8 { // concurrent use of the pooled encoders and decoders
		wg.Go(func() {
			for range 5 {
				n, out := roundTrip(t, c, in)
				if !bytes.Equal(out, in) {
					t.Errorf("round trip changed %d bytes into %d", len(in), len(out))
					return
				}
				if n*5 > len(in) {
					t.Errorf("compressed %d bytes only to %d", len(in), n)
					return
				}
			}
		})
	}
	wg.Wait()
	for _, in := range [][]byte{nil, []byte("{}")} {
		if _, out := roundTrip(t, c, in); !bytes.Equal(out, in) {
			t.Errorf("round trip of %q gave %q", in, out)
		}
	}
}

func TestCorruptInput(t *testing.T) {
	t.Parallel()
	c := encoding.GetCompressor(Name)
	r, err := c.Decompress(bytes.NewReader([]byte("this is not a zstd frame")))
	if err == nil {
		_, err = io.ReadAll(r)
	}
	if err == nil {
		t.Fatal("corrupt input decompressed without an error")
	}
}

// BenchmarkRoundTrip compresses and decompresses a 1,000-guest answer; the
// same-run baseline is copying it (what an uncompressed message costs
// before it reaches the wire).
func BenchmarkRoundTrip(b *testing.B) {
	in := resources(1000)
	c := encoding.GetCompressor(Name)
	b.Run("zstd", func(b *testing.B) {
		b.SetBytes(int64(len(in)))
		b.ReportAllocs()
		var n int
		for b.Loop() {
			n, _ = roundTrip(b, c, in)
		}
		b.ReportMetric(float64(n), "compressed-bytes")
	})
	b.Run("copy", func(b *testing.B) {
		b.SetBytes(int64(len(in)))
		b.ReportAllocs()
		for b.Loop() {
			out := bytes.Clone(in)
			_ = out
		}
	})
}
