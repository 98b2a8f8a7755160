package devstack

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/flexplane/flexplane/pkg/dev/poll"
)

func TestStandInImagesAreServedWithTheirChecksums(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	img := standIns()[0]
	path := filepath.Join(dir, img.File)
	sum, err := writeStandIn(path)
	if err != nil {
		t.Fatal(err)
	}
	again, err := writeStandIn(path)
	if err != nil || again != sum {
		t.Fatalf("second call: %s, %v; want the same checksum %s", again, err, sum)
	}
	other, err := writeStandIn(filepath.Join(dir, standIns()[1].File))
	if err != nil || other == sum {
		t.Fatalf("the two images share checksum %s (%v)", sum, err)
	}

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := startImageServer(ln, dir)
	defer srv.Close()
	resp, err := http.Get(srv.url + "/" + img.File)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	got := sha256.Sum256(body)
	if hex.EncodeToString(got[:]) != sum || len(body) != standInSize || !bytes.HasPrefix(body, []byte("QFI\xfb")) {
		t.Fatalf("served %d bytes with sha256 %x and header %q; want %d bytes, %s, a qcow2 header", len(body), got, body[:4], standInSize, sum)
	}
}

func TestLogMuxPrefixesLinesAndKeepsFiles(t *testing.T) {
	t.Parallel()
	// Read only after Close, which waits for the writers.
	var out bytes.Buffer
	m := &logMux{out: &out, dir: t.TempDir(), w: 5}
	a, err := m.source("a")
	if err != nil {
		t.Fatal(err)
	}
	b, err := m.source("bb")
	if err != nil {
		t.Fatal(err)
	}
	io.WriteString(a, "one\ntw")
	io.WriteString(b, "three\n")
	io.WriteString(a, "o\n")
	a.Close()
	b.Close()
	for _, want := range []string{"a     | one\n", "a     | two\n", "bb    | three\n"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output %q lacks %q", out.String(), want)
		}
	}
	f, err := os.ReadFile(filepath.Join(m.dir, "a.log"))
	if err != nil || string(f) != "one\ntwo\n" {
		t.Errorf("a.log = %q, %v", f, err)
	}
}

// TestStopEndsTheWholeProcessGroup: a child's own children die with it,
// and a child that ignores SIGTERM is killed after the grace period.
func TestStopEndsTheWholeProcessGroup(t *testing.T) {
	t.Parallel()
	m := &logMux{out: io.Discard, dir: t.TempDir(), w: 5}
	pidLine := make(chan string, 1)
	p, err := m.start(procSpec{
		name: "sh",
		path: "/bin/sh",
		// The grandchild ignores SIGTERM too; it prints its pid.
		args: []string{"-c", `trap "" TERM; sleep 60 & echo $!; wait`},
		stdout: func(line string) {
			select {
			case pidLine <- line:
			default:
			}
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	var grandchild int
	select {
	case l := <-pidLine:
		if _, err := fmt.Sscan(l, &grandchild); err != nil {
			t.Fatalf("pid line %q: %v", l, err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the child printed no pid")
	}
	start := time.Now()
	p.stop(300 * time.Millisecond)
	if d := time.Since(start); d < 300*time.Millisecond {
		t.Errorf("stop returned after %v, before the grace period, though the child ignores SIGTERM", d)
	}
	poll.True(t, 5*time.Second, fmt.Sprintf("grandchild %d gone after stop", grandchild), func() bool {
		return syscall.Kill(grandchild, 0) != nil
	})
}

func TestRunRefusesABadAddressAndChangesNothing(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "dev")
	err := Run(context.Background(), Config{Addr: "no-port", Dir: dir})
	if err == nil || !strings.Contains(err.Error(), "no-port") {
		t.Fatalf("Run with a bad address: %v", err)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Fatalf("Run created %s: %v", dir, err)
	}
}

func TestGatewayOf(t *testing.T) {
	t.Parallel()
	for _, v := range demoVDCs() {
		for zone, cidr := range v.cidrs {
			gw := gatewayOf(cidr)
			if !strings.HasSuffix(gw, ".1") || !strings.HasPrefix(cidr, strings.TrimSuffix(gw, "1")) {
				t.Errorf("%s/%s: gateway %s of %s", v.name, zone, gw, cidr)
			}
		}
	}
}

func TestRunRefusesABusyAddressBeforeBuilding(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	dir := t.TempDir()
	var out bytes.Buffer
	err = Run(t.Context(), Config{Addr: ln.Addr().String(), Dir: dir, RepoDir: dir, Stdout: &out})
	if err == nil || !strings.Contains(err.Error(), "is not free") {
		t.Fatalf("Run on a busy address: %v", err)
	}
	if strings.Contains(out.String(), "built binaries") {
		t.Errorf("it built before checking the address:\n%s", out.String())
	}
}
