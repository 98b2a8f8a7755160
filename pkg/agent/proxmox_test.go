package agent

import (
	"bytes"
	"io"
	"strings"
	"testing"

	"github.com/flexplane/flexplane/pkg/pvesim"
)

// TestProxmoxClient checks the agent's Proxmox client against the simulator:
// fingerprint pinning, the facts Info reports, and that the token never
// appears in errors.
func TestProxmoxClient(t *testing.T) {
	t.Parallel()
	const token = "flexplane@pve!agent=0123456789abcdef"
	sim, err := pvesim.Start(pvesim.Config{Cluster: "lab", Nodes: 2, Tokens: []string{token}})
	if err != nil {
		t.Fatal(err)
	}
	defer sim.Close()
	other, err := pvesim.Start(pvesim.Config{Tokens: []string{token}})
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	ctx := t.Context()

	p, err := newPVE(sim.URL(), token, sim.Fingerprint())
	if err != nil {
		t.Fatal(err)
	}
	f1, err := p.facts(ctx, "pve1")
	if err != nil {
		t.Fatal(err)
	}
	f2, err := p.facts(ctx, "pve2")
	if err != nil {
		t.Fatal(err)
	}
	if f1.clusterName != "lab" || f1.version == "" || f1.clusterID == "" || f1 != f2 {
		t.Fatalf("facts pve1 %+v pve2 %+v", f1, f2)
	}
	po, err := newPVE(other.URL(), token, other.Fingerprint())
	if err != nil {
		t.Fatal(err)
	}
	fo, err := po.facts(ctx, "pve1")
	if err != nil {
		t.Fatal(err)
	}
	if fo.clusterName != "" || fo.clusterID == f1.clusterID {
		t.Fatalf("standalone facts %+v, cluster %+v", fo, f1)
	}

	// Pinning: the other cluster's fingerprint does not open this one.
	wrong, err := newPVE(sim.URL(), token, other.Fingerprint())
	if err != nil {
		t.Fatal(err)
	}
	_, err = wrong.do(ctx, "GET", "/version", "", nil, "")
	if err == nil || !strings.Contains(err.Error(), "does not match the pinned one") {
		t.Fatalf("wrong fingerprint: %v", err)
	}
	// A refused token is a status, and no error quotes the token.
	bad, err := newPVE(sim.URL(), "flexplane@pve!agent=wrong-secret", sim.Fingerprint())
	if err != nil {
		t.Fatal(err)
	}
	resp, err := bad.do(ctx, "GET", "/version", "", nil, "")
	if err != nil || resp.status != 401 {
		t.Fatalf("bad token: %v %v", resp.status, err)
	}
	_, err = bad.facts(ctx, "pve1")
	if err == nil || strings.Contains(err.Error(), "wrong-secret") {
		t.Fatalf("facts with a bad token: %v", err)
	}
	for _, fp := range []string{"AB:CD", "zz"} {
		if _, err := newPVE(sim.URL(), token, fp); err == nil {
			t.Errorf("fingerprint %q accepted", fp)
		}
	}
	if _, err := newPVE("http://127.0.0.1:8006", token, ""); err == nil {
		t.Error("plain http Proxmox URL accepted")
	}
}

// TestReadBody reads answers of known, wrong and unknown length whole, in
// one buffer when the length is known, and tells a too large one.
func TestReadBody(t *testing.T) {
	t.Parallel()
	body := bytes.Repeat([]byte(`{"data":[{"id":"qemu/100"}]}`), 10000)
	for _, length := range []int64{int64(len(body)), -1, 10, int64(len(body)) + 100} {
		got, err := readBody(bytes.NewReader(body), length)
		if err != nil || !bytes.Equal(got, body) {
			t.Errorf("length %d: read %d bytes of %d, %v", length, len(got), len(body), err)
		}
		if length == int64(len(body)) && cap(got) != len(body)+bytes.MinRead {
			t.Errorf("known length: buffer grew to %d for %d bytes", cap(got), len(body))
		}
	}
	big := bytes.Repeat([]byte("x"), maxResponse+10)
	for _, length := range []int64{int64(len(big)), -1} {
		got, err := readBody(bytes.NewReader(big), length)
		if err != nil || len(got) != maxResponse+1 {
			t.Errorf("too large, length %d: read %d bytes, %v; want %d", length, len(got), err, maxResponse+1)
		}
	}
}

// BenchmarkReadBody reads a 300 KB answer with its length known, and with
// io.ReadAll as before (the same-run baseline).
func BenchmarkReadBody(b *testing.B) {
	body := bytes.Repeat([]byte(`{"id":"qemu/1000","type":"qemu","name":"vm"},`), 300<<10/45)
	b.Run("io.ReadAll", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := io.ReadAll(io.LimitReader(bytes.NewReader(body), maxResponse+1)); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("readBody", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := readBody(bytes.NewReader(body), int64(len(body))); err != nil {
				b.Fatal(err)
			}
		}
	})
}
