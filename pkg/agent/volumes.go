package agent

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/flexplane/flexplane/pkg/mesh/meshnode"
	agentv1 "github.com/flexplane/flexplane/proto/flexplane/agent/v1"
)

// Moving disks between zones. The orchestrator asks the source agent to
// offer a volume to one named agent (OfferVolume: a random one-time
// capability, bound to the volume and the reader, that expires), and the
// target agent to pull it (PullVolume): the target dials the source's
// migration port over the mesh, which only agents may reach, presents the
// capability and writes what it reads into a volume it allocated, then
// checks the SHA-256 of what it wrote against the source's. Both read and
// write the volume's path as the local Proxmox names it: no Proxmox
// credential or API crosses a cluster, and the orchestrator never sees the
// bytes.

// chunkSize is the size of a ReadVolume message's data.
const chunkSize = 1 << 20

// streamWindow is the flow-control window of a volume's stream (both ends).
const streamWindow = 8 * chunkSize

// DefaultOfferTTL is how long an offer stands unless OfferVolume says.
const DefaultOfferTTL = 10 * time.Minute

// offer is a volume one agent may read once.
type offer struct {
	volume  string
	path    string
	size    int64
	reader  string // mesh name
	expires time.Time
}

// offers are the open offers of an agent.
type offers struct {
	mu sync.Mutex
	m  map[string]offer // capability -> offer; protected by mu
}

// add registers o and returns its capability.
func (os *offers) add(o offer) string {
	var b [32]byte
	_, _ = rand.Read(b[:])
	capability := hex.EncodeToString(b[:])
	os.mu.Lock()
	defer os.mu.Unlock()
	if os.m == nil {
		os.m = map[string]offer{}
	}
	now := time.Now()
	for k, v := range os.m {
		if now.After(v.expires) {
			delete(os.m, k)
		}
	}
	os.m[capability] = o
	return capability
}

// take consumes the offer of capability if reader may use it.
func (os *offers) take(capability, reader string) (offer, bool) {
	os.mu.Lock()
	defer os.mu.Unlock()
	o, ok := os.m[capability]
	if !ok || o.reader != reader || time.Now().After(o.expires) {
		return offer{}, false
	}
	delete(os.m, capability)
	return o, true
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
	ttl := DefaultOfferTTL
	if req.GetTtlSeconds() > 0 {
		ttl = time.Duration(req.GetTtlSeconds()) * time.Second
	}
	capability := a.offers.add(offer{volume: req.GetVolume(), path: v.Path, size: v.Size, reader: req.GetReader(), expires: time.Now().Add(ttl)})
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
	o, ok := a.offers.take(req.GetCapability(), who.Name)
	if !ok {
		a.log.Warn("agent: refused a volume read", "caller", who.Name)
		return status.Error(codes.PermissionDenied, "agent: no such offer for this caller")
	}
	f, err := os.Open(o.path)
	if err != nil {
		return status.Errorf(codes.Internal, "agent: open volume %s: %v", o.volume, err)
	}
	defer f.Close()
	h := sha256.New()
	buf := make([]byte, chunkSize)
	zero := make([]byte, chunkSize)
	var off int64
	start := time.Now()
	for off < o.size {
		if err := pace(stream.Context(), start, off, a.cfg.MigrationBandwidth); err != nil {
			return status.FromContextError(err).Err()
		}
		n, err := io.ReadFull(f, buf[:min(int64(chunkSize), o.size-off)])
		if n > 0 {
			h.Write(buf[:n])
			if !bytes.Equal(buf[:n], zero[:n]) {
				if err := stream.Send(&agentv1.ReadVolumeResponse{Offset: uint64(off), Data: buf[:n]}); err != nil {
					return err
				}
			}
			off += int64(n)
		}
		if err != nil {
			return status.Errorf(codes.Internal, "agent: read volume %s at %d: %v", o.volume, off, err)
		}
	}
	a.log.Info("agent: volume read", "volume", o.volume, "reader", who.Name, "bytes", off)
	return stream.Send(&agentv1.ReadVolumeResponse{Size: uint64(o.size), Sha256: hex.EncodeToString(h.Sum(nil))})
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
	f, err := os.OpenFile(dst.Path, os.O_WRONLY, 0)
	if err != nil {
		return status.Errorf(codes.Internal, "agent: open volume %s: %v", req.GetVolume(), err)
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
	rd, err := agentv1.NewMigrationServiceClient(conn).ReadVolume(ctx, &agentv1.ReadVolumeRequest{Capability: req.GetCapability()})
	if err != nil {
		return status.Errorf(codes.Unavailable, "agent: read from source: %v", err)
	}
	var done int64
	last := time.Now()
	for {
		c, err := rd.Recv()
		if err != nil {
			if errors.Is(err, io.EOF) {
				return status.Error(codes.DataLoss, "agent: the source ended without its checksum")
			}
			return status.Errorf(status.Code(err), "agent: read from source: %v", err)
		}
		if c.GetSha256() != "" {
			size := int64(c.GetSize())
			if size > dst.Size {
				return status.Errorf(codes.FailedPrecondition, "agent: volume %s (%d bytes) is smaller than the source (%d)", req.GetVolume(), dst.Size, size)
			}
			if err := f.Sync(); err != nil {
				return status.Errorf(codes.Internal, "agent: sync volume: %v", err)
			}
			sum, err := fileSHA256(dst.Path, size)
			if err != nil {
				return status.Errorf(codes.Internal, "agent: checksum volume: %v", err)
			}
			if sum != c.GetSha256() {
				return status.Errorf(codes.DataLoss, "agent: volume %s: checksum %s, the source's %s", req.GetVolume(), sum, c.GetSha256())
			}
			a.log.Info("agent: volume pulled", "volume", req.GetVolume(), "bytes", size, "sha256", sum)
			return stream.Send(&agentv1.PullVolumeResponse{BytesDone: uint64(size), BytesTotal: uint64(size), Sha256: sum})
		}
		off := int64(c.GetOffset())
		if off < 0 || off+int64(len(c.GetData())) > dst.Size {
			return status.Errorf(codes.FailedPrecondition, "agent: the source's data at %d does not fit volume %s", off, req.GetVolume())
		}
		if _, err := f.WriteAt(c.GetData(), off); err != nil {
			return status.Errorf(codes.Internal, "agent: write volume: %v", err)
		}
		done = off + int64(len(c.GetData()))
		if time.Since(last) >= progressEvery {
			last = time.Now()
			if err := stream.Send(&agentv1.PullVolumeResponse{BytesDone: uint64(done), BytesTotal: uint64(dst.Size)}); err != nil {
				return err
			}
		}
	}
}

// fileSHA256 is the SHA-256 of the first size bytes of path.
func fileSHA256(path string, size int64) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, io.LimitReader(f, size)); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// caller identifies the mesh peer of a call.
func (a *Agent) caller(ctx context.Context) (meshnode.Peer, error) {
	p, ok := peer.FromContext(ctx)
	if !ok || p.Addr == nil {
		return meshnode.Peer{}, status.Error(codes.PermissionDenied, "agent: caller unknown")
	}
	who, err := a.node.WhoIs(ctx, p.Addr.String())
	if err != nil {
		return meshnode.Peer{}, status.Error(codes.PermissionDenied, "agent: caller is not a known mesh node")
	}
	return who, nil
}

// MigrationAddr is the agent's migration port on the mesh (ip:port).
func (a *Agent) MigrationAddr() string {
	return net.JoinHostPort(a.node.Addr().String(), strconv.Itoa(int(a.cfg.MigrationPort)))
}
