package agent

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime/multipart"
	"net/http"
	"net/url"
	"regexp"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	agentv1 "github.com/flexplane/flexplane/proto/flexplane/agent/v1"
)

// Uploads. A tenant's image reaches a node's storage through the agent:
// the orchestrator streams the file's bytes (UploadVolume) and the agent
// forwards them as they come, as the multipart body of one POST to the
// local Proxmox's upload endpoint, with its own token. The agent holds at
// most one chunk of the file; it hashes what it forwards, and a stream of
// another length than announced (a client that went away, a cut
// connection) aborts the POST, so Proxmox stores nothing. The same
// forwarding (store) serves the data listener's direct uploads
// (dataplane.go), which carry the bytes beside the mesh.

// MaxUploadBytes bounds a file UploadVolume takes.
const MaxUploadBytes = 64 << 30

// uploadExt is the file name each uploadable content type takes.
var uploadExt = map[string]*regexp.Regexp{
	"import": regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,127}\.(qcow2|raw|img)$`),
	"iso":    regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,127}\.iso$`),
}

// uploadTarget is where an upload goes: UploadVolume's first message,
// or what an upload ticket is bound to.
type uploadTarget struct {
	storage, content, filename string
	// size is the file's exact size, 0 when unknown; maxSize the most
	// bytes the upload may carry, 0 for MaxUploadBytes.
	size, maxSize int64
}

// volume is the Proxmox volume id the file gets.
func (t uploadTarget) volume() string { return t.storage + ":" + t.content + "/" + t.filename }

// limit is the most bytes the upload may carry: its exact size when
// known, else its bound.
func (t uploadTarget) limit() int64 {
	switch {
	case t.size > 0:
		return t.size
	case t.maxSize > 0:
		return t.maxSize
	}
	return MaxUploadBytes
}

// check validates an upload's target.
func (t uploadTarget) check() error {
	if !segmentName(t.storage) {
		return status.Errorf(codes.InvalidArgument, "agent: %q is not a storage id", t.storage)
	}
	re := uploadExt[t.content]
	if re == nil {
		return status.Errorf(codes.InvalidArgument, "agent: content %q is not import or iso", t.content)
	}
	if !re.MatchString(t.filename) || strings.Contains(t.filename, "..") {
		return status.Errorf(codes.InvalidArgument, "agent: %q is not a file name of %s content", t.filename, t.content)
	}
	if t.size < 0 || t.size > MaxUploadBytes {
		return status.Errorf(codes.InvalidArgument, "agent: size %d is not between 0 (unknown) and %d bytes", t.size, int64(MaxUploadBytes))
	}
	if t.maxSize < 0 || t.maxSize > MaxUploadBytes || (t.maxSize > 0 && t.size > t.maxSize) {
		return status.Errorf(codes.InvalidArgument, "agent: bound %d is not between 0 (the agent's) and %d bytes, nor under the size %d", t.maxSize, int64(MaxUploadBytes), t.size)
	}
	return nil
}

// errProxmoxStopped is Proxmox no longer reading an upload's body.
var errProxmoxStopped = errors.New("proxmox stopped reading the upload")

// errShortUpload is a stream of another length than it announced, or
// past its bound.
var errShortUpload = errors.New("upload of another length than announced")

// The paths an upload's bytes come by (store's via).
const (
	viaMesh = "mesh"
	viaData = "data listener"
)

// uploaded is what a stored upload reports.
type uploaded struct {
	upid, sha256 string
	size         int64
}

// UploadVolume implements the agent's UploadVolume RPC.
func (s *service) UploadVolume(stream agentv1.AgentService_UploadVolumeServer) error {
	first, err := stream.Recv()
	if err != nil {
		return status.Errorf(codes.InvalidArgument, "agent: upload: no first message: %v", err)
	}
	t := uploadTarget{storage: first.GetStorage(), content: first.GetContent(), filename: first.GetFilename(), size: first.GetSize()}
	if err := t.check(); err != nil {
		return err
	}
	up, err := s.store(stream.Context(), t, &streamReader{stream: stream, buf: first.GetData()}, viaMesh)
	if err != nil {
		return err
	}
	return stream.SendAndClose(&agentv1.UploadVolumeResponse{Upid: up.upid, Sha256: up.sha256, Size: up.size, Volume: t.volume()})
}

// streamReader reads the data of an UploadVolume stream's messages.
type streamReader struct {
	stream agentv1.AgentService_UploadVolumeServer
	buf    []byte
}

func (r *streamReader) Read(p []byte) (int, error) {
	for len(r.buf) == 0 {
		msg, err := r.stream.Recv()
		if err != nil {
			return 0, err
		}
		r.buf = msg.GetData()
	}
	n := copy(p, r.buf)
	r.buf = r.buf[n:]
	return n, nil
}

// store forwards what r reads (a checked target's file, until io.EOF) as
// the file part of one multipart POST to the local Proxmox's upload
// endpoint, hashing it on the way. A read error, or a file of another
// length than t's size or past its bound, aborts the POST: Proxmox
// stores nothing. Its errors are gRPC statuses; via names the path the
// bytes came by, for the log.
func (s *service) store(ctx context.Context, t uploadTarget, r io.Reader, via string) (uploaded, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	pr, pw := io.Pipe()
	mw := multipart.NewWriter(pw)
	path := "/nodes/" + s.a.cfg.NodeName + "/storage/" + url.PathEscape(t.storage) + "/upload"
	type answer struct {
		resp pveResponse
		err  error
	}
	done := make(chan answer, 1)
	go func() {
		resp, err := s.a.pve.send(ctx, http.MethodPost, path, "", pr, mw.FormDataContentType())
		pr.CloseWithError(err) // unblocks the writer when Proxmox stops reading
		done <- answer{resp, err}
	}()
	h := sha256.New()
	n, err := forward(t, r, mw, h)
	if errors.Is(err, errProxmoxStopped) {
		// Proxmox answered before it read the whole file: say why.
		a := <-done
		if a.err == nil && a.resp.status != http.StatusOK {
			return uploaded{}, status.Errorf(codes.FailedPrecondition, "agent: upload of %s: proxmox answered %d %s", t.filename, a.resp.status, a.resp.reason)
		}
		return uploaded{}, status.Errorf(codes.Unavailable, "agent: upload of %s: %v", t.filename, err)
	}
	if err != nil {
		pw.CloseWithError(err)
		cancel()
		<-done
		s.a.log.Warn("agent: upload aborted", "via", via, "storage", t.storage, "file", t.filename, "bytes", n, "err", err)
		if errors.Is(err, errShortUpload) {
			return uploaded{}, status.Errorf(codes.DataLoss, "agent: upload of %s: %v (size %d)", t.filename, err, t.size)
		}
		if c := status.Code(err); c != codes.Unknown && c != codes.OK {
			return uploaded{}, err
		}
		return uploaded{}, status.Errorf(codes.Aborted, "agent: upload of %s: %v", t.filename, err)
	}
	pw.CloseWithError(mw.Close())
	a := <-done
	if a.err != nil {
		return uploaded{}, status.Errorf(codes.Unavailable, "agent: upload of %s: proxmox: %v", t.filename, a.err)
	}
	if a.resp.status != http.StatusOK {
		return uploaded{}, status.Errorf(codes.FailedPrecondition, "agent: upload of %s: proxmox answered %d %s", t.filename, a.resp.status, a.resp.reason)
	}
	var out struct {
		Data string `json:"data"`
	}
	if err := json.Unmarshal(a.resp.body, &out); err != nil || out.Data == "" {
		return uploaded{}, status.Errorf(codes.Internal, "agent: upload of %s: no task in proxmox's answer", t.filename)
	}
	s.a.log.Info("agent: uploaded", "via", via, "storage", t.storage, "file", t.filename, "bytes", n, "upid", out.Data)
	return uploaded{upid: out.Data, sha256: hex.EncodeToString(h.Sum(nil)), size: n}, nil
}

// forwardBuffer is the size of the reads forward makes.
const forwardBuffer = 256 << 10

// forward writes the form's fields and then what r reads into mw,
// hashing it into h; it returns the number of bytes of the file written,
// and an error when r broke or the file's length is not t's size or
// passes its bound.
func forward(t uploadTarget, r io.Reader, mw *multipart.Writer, h io.Writer) (int64, error) {
	if err := mw.WriteField("content", t.content); err != nil {
		return 0, err
	}
	fw, err := mw.CreateFormFile("filename", t.filename)
	if err != nil {
		return 0, err
	}
	w := io.MultiWriter(fw, h)
	limit := t.limit()
	buf := make([]byte, forwardBuffer)
	var n int64
	for {
		k, rerr := r.Read(buf)
		if n+int64(k) > limit {
			return n, fmt.Errorf("%w: more than %d bytes", errShortUpload, limit)
		}
		if k > 0 {
			if _, err := w.Write(buf[:k]); err != nil {
				return n, fmt.Errorf("%w: %v", errProxmoxStopped, err)
			}
			n += int64(k)
		}
		if errors.Is(rerr, io.EOF) {
			if t.size > 0 && n != t.size {
				return n, fmt.Errorf("%w: it ended at %d", errShortUpload, n)
			}
			return n, nil
		}
		if rerr != nil {
			return n, rerr
		}
	}
}
