package privhelper_test

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/flexplane/flexplane/pkg/agent/privhelper"
	"github.com/flexplane/flexplane/pkg/dev/poll"
)

// start runs a helper on a socket of its own for cfg (its socket and
// logger filled in) and returns a client of it.
func start(t *testing.T, cfg privhelper.Config) *privhelper.Client {
	t.Helper()
	if cfg.Socket == "" {
		cfg.Socket = filepath.Join(t.TempDir(), "run", "helper.sock")
	}
	cfg.Logger = slog.New(slog.DiscardHandler)
	h, err := privhelper.Start(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		h.Shutdown(ctx)
	})
	c, err := privhelper.Dial(cfg.Socket)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// self is a Config whose agent is this process's user.
func self() privhelper.Config {
	return privhelper.Config{AgentUID: os.Getuid(), AgentGID: os.Getgid()}
}

// files lists the files under dir.
func files(t *testing.T, dir string) []string {
	t.Helper()
	var out []string
	_ = filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			out = append(out, path)
		}
		return nil
	})
	slices.Sort(out)
	return out
}

// TestHelperServesOnlyTheAgentsUser: the socket is 0660 in the agent's
// group, and a connection whose peer credentials are not the agent's uid
// and gid is closed unserved: its call writes nothing.
func TestHelperServesOnlyTheAgentsUser(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	dir := t.TempDir()
	for _, tc := range []struct {
		name     string
		uid, gid int
		served   bool
	}{
		{"the agent's user", os.Getuid(), os.Getgid(), true},
		{"another uid", os.Getuid() + 4242, os.Getgid(), false},
		{"another gid", os.Getuid(), os.Getgid() + 4242, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			snippets := filepath.Join(dir, tc.name)
			sock := filepath.Join(t.TempDir(), "helper.sock")
			c := start(t, privhelper.Config{Socket: sock, AgentUID: tc.uid, AgentGID: tc.gid, SnippetDirs: []string{snippets}})
			fi, err := os.Stat(sock)
			if err != nil {
				t.Fatal(err)
			}
			if fi.Mode().Perm() != 0o660 {
				t.Errorf("socket mode %v, want 0660", fi.Mode().Perm())
			}
			cctx, cancel := context.WithTimeout(ctx, 3*time.Second)
			defer cancel()
			err = c.WriteSnippet(cctx, snippets, "a.yaml", []byte("x"))
			if tc.served && err != nil {
				t.Fatalf("the agent's call: %v", err)
			}
			if !tc.served {
				if err == nil || status.Code(err) != codes.Unavailable {
					t.Fatalf("a call of another user: %v, want UNAVAILABLE (connection closed)", err)
				}
				if got := files(t, snippets); len(got) != 0 {
					t.Fatalf("another user's call wrote %v", got)
				}
			}
		})
	}
}

// TestHelperSnippets: snippets are written (0600, atomically) and deleted
// only in a configured directory under a plain name; a name with a path,
// "..", a directory not configured (or one that only leads into a
// configured one) and oversize data are refused and change nothing.
func TestHelperSnippets(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	root := t.TempDir()
	snippets := filepath.Join(root, "var", "lib", "vz", "snippets")
	cfg := self()
	cfg.SnippetDirs = []string{snippets}
	c := start(t, cfg)

	if err := c.WriteSnippet(ctx, snippets, "vm-100-user.yaml", []byte("#cloud-config\n")); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(filepath.Join(snippets, "vm-100-user.yaml"))
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("snippet: %v %v, want mode 0600", fi, err)
	}
	// Every path of this test is in its own directory: with a check
	// undone, a refused call must not reach the machine's files.
	// A link placed where a snippet goes is replaced, not followed.
	outside := filepath.Join(root, "outside")
	if err := os.WriteFile(outside, []byte("keep"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, filepath.Join(snippets, "link.yaml")); err != nil {
		t.Fatal(err)
	}
	if err := c.WriteSnippet(ctx, snippets, "link.yaml", []byte("new")); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(outside); string(b) != "keep" {
		t.Fatalf("a write through a link changed %s: %q", outside, b)
	}

	before := files(t, root)
	for _, tc := range []struct {
		dir, name string
		size      int
		want      codes.Code
	}{
		{snippets, "../outside", 1, codes.InvalidArgument},
		{snippets, "../../../../etc/passwd", 1, codes.InvalidArgument},
		{snippets, "a/b.yaml", 1, codes.InvalidArgument},
		{snippets, "..", 1, codes.InvalidArgument},
		{snippets, ".hidden", 1, codes.InvalidArgument},
		{snippets, "", 1, codes.InvalidArgument},
		{snippets, strings.Repeat("a", 129), 1, codes.InvalidArgument},
		{snippets, "big.yaml", privhelper.MaxSnippetBytes + 1, codes.InvalidArgument},
		{root, "a.yaml", 1, codes.PermissionDenied},
		{snippets + "/../..", "a.yaml", 1, codes.PermissionDenied},
		{snippets + "/", "a.yaml", 1, codes.PermissionDenied},
		{filepath.Join(root, "etc"), "passwd", 1, codes.PermissionDenied},
	} {
		err := c.WriteSnippet(ctx, tc.dir, tc.name, make([]byte, tc.size))
		if status.Code(err) != tc.want {
			t.Errorf("write %s/%q (%d bytes): %v, want %s", tc.dir, tc.name, tc.size, err, tc.want)
		}
		if _, err := c.DeleteSnippet(ctx, tc.dir, tc.name); tc.size == 1 && status.Code(err) != tc.want {
			t.Errorf("delete %s/%q: %v, want %s", tc.dir, tc.name, err, tc.want)
		}
	}
	if after := files(t, root); !slices.Equal(before, after) {
		t.Fatalf("refused calls changed files: %v -> %v", before, after)
	}
	if deleted, err := c.DeleteSnippet(ctx, snippets, "vm-100-user.yaml"); err != nil || !deleted {
		t.Fatalf("delete: %v %v", deleted, err)
	}
	if deleted, err := c.DeleteSnippet(ctx, snippets, "vm-100-user.yaml"); err != nil || deleted {
		t.Fatalf("second delete: %v %v", deleted, err)
	}
}

// volumeLab is a node's guest configs (as Proxmox keeps them in /etc/pve)
// and volume files: 201 leaving, 202 unmarked, 203 arriving, each with
// its disk vm-<vmid>-disk-0 of 3 MiB and a bit.
type volumeLab struct {
	cfg                      privhelper.Config
	images                   string
	leaving, plain, arriving string // the disks' paths
}

const volSize = 3<<20 + 17

func newVolumeLab(t *testing.T) *volumeLab {
	t.Helper()
	root := t.TempDir()
	l := &volumeLab{cfg: self(), images: filepath.Join(root, "images")}
	l.cfg.GuestConfigDir = filepath.Join(root, "qemu-server")
	l.cfg.VolumeDirs = []string{l.images}
	for _, d := range []string{l.images, l.cfg.GuestConfigDir} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	guest := func(vmid, tags string) string {
		conf := "# a guest\nname: g" + vmid + "\n"
		if tags != "" {
			conf += "tags: " + tags + "\n"
		}
		conf += "scsi0: local-lvm:vm-" + vmid + "-disk-0,size=4M\nide2: local:iso/x.iso,media=cdrom\n" +
			"\n[before]\ntags: fp-leaving;fp-incoming\nscsi1: local-lvm:vm-" + vmid + "-disk-9,size=4M\n"
		if err := os.WriteFile(filepath.Join(l.cfg.GuestConfigDir, vmid+".conf"), []byte(conf), 0o640); err != nil {
			t.Fatal(err)
		}
		for _, disk := range []string{"disk-0", "disk-9"} {
			data := bytes.Repeat([]byte(vmid+disk), volSize/len(vmid+disk)+1)[:volSize]
			if err := os.WriteFile(filepath.Join(l.images, "vm-"+vmid+"-"+disk), data, 0o600); err != nil {
				t.Fatal(err)
			}
		}
		return filepath.Join(l.images, "vm-"+vmid+"-disk-0")
	}
	l.leaving, l.plain, l.arriving = guest("201", "tenant-a;fp-leaving"), guest("202", "tenant-a"), guest("203", "fp-incoming")
	return l
}

// TestHelperVolumesOnlyOfMarkedGuests: the helper opens a volume only
// when the guest's config file on the node (read by the helper, not told
// by the agent) marks it for the move, names the volume as a disk of its
// current state, and the path is that guest's file in a volume
// directory; it reads a leaving guest's disk and writes an arriving
// guest's, within its size. A compromised agent naming an unmarked guest,
// another guest's file, a file outside the volume directories or a disk
// only a snapshot names gets PERMISSION_DENIED and opens nothing.
func TestHelperVolumesOnlyOfMarkedGuests(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	l := newVolumeLab(t)
	c := start(t, l.cfg)

	v, err := c.OpenVolume(ctx, 201, "local-lvm:vm-201-disk-0", l.leaving, false)
	if err != nil {
		t.Fatal(err)
	}
	if v.Size() != volSize {
		t.Errorf("size %d, want %d", v.Size(), volSize)
	}
	got, err := io.ReadAll(io.NewSectionReader(v, 0, v.Size()))
	want, _ := os.ReadFile(l.leaving)
	if err != nil || !bytes.Equal(got, want) {
		t.Fatalf("read %d bytes (%v), want the disk's %d", len(got), err, len(want))
	}
	if _, err := v.WriteAt([]byte("x"), 0); status.Code(err) != codes.PermissionDenied {
		t.Errorf("a write to a volume opened for reading: %v, want PERMISSION_DENIED", err)
	}
	v.Close()

	w, err := c.OpenVolume(ctx, 203, "local-lvm:vm-203-disk-0", l.arriving, true)
	if err != nil {
		t.Fatal(err)
	}
	data := bytes.Repeat([]byte("moved"), 500_000)
	if n, err := w.WriteAt(data, 1000); err != nil || n != len(data) {
		t.Fatalf("write: %d %v", n, err)
	}
	if err := w.Sync(); err != nil {
		t.Fatal(err)
	}
	back := make([]byte, len(data))
	if _, err := w.ReadAt(back, 1000); err != nil || !bytes.Equal(back, data) {
		t.Fatalf("read back: %v", err)
	}
	if _, err := w.WriteAt([]byte("xy"), volSize-1); status.Code(err) != codes.InvalidArgument {
		t.Errorf("a write past the volume's end: %v, want INVALID_ARGUMENT", err)
	}
	w.Close()
	if b, _ := os.ReadFile(l.arriving); !bytes.Equal(b[1000:1000+len(data)], data) || len(b) != volSize {
		t.Fatalf("the arriving disk does not hold what was written (%d bytes)", len(b))
	}

	before := map[string][]byte{}
	for _, f := range files(t, filepath.Dir(l.images)) {
		before[f], _ = os.ReadFile(f)
	}
	for _, tc := range []struct {
		what   string
		vmid   uint32
		volume string
		path   string
		write  bool
		want   codes.Code
	}{
		{"an unmarked guest's disk", 202, "local-lvm:vm-202-disk-0", l.plain, false, codes.PermissionDenied},
		{"an unmarked guest's disk, for writing", 202, "local-lvm:vm-202-disk-0", l.plain, true, codes.PermissionDenied},
		{"a leaving guest's disk, for writing", 201, "local-lvm:vm-201-disk-0", l.leaving, true, codes.PermissionDenied},
		{"an arriving guest's disk, for reading", 203, "local-lvm:vm-203-disk-0", l.arriving, false, codes.PermissionDenied},
		{"another guest's file under a marked guest's volume", 201, "local-lvm:vm-201-disk-0", l.plain, false, codes.PermissionDenied},
		{"a disk only a snapshot names", 201, "local-lvm:vm-201-disk-9", filepath.Join(l.images, "vm-201-disk-9"), false, codes.PermissionDenied},
		{"a file outside the volume directories", 201, "local-lvm:vm-201-disk-0", filepath.Join(l.cfg.GuestConfigDir, "vm-201-disk-0"), false, codes.PermissionDenied},
		{"the host's disk", 201, "local-lvm:vm-201-disk-0", "/dev/sda", false, codes.PermissionDenied},
		{"a path that climbs out", 201, "local-lvm:vm-201-disk-0", l.images + "/../qemu-server/vm-201-disk-0", false, codes.InvalidArgument},
		{"a relative path", 201, "local-lvm:vm-201-disk-0", "images/vm-201-disk-0", false, codes.InvalidArgument},
		{"no guest", 299, "local-lvm:vm-299-disk-0", filepath.Join(l.images, "vm-299-disk-0"), false, codes.PermissionDenied},
		{"guest 0", 0, "local-lvm:vm-201-disk-0", l.leaving, false, codes.InvalidArgument},
		{"no volume id", 201, "vm-201-disk-0", l.leaving, false, codes.InvalidArgument},
	} {
		v, err := c.OpenVolume(ctx, tc.vmid, tc.volume, tc.path, tc.write)
		if status.Code(err) != tc.want {
			t.Errorf("%s: %v, want %s", tc.what, err, tc.want)
		}
		if err == nil {
			v.Close()
		}
	}
	for f, b := range before {
		if now, _ := os.ReadFile(f); !bytes.Equal(now, b) {
			t.Errorf("refused opens changed %s", f)
		}
	}
}

// cutAt gives data, then fails: an agent whose upload broke.
type cutAt struct{ data []byte }

func (c *cutAt) Read(p []byte) (int, error) {
	if len(c.data) == 0 {
		return 0, errors.New("connection lost")
	}
	n := copy(p, c.data)
	c.data = c.data[n:]
	return n, nil
}

// plant writes "first" into path at its first read, and gives no bytes.
type plant struct{ path string }

func (p *plant) Read([]byte) (int, error) {
	return 0, cmp.Or(os.WriteFile(p.path, []byte("first"), 0o644), io.EOF)
}

// TestHelperUploads: an upload is written only into a configured upload
// directory of its content, under a plain name of its content's
// extension, 0644 and owned by root, with the bytes sent; a name with a
// path or another extension, a directory not configured (or one of
// another content), a body shorter or longer than announced or past its
// bound, a broken stream and an existing name (a link to a file outside
// among them, and one that appears while the bytes come) are refused and
// leave nothing, not even a temporary file.
func TestHelperUploads(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	root := t.TempDir()
	imports := filepath.Join(root, "var", "lib", "vz", "import")
	isos := filepath.Join(root, "var", "lib", "vz", "template", "iso")
	cfg := self()
	cfg.UploadDirs = []string{imports, isos}
	c := start(t, cfg)

	file := bytes.Repeat([]byte("an image "), 300_000) // 2.7 MB: three chunks
	n, err := c.WriteUpload(ctx, imports, "import", "app.qcow2", int64(len(file)), 0, bytes.NewReader(file))
	if err != nil || n != int64(len(file)) {
		t.Fatalf("upload: %d %v", n, err)
	}
	path := filepath.Join(imports, "app.qcow2")
	if b, err := os.ReadFile(path); err != nil || !bytes.Equal(b, file) {
		t.Fatalf("the uploaded file: %d bytes, %v", len(b), err)
	}
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if st := fi.Sys().(*syscall.Stat_t); fi.Mode().Perm() != 0o644 || st.Uid != 0 || st.Gid != 0 {
		t.Fatalf("the uploaded file: mode %v, owner %d:%d, want 0644 root:root", fi.Mode().Perm(), st.Uid, st.Gid)
	}
	if _, err := c.WriteUpload(ctx, isos, "iso", "install.iso", 0, 1<<20, strings.NewReader("an iso")); err != nil {
		t.Fatalf("an iso of unknown size: %v", err)
	}

	outside := filepath.Join(root, "outside.qcow2")
	if err := os.WriteFile(outside, []byte("keep"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, filepath.Join(imports, "link.qcow2")); err != nil {
		t.Fatal(err)
	}
	before := map[string][]byte{}
	for _, f := range files(t, root) {
		before[f], _ = os.ReadFile(f)
	}
	for _, tc := range []struct {
		what          string
		dir, content  string
		name          string
		size, maxSize int64
		body          io.Reader
		want          codes.Code
	}{
		{"a name that climbs out", imports, "import", "../outside.qcow2", 1, 0, strings.NewReader("x"), codes.InvalidArgument},
		{"a path", imports, "import", "a/b.qcow2", 1, 0, strings.NewReader("x"), codes.InvalidArgument},
		{"a hidden name", imports, "import", ".a.qcow2", 1, 0, strings.NewReader("x"), codes.InvalidArgument},
		{"an extension of no image", imports, "import", "a.sh", 1, 0, strings.NewReader("x"), codes.InvalidArgument},
		{"an iso as an import", imports, "import", "a.iso", 1, 0, strings.NewReader("x"), codes.InvalidArgument},
		{"a content of no upload", filepath.Join(root, "var", "lib", "vz", "snippets"), "snippets", "a.qcow2", 1, 0, strings.NewReader("x"), codes.InvalidArgument},
		{"a size past the bound", imports, "import", "a.raw", privhelper.MaxUploadBytes + 1, 0, strings.NewReader("x"), codes.InvalidArgument},
		{"a directory not configured", root, "import", "a.qcow2", 1, 0, strings.NewReader("x"), codes.PermissionDenied},
		{"a directory that climbs into one", imports + "/../import", "import", "a.qcow2", 1, 0, strings.NewReader("x"), codes.PermissionDenied},
		{"the iso directory for an import", isos, "import", "a.qcow2", 1, 0, strings.NewReader("x"), codes.PermissionDenied},
		{"the host's directory", "/etc", "import", "a.qcow2", 1, 0, strings.NewReader("x"), codes.PermissionDenied},
		{"a short body", imports, "import", "short.qcow2", int64(len(file)) + 1, 0, bytes.NewReader(file), codes.DataLoss},
		{"a long body", imports, "import", "long.qcow2", int64(len(file)) - 1, 0, bytes.NewReader(file), codes.DataLoss},
		{"a body past its bound", imports, "import", "bound.qcow2", 0, int64(len(file)) - 1, bytes.NewReader(file), codes.DataLoss},
		{"an existing name", imports, "import", "app.qcow2", 3, 0, strings.NewReader("new"), codes.AlreadyExists},
		{"a link's name", imports, "import", "link.qcow2", 3, 0, strings.NewReader("new"), codes.AlreadyExists},
	} {
		if _, err := c.WriteUpload(ctx, tc.dir, tc.content, tc.name, tc.size, tc.maxSize, tc.body); status.Code(err) != tc.want {
			t.Errorf("%s: %v, want %s", tc.what, err, tc.want)
		}
	}
	// A file of the name appears while the bytes come (another upload of
	// it won): the helper's link does not replace it.
	raced := filepath.Join(imports, "raced.qcow2")
	body := io.MultiReader(&plant{path: raced}, bytes.NewReader(file))
	if _, err := c.WriteUpload(ctx, imports, "import", "raced.qcow2", int64(len(file)), 0, body); status.Code(err) != codes.AlreadyExists {
		t.Errorf("an upload whose name appeared meanwhile: %v, want AlreadyExists", err)
	}
	if b, err := os.ReadFile(raced); err != nil || string(b) != "first" {
		t.Errorf("the file that appeared meanwhile: %d bytes, %v, want it kept", len(b), err)
	}
	before[raced] = []byte("first")
	// A broken stream: the helper sees the call end and removes its file.
	if _, err := c.WriteUpload(ctx, imports, "import", "broken.qcow2", 0, 0, &cutAt{data: file}); err == nil || err.Error() != "connection lost" {
		t.Errorf("a broken upload: %v, want the reader's error", err)
	}
	same := func() bool {
		after := files(t, root)
		if len(after) != len(before) {
			return false
		}
		for _, f := range after {
			if b, err := os.ReadFile(f); err != nil || !bytes.Equal(b, before[f]) {
				return false
			}
		}
		return true
	}
	poll.True(t, 10*time.Second, "refused uploads leave the files as they were", same)
}
