package agent

import (
	"bytes"
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"io"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/zeebo/blake3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/flexplane/flexplane/pkg/agent/privhelper"
	"github.com/flexplane/flexplane/pkg/mesh/meshnode"
	agentv1 "github.com/flexplane/flexplane/proto/flexplane/agent/v1"
)

// Moving disks between zones. The orchestrator asks the source agent to
// offer a volume to one named agent (OfferVolume: a random one-time
// capability, bound to the volume and the reader, that expires), and the
// target agent to pull it (PullVolume): the target dials the source's
// migration port over the mesh, which only agents may reach, presents the
// capability and writes what it reads into a volume it allocated, then
// checks the checksum of what it wrote against the source's (BLAKE3, or
// SHA-256 with an agent or orchestrator that knows no other; see
// checksumBLAKE3). Both read and write the volume's path as the local
// Proxmox names it: no Proxmox
// credential or API crosses a cluster, and the orchestrator never sees the
// bytes.

// chunkSize is the size of a ReadVolume message's data.
const chunkSize = 1 << 20

// streamWindow is the flow-control window of a volume's stream (both ends).
const streamWindow = 8 * chunkSize

// The checksum algorithms of a volume's copy. BLAKE3 is the one the
// orchestrator asks for: it hashes about 2.4 times as fast as SHA-256 with
// SHA-NI, and every byte of a volume is hashed at both ends. SHA-256 is
// what an orchestrator or agent that names no algorithms
// (PullVolumeRequest and ReadVolumeRequest's checksum_algorithms) uses.
const (
	checksumBLAKE3 = "blake3"
	checksumSHA256 = "sha256"
)

// newChecksum is a hash of algorithm alg, false for one this agent does
// not know.
func newChecksum(alg string) (hash.Hash, bool) {
	switch alg {
	case checksumBLAKE3:
		return blake3.New(), true
	case checksumSHA256:
		return sha256.New(), true
	}
	return nil, false
}

// knownChecksums are the algorithms of wanted (the caller's, preferred
// first) this agent knows, in their order: those a target asks its source
// for. None (a caller that names none reads SHA-256 only) asks for none.
func knownChecksums(wanted []string) []string {
	var out []string
	for _, alg := range wanted {
		if _, ok := newChecksum(alg); ok && !slices.Contains(out, alg) {
			out = append(out, alg)
		}
	}
	return out
}

// chooseChecksum is the first of the reader's algorithms this agent
// knows; SHA-256 (which every agent checks) when it knows none of them.
func chooseChecksum(wanted []string) string {
	for _, alg := range wanted {
		if _, ok := newChecksum(alg); ok {
			return alg
		}
	}
	return checksumSHA256
}

// Marks of a move across zones, which compute's cross-zone phases set on
// the guests in Proxmox and the agent reads there itself: a volume is
// offered (read) only when it is a disk in the config of a stopped guest
// of this node tagged leavingTag, and written only when it is a disk of a
// stopped guest tagged arrivingTag. The orchestrator cannot name any other
// volume of the node, so it cannot have a raw disk (or a vmstate volume,
// which holds a guest's RAM) read or overwritten. With a helper
// (Config.HelperSocket) the helper checks the marks again in the guest's
// config file before it opens a volume.
const (
	leavingTag  = privhelper.LeavingTag
	arrivingTag = privhelper.ArrivingTag
	outgoingTag = privhelper.OutgoingTag
)

// movingGuest checks that volume is a disk of a stopped guest of this
// node marked tag (leavingTag or arrivingTag) and returns that guest's
// VMID; anything else is FailedPrecondition.
func (a *Agent) movingGuest(ctx context.Context, volume, tag string) (int, error) {
	return a.markedGuest(ctx, volume, tag, false)
}

// readableGuest checks that volume may be read for a copy into another
// zone: a disk of a stopped guest marked leavingTag (a move), or of a
// template marked outgoingTag (a VDC's image staged into another zone by
// the orchestrator's request; a template is never running, and its disks
// are only read). It returns that guest's VMID; anything else is
// FailedPrecondition.
func (a *Agent) readableGuest(ctx context.Context, volume string) (int, error) {
	vmid, err := a.movingGuest(ctx, volume, leavingTag)
	if err == nil {
		return vmid, nil
	}
	if vmid, terr := a.markedGuest(ctx, volume, outgoingTag, true); terr == nil {
		return vmid, nil
	}
	return 0, err
}

// markedGuest checks that volume is a disk of a stopped guest of this
// node marked tag, and a template when template is set, and returns that
// guest's VMID; anything else is FailedPrecondition.
func (a *Agent) markedGuest(ctx context.Context, volume, tag string, template bool) (int, error) {
	var guests []struct {
		VMID   json.Number `json:"vmid"`
		Status string      `json:"status"`
		Tags   string      `json:"tags"`
	}
	if err := a.pveGet(ctx, "/nodes/"+a.cfg.NodeName+"/qemu", &guests); err != nil {
		return 0, err
	}
	for _, g := range guests {
		vmid, err := strconv.Atoi(g.VMID.String())
		if err != nil || !hasTag(g.Tags, tag) {
			continue
		}
		var cfg map[string]any
		if err := a.pveGet(ctx, "/nodes/"+a.cfg.NodeName+"/qemu/"+strconv.Itoa(vmid)+"/config", &cfg); err != nil {
			return 0, err
		}
		tags, _ := cfg["tags"].(string)
		if !hasTag(tags, tag) || !hasDisk(cfg, volume) || (template && fmt.Sprint(cfg["template"]) != "1") {
			continue
		}
		if g.Status != "stopped" {
			return 0, status.Errorf(codes.FailedPrecondition, "agent: volume %s: guest %d is %s, not stopped", volume, vmid, g.Status)
		}
		return vmid, nil
	}
	a.log.Warn("agent: refused a volume of no guest marked for a copy", "volume", volume, "mark", tag)
	return 0, status.Errorf(codes.FailedPrecondition, "agent: volume %s is no disk of a guest of this node marked %s", volume, tag)
}

// pveGet reads path of the local Proxmox API into out (its data).
func (a *Agent) pveGet(ctx context.Context, path string, out any) error {
	resp, err := a.pve.do(ctx, "GET", path, "", nil, "")
	if err != nil {
		return status.Errorf(codes.Unavailable, "agent: proxmox: %v", err)
	}
	if resp.status != 200 {
		return status.Errorf(codes.Unavailable, "agent: proxmox: GET %s: %s", path, resp.reason)
	}
	env := struct {
		Data any `json:"data"`
	}{Data: out}
	if err := json.Unmarshal(resp.body, &env); err != nil {
		return status.Errorf(codes.Internal, "agent: proxmox: GET %s: %v", path, err)
	}
	return nil
}

// hasTag reports whether a Proxmox tag list holds tag.
func hasTag(tags, tag string) bool { return privhelper.HasTag(tags, tag) }

// hasDisk reports whether volume is a disk (not a CD-ROM) of a guest config.
func hasDisk(cfg map[string]any, volume string) bool {
	for k, v := range cfg {
		s, ok := v.(string)
		if !ok {
			continue
		}
		if vol, ok := privhelper.DiskVolume(k, s); ok && vol == volume {
			return true
		}
	}
	return false
}

// DefaultOfferTTL is how long an offer stands unless OfferVolume says.
const DefaultOfferTTL = 10 * time.Minute

// offer is a volume one agent may read once.
type offer struct {
	vmid   int
	volume string
	path   string
	size   int64
	reader string // mesh name
}

// volumeInfo is what the local Proxmox says of a volume of this node.
type volumeInfo struct {
	Path   string `json:"path"`
	Size   int64  `json:"size"`
	Format string `json:"format"`
}

// localVolume reads volume (a Proxmox volume id) of this node.
func (a *Agent) localVolume(ctx context.Context, volume string) (volumeInfo, error) {
	storage, name, ok := strings.Cut(volume, ":")
	if !ok || !segmentName(storage) || name == "" || strings.Contains(name, "..") {
		return volumeInfo{}, status.Errorf(codes.InvalidArgument, "agent: %q is not a volume id", volume)
	}
	path := "/nodes/" + a.cfg.NodeName + "/storage/" + storage + "/content/" + volume
	if !a.policy.allowed("GET", path) {
		return volumeInfo{}, status.Errorf(codes.InvalidArgument, "agent: %q is not a volume id", volume)
	}
	resp, err := a.pve.do(ctx, "GET", path, "", nil, "")
	if err != nil {
		return volumeInfo{}, status.Errorf(codes.Unavailable, "agent: proxmox: %v", err)
	}
	if resp.status != 200 {
		return volumeInfo{}, status.Errorf(codes.NotFound, "agent: volume %s: %s", volume, resp.reason)
	}
	var env struct {
		Data volumeInfo `json:"data"`
	}
	if err := json.Unmarshal(resp.body, &env); err != nil || env.Data.Path == "" {
		return volumeInfo{}, status.Errorf(codes.Internal, "agent: volume %s: no path in Proxmox's answer", volume)
	}
	if env.Data.Format != "raw" {
		return volumeInfo{}, status.Errorf(codes.FailedPrecondition, "agent: volume %s is %s, not raw", volume, env.Data.Format)
	}
	return env.Data, nil
}

// OfferVolume implements agentv1.AgentServiceServer.
func (s *service) OfferVolume(ctx context.Context, req *agentv1.OfferVolumeRequest) (*agentv1.OfferVolumeResponse, error) {
	a := s.a
	if !dnsLabel(req.GetReader()) {
		return nil, status.Error(codes.InvalidArgument, "agent: reader must be an agent's mesh name")
	}
	v, err := a.localVolume(ctx, req.GetVolume())
	if err != nil {
		return nil, err
	}
	vmid, err := a.readableGuest(ctx, req.GetVolume())
	if err != nil {
		return nil, err
	}
	ttl := DefaultOfferTTL
	if req.GetTtlSeconds() > 0 {
		ttl = time.Duration(req.GetTtlSeconds()) * time.Second
	}
	capability, _ := a.offers.add(offer{vmid: vmid, volume: req.GetVolume(), path: v.Path, size: v.Size, reader: req.GetReader()}, time.Now().Add(ttl), 0)
	a.log.Info("agent: volume offered", "volume", req.GetVolume(), "reader", req.GetReader(), "size", v.Size)
	return &agentv1.OfferVolumeResponse{Capability: capability, Size: uint64(v.Size), Addr: a.MigrationAddr()}, nil
}

// migration serves MigrationService.
type migration struct {
	agentv1.UnimplementedMigrationServiceServer
	a *Agent
}

// ReadVolume implements agentv1.MigrationServiceServer.
func (m *migration) ReadVolume(req *agentv1.ReadVolumeRequest, stream grpc.ServerStreamingServer[agentv1.ReadVolumeResponse]) error {
	a := m.a
	who, err := a.caller(stream.Context())
	if err != nil {
		return err
	}
	if !who.HasTag(meshnode.TagAgent) {
		return status.Errorf(codes.PermissionDenied, "agent: caller %s is not %s", who.Name, meshnode.TagAgent)
	}
	o, ok := a.offers.take(req.GetCapability(), func(o offer) bool { return o.reader == who.Name })
	if !ok {
		a.log.Warn("agent: refused a volume read", "caller", who.Name)
		return status.Error(codes.PermissionDenied, "agent: no such offer for this caller")
	}
	// The guest must still be leaving (or its template still marked): a
	// move or a copy undone since the offer ends it.
	if _, err := a.readableGuest(stream.Context(), o.volume); err != nil {
		return err
	}
	f, err := a.openVolume(stream.Context(), o.vmid, o.volume, o.path, false)
	if err != nil {
		return err
	}
	defer f.Close()
	alg := checksumSHA256
	if wanted := req.GetChecksumAlgorithms(); len(wanted) > 0 {
		alg = chooseChecksum(wanted)
		if err := stream.Send(&agentv1.ReadVolumeResponse{ChecksumAlgorithm: alg}); err != nil {
			return err
		}
	}
	h, _ := newChecksum(alg)
	// The volume is read (and hashed) ahead of the stream: the next chunks
	// are ready while one is sent.
	chunks, free := make(chan readChunk, readAhead), make(chan []byte, readAhead+1)
	for range readAhead + 1 {
		free <- make([]byte, chunkSize)
	}
	var sum string
	read := make(chan error, 1)
	var reader sync.WaitGroup
	defer reader.Wait() // before the file closes
	ctx, cancel := context.WithCancel(stream.Context())
	defer cancel()
	reader.Go(func() {
		defer close(chunks)
		s, err := readVolume(ctx, io.NewSectionReader(f, 0, o.size), o.size, a.cfg.MigrationBandwidth, h, chunks, free)
		sum = s
		read <- err
	})
	for c := range chunks {
		err := stream.Send(&agentv1.ReadVolumeResponse{Offset: uint64(c.off), Data: c.data})
		free <- c.data[:cap(c.data)]
		if err != nil {
			return err
		}
	}
	if err := <-read; err != nil {
		if ctx.Err() != nil {
			return status.FromContextError(ctx.Err()).Err()
		}
		return status.Errorf(codes.Internal, "agent: read volume %s: %v", o.volume, err)
	}
	a.log.Info("agent: volume read", "volume", o.volume, "reader", who.Name, "bytes", o.size, "checksum", alg)
	last := &agentv1.ReadVolumeResponse{Size: uint64(o.size), Checksum: sum, ChecksumAlgorithm: alg}
	if alg == checksumSHA256 {
		last.Sha256 = sum // what a reader that names no algorithm reads
	}
	return stream.Send(last)
}

// readAhead is how many chunks a volume's source reads ahead of its stream
// (and its target holds to write).
const readAhead = 4

// readChunk is data of a volume at off.
type readChunk struct {
	off  int64
	data []byte
}

// readVolume reads the first size bytes of r a chunk at a time into
// buffers taken from free, at rate bytes per second at most (0: no
// bound), hashing them all into h and sending those not all zeros to
// chunks; it returns the checksum (hex) of what it read.
func readVolume(ctx context.Context, f io.Reader, size, rate int64, h hash.Hash, chunks chan<- readChunk, free <-chan []byte) (string, error) {
	zero := make([]byte, chunkSize)
	start := time.Now()
	var buf []byte // the buffer being filled; a run of zeros keeps it
	for off := int64(0); off < size; {
		if err := pace(ctx, start, off, rate); err != nil {
			return "", err
		}
		if buf == nil {
			select {
			case buf = <-free:
			case <-ctx.Done():
				return "", ctx.Err()
			}
		}
		n, err := io.ReadFull(f, buf[:min(int64(chunkSize), size-off)])
		if err != nil {
			return "", fmt.Errorf("at %d: %w", off+int64(n), err)
		}
		h.Write(buf[:n])
		// A run of zeros is not sent: the target's volume holds zeros
		// there (its checksum says so).
		if !bytes.Equal(buf[:n], zero[:n]) {
			select {
			case chunks <- readChunk{off: off, data: buf[:n]}:
				buf = nil
			case <-ctx.Done():
				return "", ctx.Err()
			}
		}
		off += int64(n)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// pace waits until reading done bytes since start keeps to rate bytes
// per second (0: no bound), or ctx ends.
func pace(ctx context.Context, start time.Time, done, rate int64) error {
	if rate <= 0 {
		return nil
	}
	wait := time.Until(start.Add(time.Duration(float64(done) / float64(rate) * float64(time.Second))))
	if wait <= 0 {
		return nil
	}
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// A reader pings its source after pullPingTime without a word and gives
// up pullPingTimeout later: a source that vanished mid-copy (its node lost
// power, the link between the zones cut) ends the read instead of leaving
// it waiting forever. The source pings its reader likewise.
const (
	pullPingTime    = 5 * time.Second
	pullPingTimeout = 5 * time.Second
)

// progressEvery is how often PullVolume reports progress.
const progressEvery = 200 * time.Millisecond

// PullVolume implements agentv1.AgentServiceServer.
func (s *service) PullVolume(req *agentv1.PullVolumeRequest, stream grpc.ServerStreamingServer[agentv1.PullVolumeResponse]) error {
	a := s.a
	ctx := stream.Context()
	host, port, err := net.SplitHostPort(req.GetSourceAddr())
	if err != nil || net.ParseIP(host) == nil || port == "" {
		return status.Error(codes.InvalidArgument, "agent: source_addr must be a mesh ip:port")
	}
	dst, err := a.localVolume(ctx, req.GetVolume())
	if err != nil {
		return err
	}
	vmid, err := a.movingGuest(ctx, req.GetVolume(), arrivingTag)
	if err != nil {
		return err
	}
	f, err := a.openVolume(ctx, vmid, req.GetVolume(), dst.Path, true) // read too: the runs the source did not send are hashed as f holds them
	if err != nil {
		return err
	}
	defer f.Close()
	conn, err := grpc.NewClient("passthrough:///"+req.GetSourceAddr(),
		grpc.WithTransportCredentials(insecure.NewCredentials()), // WireGuard encrypts and authenticates the mesh
		grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) { return a.node.Dial(ctx, "tcp", addr) }),
		grpc.WithKeepaliveParams(keepalive.ClientParameters{Time: pullPingTime, Timeout: pullPingTimeout, PermitWithoutStream: true}),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(chunkSize+64<<10)),
		// Windows of several chunks: the source never waits for the window to
		// open again after each chunk on a path of mesh latency.
		grpc.WithInitialWindowSize(streamWindow), grpc.WithInitialConnWindowSize(streamWindow),
		grpc.WithReadBufferSize(chunkSize), grpc.WithWriteBufferSize(chunkSize))
	if err != nil {
		return status.Errorf(codes.Internal, "agent: dial source: %v", err)
	}
	defer conn.Close()
	rd, err := agentv1.NewMigrationServiceClient(conn).ReadVolume(ctx, &agentv1.ReadVolumeRequest{Capability: req.GetCapability(), ChecksumAlgorithms: knownChecksums(req.GetChecksumAlgorithms())})
	if err != nil {
		return status.Errorf(codes.Unavailable, "agent: read from source: %v", err)
	}
	recv := func() (*agentv1.ReadVolumeResponse, error) {
		c, err := rd.Recv()
		if err != nil {
			if errors.Is(err, io.EOF) {
				return nil, status.Error(codes.DataLoss, "agent: the source ended without its checksum")
			}
			return nil, status.Errorf(status.Code(err), "agent: read from source: %v", err)
		}
		return c, nil
	}
	// A source that knows checksum_algorithms names the one it uses
	// first; one that does not sends data (or its end) at once and uses
	// SHA-256.
	alg := checksumSHA256
	next, err := recv()
	if err != nil {
		return err
	}
	if a := next.GetChecksumAlgorithm(); a != "" && len(next.GetData()) == 0 && next.GetChecksum() == "" && next.GetSha256() == "" {
		alg, next = a, nil
	}
	h, ok := newChecksum(alg)
	if !ok {
		return status.Errorf(codes.FailedPrecondition, "agent: the source checksums with %q, which this agent does not know", alg)
	}
	// What arrives is written (and hashed) by a writer of its own, so that
	// the stream is read on while a chunk goes to disk.
	w := &volumeWriter{f: f, h: h, chunks: make(chan *agentv1.ReadVolumeResponse, readAhead), done: make(chan error, 1)}
	go w.run()
	defer w.stop()
	last, end := time.Now(), int64(0)
	for {
		c := next
		if next = nil; c == nil {
			if c, err = recv(); err != nil {
				return err
			}
		}
		if want := cmp.Or(c.GetChecksum(), c.GetSha256()); want != "" {
			if got := cmp.Or(c.GetChecksumAlgorithm(), checksumSHA256); got != alg {
				return status.Errorf(codes.DataLoss, "agent: the source's checksum is %s, its stream's %s", got, alg)
			}
			size := int64(c.GetSize())
			if size > dst.Size {
				return status.Errorf(codes.FailedPrecondition, "agent: volume %s (%d bytes) is smaller than the source (%d)", req.GetVolume(), dst.Size, size)
			}
			if err := w.stop(); err != nil {
				return status.Errorf(codes.Internal, "agent: write volume: %v", err)
			}
			// The rest of the volume (after the last data) is hashed as it
			// is on disk; then all of it is made durable.
			if err := w.hashTo(size); err != nil {
				return status.Errorf(codes.Internal, "agent: checksum volume: %v", err)
			}
			if err := f.Sync(); err != nil {
				return status.Errorf(codes.Internal, "agent: sync volume: %v", err)
			}
			sum := hex.EncodeToString(w.h.Sum(nil))
			if sum != want {
				return status.Errorf(codes.DataLoss, "agent: volume %s: %s checksum %s, the source's %s", req.GetVolume(), alg, sum, want)
			}
			a.log.Info("agent: volume pulled", "volume", req.GetVolume(), "bytes", size, "checksum", alg, "sum", sum)
			done := &agentv1.PullVolumeResponse{BytesDone: uint64(size), BytesTotal: uint64(size), Checksum: sum, ChecksumAlgorithm: alg}
			if alg == checksumSHA256 {
				done.Sha256 = sum // what an orchestrator that knows no other field reads
			}
			return stream.Send(done)
		}
		off := int64(c.GetOffset())
		if off < end || off+int64(len(c.GetData())) > dst.Size {
			return status.Errorf(codes.FailedPrecondition, "agent: the source's data at %d does not follow its data before or does not fit volume %s", off, req.GetVolume())
		}
		end = off + int64(len(c.GetData()))
		select {
		case w.chunks <- c:
		case err := <-w.done:
			w.done <- err
			return status.Errorf(codes.Internal, "agent: write volume: %v", err)
		}
		if time.Since(last) >= progressEvery {
			last = time.Now()
			if err := stream.Send(&agentv1.PullVolumeResponse{BytesDone: uint64(w.written.Load()), BytesTotal: uint64(dst.Size)}); err != nil {
				return err
			}
		}
	}
}

// writebackEvery is how much a volume's target writes between starting the
// writeback of what it wrote (so that the sync at the end waits little).
const writebackEvery = 32 << 20

// volumeWriter writes a volume's data, in order of offset, into f and
// hashes all of f up to the end of the data: the data as it writes it,
// the runs between (which the source did not send: zeros) as f holds them.
type volumeWriter struct {
	f      volumeFile
	h      hash.Hash // of f's first hashed bytes; the writer's until done
	hashed int64
	// written is the end of the data written so far.
	written  atomic.Int64
	flushed  int64 // where the last writeback started
	chunks   chan *agentv1.ReadVolumeResponse
	done     chan error // the writer's end: one error (or nil)
	stopOnce sync.Once
	err      error
}

func (w *volumeWriter) run() {
	for c := range w.chunks {
		if err := w.write(int64(c.GetOffset()), c.GetData()); err != nil {
			w.done <- err
			for range w.chunks { // drain: the reader stops on the error
			}
			return
		}
	}
	w.done <- nil
}

func (w *volumeWriter) write(off int64, data []byte) error {
	if err := w.hashTo(off); err != nil {
		return err
	}
	if _, err := w.f.WriteAt(data, off); err != nil {
		return err
	}
	w.h.Write(data)
	w.hashed = off + int64(len(data))
	w.written.Store(w.hashed)
	if w.hashed-w.flushed >= writebackEvery {
		if f, ok := w.f.(*os.File); ok {
			startWriteback(f, w.flushed, w.hashed-w.flushed)
		}
		w.flushed = w.hashed
	}
	return nil
}

// hashTo hashes f from where the hash is to end, as f holds it.
func (w *volumeWriter) hashTo(end int64) error {
	if end <= w.hashed {
		return nil
	}
	if _, err := io.CopyBuffer(w.h, io.NewSectionReader(w.f, w.hashed, end-w.hashed), make([]byte, chunkSize)); err != nil {
		return err
	}
	w.hashed = end
	return nil
}

// stop ends the writer once it wrote what it was given and returns its
// error; the hash is the caller's after it.
func (w *volumeWriter) stop() error {
	w.stopOnce.Do(func() {
		close(w.chunks)
		w.err = <-w.done
	})
	return w.err
}

// volumeFile is an open volume: the agent's own file, or one its helper
// opened (privhelper.Volume).
type volumeFile interface {
	io.ReaderAt
	io.WriterAt
	Sync() error
	Close() error
}

// openVolume opens path, volume of guest vmid, for reading or also for
// writing: through the helper when the agent has one (which checks the
// guest's mark again itself), else in the agent's own process.
func (a *Agent) openVolume(ctx context.Context, vmid int, volume, path string, write bool) (volumeFile, error) {
	if a.helper != nil {
		v, err := a.helper.OpenVolume(ctx, uint32(vmid), volume, path, write)
		if err != nil {
			a.log.Warn("agent: the helper did not open a volume", "volume", volume, "err", err)
			return nil, helperError("open volume "+volume, err)
		}
		return v, nil
	}
	flag := os.O_RDONLY
	if write {
		flag = os.O_RDWR
	}
	f, err := os.OpenFile(path, flag, 0)
	if err != nil {
		return nil, status.Errorf(codes.Internal, "agent: open volume %s: %v", volume, err)
	}
	return f, nil
}

// caller identifies the mesh peer of a call.
func (a *Agent) caller(ctx context.Context) (meshnode.Peer, error) {
	p, ok := peer.FromContext(ctx)
	if !ok || p.Addr == nil {
		return meshnode.Peer{}, status.Error(codes.PermissionDenied, "agent: caller unknown")
	}
	who, err := a.node.WhoIs(ctx, p.Addr.String())
	if err != nil {
		// The caller learns only that it was refused; why (a peer not in
		// this node's view, or the lookup cut short by the call's
		// deadline) is the agent's log's.
		a.log.Warn("agent: refused a caller its mesh node could not identify", "addr", p.Addr.String(), "err", err)
		// The caller reached this node through its tunnels, so the
		// control server told the node of it: a map without it is
		// stale (see meshnode.Node.ResyncMap, at most every 30 s). A
		// lookup cut short says nothing of the map: a loaded node is
		// not given a whole map to apply on top.
		if !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded) {
			go a.resyncMap()
		}
		return meshnode.Peer{}, status.Error(codes.PermissionDenied, "agent: caller is not a known mesh node")
	}
	return who, nil
}

// resyncMap asks the control server for the agent's whole map of the mesh
// again.
func (a *Agent) resyncMap() {
	if _, err := a.node.ResyncMap(context.Background()); err != nil {
		a.log.Warn("agent: could not ask for the whole map of the mesh again", "err", err)
	}
}

// MigrationAddr is the agent's migration port on the mesh (ip:port).
func (a *Agent) MigrationAddr() string {
	return net.JoinHostPort(a.node.Addr().String(), strconv.Itoa(int(a.cfg.MigrationPort)))
}
