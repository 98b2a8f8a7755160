package agent

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"io"
	"io/fs"
	"mime/multipart"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	agentv1 "github.com/flexplane/flexplane/proto/flexplane/agent/v1"
)

// Uploads. A tenant's image reaches a node's storage through the agent:
// the orchestrator streams the file's bytes (UploadVolume) and the agent
// stores them as they come, hashing them. Into a file storage (dir, nfs,
// cifs...: its config has a path) the agent writes the file itself, into
// the storage's import/ or template/iso/ directory under Config.FileRoot,
// as Proxmox lays them out: one write of each byte, no TLS hop to
// Proxmox, no spool. Into any other storage, and when a helper does the
// agent's file work, it forwards the bytes as the multipart body of one
// POST to the local Proxmox's upload endpoint, with its own token. The
// agent holds at most one chunk of the file; a stream of another length
// than announced (a client that went away, a cut connection) stores
// nothing. The same entry point (store) serves the data listener's direct
// uploads (dataplane.go), which carry the bytes beside the mesh.

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

// errShortUpload is a stream of another length than it announced, or
// past its bound.
var errShortUpload = errors.New("upload of another length than announced")

// The paths an upload's bytes come by (store's via).
const (
	viaMesh = "mesh"
	viaData = "data listener"
)

// uploaded is what a stored upload reports: upid is the Proxmox task
// that stores the file, "" when the agent wrote it itself (it is then
// stored).
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

// store stores what r reads (a checked target's file, until io.EOF) on
// this node, hashing it on the way. Into a file storage (one whose
// config has a path), when the agent writes files itself (no helper), it
// writes the file straight into the storage's directory (writeUpload);
// into any other storage, it sends the file as the file part of one
// multipart POST to the local Proxmox's upload endpoint (postUpload). A
// read error, or a file of another length than t's size or past its
// bound, ends the upload with nothing stored. Its errors are gRPC
// statuses; via names the path the bytes came by, for the log.
func (s *service) store(ctx context.Context, t uploadTarget, r io.Reader, via string) (uploaded, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	dir := ""
	if s.a.helper == nil {
		var err error
		if dir, err = s.a.contentDir(ctx, t.storage, t.content); err != nil {
			return uploaded{}, err
		}
	}
	file := &fileReader{r: r, h: sha256.New(), t: t}
	var upid string
	var err error
	if dir != "" {
		err = writeUpload(dir, t, file)
	} else {
		upid, err = s.postUpload(ctx, t, file)
	}
	// The transport may go on reading the body after it answered: stop
	// it, so that r is not read after store returns.
	n, rerr := file.stop()
	if rerr != nil {
		s.a.log.Warn("agent: upload aborted", "via", via, "storage", t.storage, "file", t.filename, "bytes", n, "err", rerr)
		if errors.Is(rerr, errShortUpload) {
			return uploaded{}, status.Errorf(codes.DataLoss, "agent: upload of %s: %v (size %d)", t.filename, rerr, t.size)
		}
		if c := status.Code(rerr); c != codes.Unknown && c != codes.OK {
			return uploaded{}, rerr
		}
		return uploaded{}, status.Errorf(codes.Aborted, "agent: upload of %s: %v", t.filename, rerr)
	}
	if err != nil {
		return uploaded{}, err
	}
	if !file.ended() {
		return uploaded{}, status.Errorf(codes.Internal, "agent: upload of %s: stored before the file's end", t.filename)
	}
	s.a.log.Info("agent: uploaded", "via", via, "storage", t.storage, "file", t.filename, "bytes", n, "upid", upid, "dir", dir)
	return uploaded{upid: upid, sha256: hex.EncodeToString(file.h.Sum(nil)), size: n}, nil
}

// uploadMode is the mode of an uploaded file, as Proxmox's upload leaves
// it.
const uploadMode = 0o644

// writeUpload writes file into dir/<t's file name>: into a new temporary
// file of dir (hidden, of no content's extension), linked under its name
// once the whole file arrived, so that a cut-off upload leaves nothing
// and an existing file of that name is refused (ALREADY_EXISTS) and kept
// as it is, as Proxmox refuses to override one. The file is on disk
// (fsync) before writeUpload returns.
func writeUpload(dir string, t uploadTarget, file io.Reader) error {
	fail := func(err error) error {
		return status.Errorf(codes.Internal, "agent: upload of %s: %v", t.filename, err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fail(err)
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		return fail(err)
	}
	defer root.Close()
	if _, err := root.Lstat(t.filename); err == nil {
		return status.Errorf(codes.AlreadyExists, "agent: upload of %s: refusing to override existing file %s", t.filename, filepath.Join(dir, t.filename))
	}
	var nonce [8]byte
	_, _ = rand.Read(nonce[:])
	tmp := ".fp-upload-" + hex.EncodeToString(nonce[:]) + ".part"
	f, err := root.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, uploadMode)
	if err != nil {
		return fail(err)
	}
	defer root.Remove(tmp) // linked under its name, or nothing
	w := &writebackFile{f: f}
	_, err = io.CopyBuffer(w, file, make([]byte, chunkSize))
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return status.Errorf(codes.Aborted, "agent: upload of %s: %v", t.filename, err)
	}
	// The file's mode is uploadMode whatever the process's umask.
	if err := root.Chmod(tmp, uploadMode); err != nil {
		return fail(err)
	}
	// A link never replaces a file: of two uploads of one name, one wins.
	if err := root.Link(tmp, t.filename); err != nil {
		if errors.Is(err, fs.ErrExist) {
			return status.Errorf(codes.AlreadyExists, "agent: upload of %s: refusing to override existing file %s", t.filename, filepath.Join(dir, t.filename))
		}
		return fail(err)
	}
	return nil
}

// writebackFile writes to f, starting the writeback of what it wrote
// every writebackEvery bytes, so that the fsync at the end waits for
// little. It hides f's ReadFrom, so that io.CopyBuffer uses its buffer.
type writebackFile struct {
	f                *os.File
	written, flushed int64
}

func (w *writebackFile) Write(p []byte) (int, error) {
	n, err := w.f.Write(p)
	w.written += int64(n)
	if w.written-w.flushed >= writebackEvery {
		startWriteback(w.f, w.flushed, w.written-w.flushed)
		w.flushed = w.written
	}
	return n, err
}

// postUpload sends file as the file part of one multipart POST to the
// local Proxmox's upload endpoint and returns the task that stores it.
// The request's body reads file itself (no pipe, no copy of its own):
// the form's head, the file, the form's end. A read error aborts the
// POST: Proxmox stores nothing.
func (s *service) postUpload(ctx context.Context, t uploadTarget, file *fileReader) (string, error) {
	var head bytes.Buffer
	mw := multipart.NewWriter(&head)
	if err := mw.WriteField("content", t.content); err != nil {
		return "", status.Errorf(codes.Internal, "agent: upload of %s: %v", t.filename, err)
	}
	if _, err := mw.CreateFormFile("filename", t.filename); err != nil {
		return "", status.Errorf(codes.Internal, "agent: upload of %s: %v", t.filename, err)
	}
	path := "/nodes/" + s.a.cfg.NodeName + "/storage/" + url.PathEscape(t.storage) + "/upload"
	ctype := mw.FormDataContentType()
	// The form's end (what mw.Close writes), read once the file ended as
	// it should.
	tail := strings.NewReader("\r\n--" + mw.Boundary() + "--\r\n")
	body := io.MultiReader(&head, file, tail)
	resp, err := s.a.pve.send(ctx, http.MethodPost, path, "", body, ctype)
	if err != nil {
		return "", status.Errorf(codes.Unavailable, "agent: upload of %s: proxmox: %v", t.filename, err)
	}
	if resp.status != http.StatusOK {
		return "", status.Errorf(codes.FailedPrecondition, "agent: upload of %s: proxmox answered %d %s", t.filename, resp.status, resp.reason)
	}
	var out struct {
		Data string `json:"data"`
	}
	if err := json.Unmarshal(resp.body, &out); err != nil || out.Data == "" {
		return "", status.Errorf(codes.Internal, "agent: upload of %s: no task in proxmox's answer", t.filename)
	}
	return out.Data, nil
}

// errStoreEnded is a read of an upload's file after store returned.
var errStoreEnded = errors.New("the upload has ended")

// fileReader is the file part of an upload's body: it reads r, hashing
// what it reads into h, until io.EOF, which it passes on only when the
// file has its target's size; a file longer than the target's limit, or
// shorter than its size, ends in errShortUpload, and r's errors are kept.
// Once stopped, it reads r no more.
type fileReader struct {
	mu      sync.Mutex
	r       io.Reader // protected by mu
	h       hash.Hash // protected by mu
	t       uploadTarget
	n       int64 // protected by mu
	err     error // the first error other than io.EOF; protected by mu
	eof     bool  // protected by mu
	stopped bool  // protected by mu
}

func (f *fileReader) Read(p []byte) (int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	switch {
	case f.stopped:
		return 0, errStoreEnded
	case f.err != nil:
		return 0, f.err
	case f.eof:
		return 0, io.EOF
	}
	k, err := f.r.Read(p)
	if f.n+int64(k) > f.t.limit() {
		f.err = fmt.Errorf("%w: more than %d bytes", errShortUpload, f.t.limit())
		return 0, f.err
	}
	f.h.Write(p[:k])
	f.n += int64(k)
	switch {
	case errors.Is(err, io.EOF) && f.t.size > 0 && f.n != f.t.size:
		f.err = fmt.Errorf("%w: it ended at %d", errShortUpload, f.n)
		return k, f.err
	case errors.Is(err, io.EOF):
		f.eof = true
	case err != nil:
		f.err = err
	}
	return k, err
}

// stop ends the reads of r; it returns the bytes read and r's error.
func (f *fileReader) stop() (int64, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.stopped = true
	return f.n, f.err
}

// ended reports whether the file was read to its end.
func (f *fileReader) ended() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.eof
}
