package meshtest_test

import (
	"context"
	"crypto/rand"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/flexplane/flexplane/pkg/agent"
	"github.com/flexplane/flexplane/pkg/compute"
	"github.com/flexplane/flexplane/pkg/dev/meshtest"
	"github.com/flexplane/flexplane/pkg/mesh/meshcontrol"
	"github.com/flexplane/flexplane/pkg/orchestrator"
	"github.com/flexplane/flexplane/pkg/proxmox/pveapi"
)

// migrationDisk is the size of the disk BenchmarkMigrationThroughput moves, all of
// it random data (runs of zeros are not sent).
const migrationDisk = 256 << 20

// BenchmarkMigrationThroughput moves a 256 MiB disk of random data from an agent
// of zone alpha to one of zone beta the way a cross-zone migrateVM does
// (OfferVolume, PullVolume: ReadVolume over the mesh, the target writing and
// checking its SHA-256), and in the same run sends the same bytes over a raw TCP
// connection between the same two mesh nodes (the agents' own: alpha's
// accepting and sending, beta's dialing and reading, on a port the mesh policy
// opens between agents as it opens the migration port) and over loopback TCP,
// alternating. It reports MB/s of each and the ratios (goal: move/mesh ≥ 0.8),
// and the CPU time per byte of the move and of the raw mesh stream.
func BenchmarkMigrationThroughput(b *testing.B) {
	h := meshtest.New(b, meshtest.WithClusters(meshtest.ClusterSpec{Name: "alpha", Nodes: 1}, meshtest.ClusterSpec{Name: "beta", Nodes: 1}),
		meshtest.WithMeshPolicy(benchPolicy))
	h.WaitOnline(b, 30*time.Second)
	ctx := b.Context()
	data := make([]byte, migrationDisk)
	_, _ = rand.Read(data)
	src := benchDisk(b, ctx, h.Clusters[0], "pve1", 9001, migrationDisk, "fp-leaving")
	dst := benchDisk(b, ctx, h.Clusters[1], "pve1", 9002, migrationDisk, "fp-incoming")
	if err := os.WriteFile(src.path, data, 0o644); err != nil {
		b.Fatal(err)
	}
	mover := orchestrator.NewVolumeMover(h.Orchestrator.Zones())
	from := compute.VolumeRef{ZoneID: h.Zone(b, h.Clusters[0]).ID, Node: "pve1", Volume: src.volid}
	to := compute.VolumeRef{ZoneID: h.Zone(b, h.Clusters[1]).ID, Node: "pve1", Volume: dst.volid}
	move := func() {
		if _, err := mover.MoveVolume(ctx, from, to, nil); err != nil {
			b.Fatal(err)
		}
	}

	// The raw streams: between the same two mesh nodes, the agents' own
	// (alpha's accepting and sending, beta's dialing, as in a move), on the
	// port next to the migration port (which the benchmark's mesh policy
	// opens between agents as the migration port), and over loopback.
	srcAgent, dstAgent := h.Clusters[0].Agents[0].Running(), h.Clusters[1].Agents[0].Running()
	srcHost, _, _ := net.SplitHostPort(srcAgent.MigrationAddr())
	meshLn, err := srcAgent.ListenForTest("tcp", ":"+rawPort)
	if err != nil {
		b.Fatal(err)
	}
	tcpLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	meshStream := rawStream(b, meshLn, data, func() (net.Conn, error) {
		return dstAgent.Dial(ctx, "tcp", net.JoinHostPort(srcHost, rawPort))
	})
	tcpStream := rawStream(b, tcpLn, data, func() (net.Conn, error) { return net.Dial("tcp", tcpLn.Addr().String()) })

	// Besides the time of each, the process's CPU time (all of it: both
	// agents, their mesh nodes, the orchestrator) per byte of each: on 2
	// busy cores, where the paths compete for CPU, it is what the ratios
	// follow, and unlike the times it hardly moves with the load.
	type path struct{ wall, cpu time.Duration }
	var mv, mesh, tcp path
	cpuNow := func() time.Duration {
		var ru syscall.Rusage
		_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
		return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	timed := func(p *path, f func()) {
		c, s := cpuNow(), time.Now()
		f()
		p.wall += time.Since(s)
		p.cpu += cpuNow() - c
	}
	// Warm up: the paths, the page cache, the volume files.
	move()
	meshStream()
	tcpStream()
	n := 0
	for b.Loop() {
		timed(&mv, move)
		timed(&mesh, meshStream)
		timed(&tcp, tcpStream)
		n++
	}
	moveD, meshD, tcpD := mv.wall, mesh.wall, tcp.wall
	cpuPerByte := func(p path) float64 { return float64(p.cpu.Nanoseconds()) / float64(migrationDisk) / float64(n) }
	b.ReportMetric(cpuPerByte(mv), "move-cpu-ns/B")
	b.ReportMetric(cpuPerByte(mesh), "mesh-tcp-cpu-ns/B")
	mbps := func(d time.Duration) float64 { return float64(migrationDisk) * float64(n) / d.Seconds() / 1e6 }
	b.ReportMetric(mbps(moveD), "move-MB/s")
	b.ReportMetric(mbps(meshD), "mesh-tcp-MB/s")
	b.ReportMetric(mbps(tcpD), "loopback-MB/s")
	b.ReportMetric(mbps(moveD)/mbps(meshD), "move/mesh-tcp")
	b.ReportMetric(mbps(moveD)/mbps(tcpD), "move/loopback")
	b.ReportMetric(mbps(meshD)/mbps(tcpD), "mesh-tcp/loopback")
	b.Logf("%d MiB, %d rounds: move %.1f MB/s, raw TCP over the mesh %.1f MB/s, loopback TCP %.1f MB/s; move/mesh %.2f, move/loopback %.2f; CPU per byte: move %.1f ns, mesh %.1f ns",
		migrationDisk>>20, n, mbps(moveD), mbps(meshD), mbps(tcpD), mbps(moveD)/mbps(meshD), mbps(moveD)/mbps(tcpD), cpuPerByte(mv), cpuPerByte(mesh))
}

// benchVolume is a disk volume of a simulated guest and its file.
type benchVolume struct{ volid, path string }

// benchDisk makes guest vmid with one disk of size bytes on node of c,
// tagged mark (fp-leaving for a move's source, fp-incoming for its
// target, as the agents require), through the simulator's own API.
func benchDisk(b testing.TB, ctx context.Context, c *meshtest.Cluster, node string, vmid int, size int64, mark string) benchVolume {
	b.Helper()
	pc := c.Proxmox(b)
	if _, err := pveapi.Run(ctx, pc, "POST", "/nodes/"+node+"/qemu", map[string]any{
		"vmid": vmid, "name": fmt.Sprintf("bench%d", vmid), "scsi0": fmt.Sprintf("local-lvm:%g", float64(size)/(1<<30)),
		"tags": mark, // what the agents require of a move's source and target
	}); err != nil {
		b.Fatal(err)
	}
	cfg, err := pveapi.GuestConfig(ctx, pc, node, vmid)
	if err != nil {
		b.Fatal(err)
	}
	volid, _, _ := strings.Cut(cfg.Str("scsi0"), ",")
	storage, _, _ := strings.Cut(volid, ":")
	var v struct{ Path string }
	if err := pc.Get(ctx, "/nodes/"+node+"/storage/"+storage+"/content/"+volid, &v); err != nil {
		b.Fatal(err)
	}
	return benchVolume{volid: volid, path: v.Path}
}

// rawStream returns a function that dials ln with dial and reads what the
// accepting side sends over the new connection (data, then it closes), as
// a move's target reads what its source sends; it returns once all of
// data arrived. The reader reads a chunk at a time, as the move's does.
func rawStream(b *testing.B, ln net.Listener, data []byte, dial func() (net.Conn, error)) func() {
	b.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				_, _ = c.Write(data)
				c.Close()
			}()
		}
	}()
	buf := make([]byte, 1<<20)
	return func() {
		c, err := dial()
		if err != nil {
			b.Fatal(err)
		}
		defer c.Close()
		var n int
		for {
			k, err := c.Read(buf)
			n += k
			if err == io.EOF {
				break
			}
			if err != nil {
				b.Fatal(err)
			}
		}
		if n != len(data) {
			b.Fatalf("received %d bytes of %d", n, len(data))
		}
	}
}

// rawPort is the port of the raw stream between the agents' mesh nodes:
// the one after the migration port.
var rawPort = strconv.Itoa(agent.DefaultPort + 2)

// benchPolicy is the mesh policy (meshcontrol.Policy) with rawPort opened
// between agents as the migration port is.
var benchPolicy = fmt.Sprintf(`{
  "tagOwners": {%[1]q: [], %[2]q: []},
  "acls": [
    {"action": "accept", "src": [%[1]q], "dst": ["%[2]s:%[3]d"]},
    {"action": "accept", "src": [%[2]q], "dst": ["%[2]s:%[4]d", "%[2]s:%[5]s"]}
  ]
}`, meshcontrol.TagOrchestrator, meshcontrol.TagAgent, agent.DefaultPort, agent.DefaultPort+1, rawPort)
