package privhelper

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"regexp"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	helperv1 "github.com/flexplane/flexplane/proto/flexplane/helper/v1"
)

// Uploads. A tenant's image is written into a file storage's import or
// template/iso directory as a new hidden temporary file, linked under its
// name once all its bytes arrived and are on disk: a cut-off upload
// leaves nothing, and an existing file of that name is never replaced.
// The agent writes it so itself when it runs without a helper; with one,
// the helper writes it (WriteUpload), the bytes coming over its socket,
// and checks the directory, the name and the length itself. Both use
// CheckUpload and CreateUpload.

// MaxUploadBytes bounds an uploaded file.
const MaxUploadBytes = 64 << 30

// UploadMode is an uploaded file's mode, as Proxmox's upload leaves it.
const UploadMode = 0o644

// DefaultUploadDirs are the directories of a stock node's storage local
// that uploads may be written into.
var DefaultUploadDirs = []string{"/var/lib/vz/import", "/var/lib/vz/template/iso"}

// uploadName is the file name each uploadable content takes.
var uploadName = map[string]*regexp.Regexp{
	"import": regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,127}\.(qcow2|raw|img)$`),
	"iso":    regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,127}\.iso$`),
}

// UploadSubdir is the directory of a file storage that holds content
// (import or iso) as Proxmox lays it out, "" for another content.
func UploadSubdir(content string) string {
	switch content {
	case "import":
		return "import"
	case "iso":
		return "template/iso"
	}
	return ""
}

// CheckUpload returns an error saying what is wrong when name is not a
// file name of content (import or iso), or size (exact, 0 when unknown)
// and maxSize (the bound, 0 for MaxUploadBytes) are out of bounds.
func CheckUpload(content, name string, size, maxSize int64) error {
	re := uploadName[content]
	if re == nil {
		return fmt.Errorf("content %q is not import or iso", content)
	}
	if !re.MatchString(name) || strings.Contains(name, "..") {
		return fmt.Errorf("%q is not a file name of %s content", name, content)
	}
	if size < 0 || size > MaxUploadBytes {
		return fmt.Errorf("size %d is not between 0 (unknown) and %d bytes", size, int64(MaxUploadBytes))
	}
	if maxSize < 0 || maxSize > MaxUploadBytes || (maxSize > 0 && size > maxSize) {
		return fmt.Errorf("bound %d is not between 0 (the default) and %d bytes, nor under the size %d", maxSize, int64(MaxUploadBytes), size)
	}
	return nil
}

// UploadLimit is the most bytes an upload of size (exact, 0 when unknown)
// and maxSize (its bound, 0 for MaxUploadBytes) may carry.
func UploadLimit(size, maxSize int64) int64 {
	switch {
	case size > 0:
		return size
	case maxSize > 0:
		return maxSize
	}
	return MaxUploadBytes
}

var (
	// ErrUploadExists is an upload whose name a file of its directory has.
	ErrUploadExists = errors.New("a file of that name exists")
	// ErrNoLink is a directory whose file system neither links files nor
	// renames them without replacing: an upload cannot be written there
	// without risking another file of its name.
	ErrNoLink = errors.New("the directory's file system neither links files nor renames without replacing")
)

// writebackEvery is how much an upload writes between starting the
// writeback of what it wrote, so that its fsync waits for little.
const writebackEvery = 32 << 20

// Upload is a file being written into a storage's directory: its bytes
// go into a hidden temporary file (of no content's extension) that Commit
// gives its name; Close removes what Commit did not name.
type Upload struct {
	root             *os.Root
	dir              *os.File // the directory, for renameat2 and its fsync
	f                *os.File
	name, tmp        string
	rename           bool // no links: Commit renames without replacing
	rootOwned        bool
	written, flushed int64
	committed        bool
}

// CreateUpload creates dir (0755) if missing and the temporary file of an
// upload named name in it, owned by root when rootOwned. It is
// ErrUploadExists when dir has a file of that name, ErrNoLink when dir's
// file system can neither link the file under its name nor rename it
// without replacing (tried on the empty file, so that the caller may
// store the bytes another way). name must have passed CheckUpload; no
// name leaves dir (os.Root).
func CreateUpload(dir, name string, rootOwned bool) (*Upload, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		return nil, err
	}
	u := &Upload{root: root, name: name, rootOwned: rootOwned}
	if err := u.create(); err != nil {
		u.Close()
		return nil, err
	}
	return u, nil
}

func (u *Upload) create() error {
	var err error
	if u.dir, err = u.root.Open("."); err != nil {
		return err
	}
	if _, err := u.root.Lstat(u.name); err == nil {
		return ErrUploadExists
	}
	var nonce [8]byte
	_, _ = rand.Read(nonce[:])
	u.tmp = ".fp-upload-" + hex.EncodeToString(nonce[:]) + ".part"
	if u.f, err = u.root.OpenFile(u.tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, UploadMode); err != nil {
		return err
	}
	// Does the file system link? A hidden name of the file, removed again.
	probe := u.tmp + ".link"
	err = u.root.Link(u.tmp, probe)
	if err == nil {
		return u.root.Remove(probe)
	}
	if !noLink(err) {
		return err
	}
	// Does it rename without replacing? There and back.
	if err := u.renameNoReplace(u.tmp, probe); err != nil {
		if errors.Is(err, syscall.EINVAL) || errors.Is(err, syscall.ENOSYS) || noLink(err) {
			return fmt.Errorf("%w: %v", ErrNoLink, err)
		}
		return err
	}
	u.rename = true
	return u.renameNoReplace(probe, u.tmp)
}

// noLink reports whether err is a link refused by a file system without
// hard links.
func noLink(err error) bool {
	return errors.Is(err, syscall.EPERM) || errors.Is(err, syscall.EOPNOTSUPP) || errors.Is(err, syscall.EXDEV)
}

func (u *Upload) renameNoReplace(from, to string) error {
	fd := int(u.dir.Fd())
	if err := unix.Renameat2(fd, from, fd, to, unix.RENAME_NOREPLACE); err != nil {
		return &os.LinkError{Op: "renameat2", Old: from, New: to, Err: err}
	}
	return nil
}

// Write writes the file's next bytes, starting the writeback of what was
// written every writebackEvery bytes. Upload has no ReadFrom, so that
// io.CopyBuffer uses its buffer.
func (u *Upload) Write(p []byte) (int, error) {
	n, err := u.f.Write(p)
	u.written += int64(n)
	if u.written-u.flushed >= writebackEvery {
		_ = unix.SyncFileRange(int(u.f.Fd()), u.flushed, u.written-u.flushed, unix.SYNC_FILE_RANGE_WRITE)
		u.flushed = u.written
	}
	return n, err
}

// Commit makes the file durable (fsync), UploadMode whatever the umask,
// and names it: a link (or a rename) that never replaces, so that of two
// uploads of one name one wins and the other is ErrUploadExists; then the
// directory is synced, so that the name is durable too.
func (u *Upload) Commit() error {
	err := u.f.Chmod(UploadMode)
	if err == nil && u.rootOwned {
		err = u.f.Chown(0, 0)
	}
	if err == nil {
		err = u.f.Sync()
	}
	if cerr := u.f.Close(); err == nil {
		err = cerr
	}
	u.f = nil
	if err != nil {
		return err
	}
	if u.rename {
		err = u.renameNoReplace(u.tmp, u.name)
	} else {
		err = u.root.Link(u.tmp, u.name)
	}
	if errors.Is(err, fs.ErrExist) {
		return ErrUploadExists
	}
	if err != nil {
		return err
	}
	u.committed = true
	if !u.rename {
		if err := u.root.Remove(u.tmp); err != nil {
			return err
		}
	}
	return u.dir.Sync()
}

// Close removes the temporary file, and with it the file unless Commit
// named it, and closes the directory.
func (u *Upload) Close() error {
	if u.f != nil {
		u.f.Close()
	}
	if u.tmp != "" && !(u.committed && u.rename) {
		_ = u.root.Remove(u.tmp)
	}
	if u.dir != nil {
		u.dir.Close()
	}
	return u.root.Close()
}

// WriteUpload implements helperv1.HelperServiceServer.
func (s *service) WriteUpload(stream grpc.BidiStreamingServer[helperv1.WriteUploadRequest, helperv1.WriteUploadResponse]) error {
	first, err := stream.Recv()
	if err != nil {
		return err
	}
	f := first.GetFile()
	if f == nil {
		return status.Error(codes.InvalidArgument, "privhelper: the first request must name the upload's file")
	}
	dir, content, name, size := f.GetDir(), f.GetContent(), f.GetName(), f.GetSize()
	if err := CheckUpload(content, name, size, f.GetMaxSize()); err != nil {
		return status.Error(codes.InvalidArgument, "privhelper: upload: "+err.Error())
	}
	if !configured(s.h.cfg.UploadDirs, dir) || !strings.HasSuffix(dir, "/"+UploadSubdir(content)) {
		s.h.log.Warn("privhelper: refused an upload outside the upload directories", "dir", dir, "content", content, "name", name)
		return status.Errorf(codes.PermissionDenied, "privhelper: %q is not an upload directory of %s content of this node", dir, content)
	}
	u, err := CreateUpload(dir, name, true)
	switch {
	case errors.Is(err, ErrUploadExists):
		return status.Errorf(codes.AlreadyExists, "privhelper: upload of %s: refusing to override existing file %s/%s", name, dir, name)
	case errors.Is(err, ErrNoLink):
		s.h.log.Warn("privhelper: refused an upload: the directory's file system neither links nor renames without replacing", "dir", dir, "name", name, "err", err)
		return status.Errorf(codes.Unimplemented, "privhelper: upload of %s into %s: %v", name, dir, err)
	case err != nil:
		return status.Errorf(codes.Internal, "privhelper: upload of %s: %v", name, err)
	}
	defer u.Close()
	if err := stream.Send(&helperv1.WriteUploadResponse{Ready: true}); err != nil {
		return err
	}
	limit := UploadLimit(size, f.GetMaxSize())
	var n int64
	for {
		req, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			s.h.log.Warn("privhelper: upload aborted", "dir", dir, "name", name, "bytes", n, "err", err)
			return err
		}
		if req.GetFile() != nil {
			return status.Error(codes.InvalidArgument, "privhelper: only the first request names the upload's file")
		}
		data := req.GetData()
		if n+int64(len(data)) > limit {
			return status.Errorf(codes.DataLoss, "privhelper: upload of %s: more than %d bytes", name, limit)
		}
		if _, err := u.Write(data); err != nil {
			return status.Errorf(codes.Internal, "privhelper: upload of %s: %v", name, err)
		}
		n += int64(len(data))
	}
	if size > 0 && n != size {
		return status.Errorf(codes.DataLoss, "privhelper: upload of %s: it ended at %d of %d bytes", name, n, size)
	}
	if err := u.Commit(); errors.Is(err, ErrUploadExists) {
		return status.Errorf(codes.AlreadyExists, "privhelper: upload of %s: refusing to override existing file %s/%s", name, dir, name)
	} else if err != nil {
		return status.Errorf(codes.Internal, "privhelper: upload of %s: %v", name, err)
	}
	s.h.log.Info("privhelper: upload written", "dir", dir, "name", name, "bytes", n)
	return stream.Send(&helperv1.WriteUploadResponse{Size: n})
}

// WriteUpload writes the file r reads, until io.EOF, into dir as name
// through the helper (which checks it as its WriteUpload says) and
// returns the bytes stored. size is the file's exact size (0 when
// unknown), maxSize its bound (0: MaxUploadBytes). The helper's refusals
// are its gRPC statuses; a directory the helper cannot write into by a
// link or a rename that does not replace, or a helper without
// WriteUpload, is ErrNoLink, and then nothing of r was read. An error of
// r ends the upload (the helper stores nothing) and is returned.
func (c *Client) WriteUpload(ctx context.Context, dir, content, name string, size, maxSize int64, r io.Reader) (int64, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream, err := c.helper.WriteUpload(ctx)
	if err != nil {
		return 0, err
	}
	err = stream.Send(&helperv1.WriteUploadRequest{Part: &helperv1.WriteUploadRequest_File{File: &helperv1.UploadFile{
		Dir: dir, Content: content, Name: name, Size: size, MaxSize: maxSize}}})
	var ready *helperv1.WriteUploadResponse
	if err == nil || errors.Is(err, io.EOF) {
		// io.EOF: the helper ended the call; Recv has its status.
		ready, err = stream.Recv()
	}
	if status.Code(err) == codes.Unimplemented {
		return 0, fmt.Errorf("privhelper: upload of %s: %w (%s)", name, ErrNoLink, status.Convert(err).Message())
	}
	if err != nil {
		return 0, err
	}
	if !ready.GetReady() {
		return 0, status.Errorf(codes.Internal, "privhelper: upload of %s: the helper did not take it", name)
	}
	buf := make([]byte, maxChunk)
	for {
		k, rerr := io.ReadFull(r, buf)
		if k > 0 {
			// Send copies the message out before it returns: buf is free again.
			if err := stream.Send(&helperv1.WriteUploadRequest{Part: &helperv1.WriteUploadRequest_Data{Data: buf[:k]}}); err != nil {
				if _, serr := stream.Recv(); serr != nil && !errors.Is(serr, io.EOF) {
					return 0, serr
				}
				return 0, err
			}
		}
		if errors.Is(rerr, io.EOF) || errors.Is(rerr, io.ErrUnexpectedEOF) {
			break
		}
		if rerr != nil {
			return 0, rerr // the deferred cancel ends the call: the helper stores nothing
		}
	}
	if err := stream.CloseSend(); err != nil {
		return 0, err
	}
	done, err := stream.Recv()
	if err != nil {
		return 0, err
	}
	return done.GetSize(), nil
}
