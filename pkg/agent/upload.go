package agent

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"io"
	"mime/multipart"
	"net/http"
	"net/url"
	"path/filepath"
	"strings"
	"sync"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/flexplane/flexplane/pkg/agent/privhelper"
	agentv1 "github.com/flexplane/flexplane/proto/flexplane/agent/v1"
)

// Uploads. A tenant's image reaches a node's storage through the agent:
// the orchestrator streams the file's bytes (UploadVolume) and the agent
// stores them as they come, hashing them. Into a file storage (dir, nfs,
// cifs...: its config has a path) the file is written straight into the
// storage's import/ or template/iso/ directory under Config.FileRoot, as
// Proxmox lays them out (privhelper.CreateUpload): by the agent itself
// when it runs without a helper, else by its helper, to which the agent
// streams the bytes over the helper's socket (privhelper
// Client.WriteUpload), and which checks the directory, the name and the
// length again itself. One write of each byte, no TLS hop to Proxmox, no
// spool. Into any other storage, and into a directory whose file system
// neither links files nor renames without replacing, the agent forwards
// the bytes as the multipart body of one POST to the local Proxmox's
// upload endpoint, with its own token. The agent holds at most one chunk
// of the file; a stream of another length than announced (a client that
// went away, a cut connection) stores nothing. The same entry point
// (store) serves the data listener's direct uploads (dataplane.go), which
// carry the bytes beside the mesh.

// MaxUploadBytes bounds a file UploadVolume takes.
const MaxUploadBytes = privhelper.MaxUploadBytes

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
func (t uploadTarget) limit() int64 { return privhelper.UploadLimit(t.size, t.maxSize) }

// check validates an upload's target.
func (t uploadTarget) check() error {
	if !segmentName(t.storage) {
		return status.Errorf(codes.InvalidArgument, "agent: %q is not a storage id", t.storage)
	}
	if err := privhelper.CheckUpload(t.content, t.filename, t.size, t.maxSize); err != nil {
		return status.Error(codes.InvalidArgument, "agent: "+err.Error())
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
// config has a path), it writes the file straight into the storage's
// directory: itself (writeUpload) or, when a helper does the agent's file
// work, through the helper; into any other storage, or a directory that
// links no files, it sends the file as the file part of one multipart
// POST to the local Proxmox's upload endpoint (postUpload). A read error,
// or a file of another length than t's size or past its bound, ends the
// upload with nothing stored. Its errors are gRPC statuses; via names the
// path the bytes came by, for the log.
func (s *service) store(ctx context.Context, t uploadTarget, r io.Reader, via string) (uploaded, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	dir, err := s.a.contentDir(ctx, t.storage, t.content)
	if err != nil {
		return uploaded{}, err
	}
	file := &fileReader{r: r, h: sha256.New(), t: t}
	var upid string
	by := "proxmox" // who wrote the file, for the log
	switch {
	case dir != "" && s.a.helper != nil:
		by = "helper"
		if _, err = s.a.helper.WriteUpload(ctx, dir, t.content, t.filename, t.size, t.maxSize, file); err != nil && !errors.Is(err, privhelper.ErrNoLink) {
			err = helperError("upload of "+t.filename, err)
		}
	case dir != "":
		by = "agent"
		err = writeUpload(dir, t, file)
	}
	if errors.Is(err, privhelper.ErrNoLink) {
		// Refused before the first byte: the file goes to Proxmox whole.
		s.a.log.Warn("agent: upload: the storage's directory neither links files nor renames without replacing; posting the file to proxmox",
			"storage", t.storage, "file", t.filename, "dir", dir, "by", by, "err", err)
		dir, by, err = "", "proxmox", nil
	}
	if dir == "" {
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
	s.a.log.Info("agent: uploaded", "via", via, "by", by, "storage", t.storage, "file", t.filename, "bytes", n, "upid", upid, "dir", dir)
	return uploaded{upid: upid, sha256: hex.EncodeToString(file.h.Sum(nil)), size: n}, nil
}

// writeUpload writes file into dir/<t's file name> in the agent's own
// process (privhelper.CreateUpload: a hidden temporary file named once
// the whole file arrived and is on disk), so that a cut-off upload
// leaves nothing and an existing file of that name is refused
// (ALREADY_EXISTS) and kept as it is, as Proxmox refuses to override one.
// A directory that links no files is privhelper.ErrNoLink, before file
// is read.
func writeUpload(dir string, t uploadTarget, file io.Reader) error {
	exists := func() error {
		return status.Errorf(codes.AlreadyExists, "agent: upload of %s: refusing to override existing file %s", t.filename, filepath.Join(dir, t.filename))
	}
	u, err := privhelper.CreateUpload(dir, t.filename, false)
	switch {
	case errors.Is(err, privhelper.ErrUploadExists):
		return exists()
	case errors.Is(err, privhelper.ErrNoLink):
		return err
	case err != nil:
		return status.Errorf(codes.Internal, "agent: upload of %s: %v", t.filename, err)
	}
	defer u.Close()
	if _, err := io.CopyBuffer(u, file, make([]byte, chunkSize)); err != nil {
		return status.Errorf(codes.Aborted, "agent: upload of %s: %v", t.filename, err)
	}
	if err := u.Commit(); errors.Is(err, privhelper.ErrUploadExists) {
		return exists()
	} else if err != nil {
		return status.Errorf(codes.Internal, "agent: upload of %s: %v", t.filename, err)
	}
	return nil
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
