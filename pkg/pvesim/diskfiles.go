package pvesim

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// Disk bytes. With Config.DiskDir set, every disk volume (content
// "images") keeps its bytes in a sparse file of its size there, which the
// volume's "path" names, as a Proxmox node's storage does: what is written
// to the file is the disk's content, a clone or a disk imported from an
// image starts with its source's bytes, a resize truncates, a delete
// removes the file, and a volume that moves (a migration, a rename) keeps
// its file. Without DiskDir disks have a size and no content.

// fileChunk is the unit of the sparse copy: a chunk of zeros is skipped.
const fileChunk = 1 << 20

// backed reports whether v keeps its bytes in a file.
func (st *state) backed(v *volume) bool { return st.c.cfg.DiskDir != "" && v.content == "images" }

// createFile gives a new disk volume its file: a copy of src's bytes (a
// file or an uploaded image's data) if src is set, then extended to v's
// size. The caller holds mu.
func (st *state) createFile(v *volume) {
	if !st.backed(v) || v.file != "" {
		return
	}
	var b [8]byte
	_, _ = rand.Read(b[:])
	dir := filepath.Join(st.c.cfg.DiskDir, v.storage)
	v.file = filepath.Join(dir, fmt.Sprintf("vm-%d-%s.raw", v.vmid, hex.EncodeToString(b[:])))
	err := os.MkdirAll(dir, 0o700)
	if err == nil {
		err = writeSparse(v.file, v.src, v.size)
	}
	v.src = nil
	if err != nil {
		st.c.log.Error("pvesim: disk file", "volume", v.volid, "err", err)
	}
}

// writeSparse creates path with src's bytes (nil: none), skipping chunks
// of zeros, and makes it size bytes long.
func writeSparse(path string, src *volume, size int64) error {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	var r io.Reader
	switch {
	case src == nil:
	case src.file != "":
		sf, err := os.Open(src.file)
		if err != nil {
			f.Close()
			return err
		}
		defer sf.Close()
		if n, ok, err := copyData(f, sf); ok {
			if err == nil {
				err = f.Truncate(max(size, n))
			}
			if cerr := f.Close(); err == nil {
				err = cerr
			}
			return err
		}
		r = sf
	default:
		r = bytes.NewReader(src.data)
	}
	var off int64
	if r != nil {
		buf := make([]byte, fileChunk)
		zero := make([]byte, fileChunk)
		for {
			n, err := io.ReadFull(r, buf)
			if n > 0 && !bytes.Equal(buf[:n], zero[:n]) {
				if _, werr := f.WriteAt(buf[:n], off); werr != nil {
					f.Close()
					return werr
				}
			}
			off += int64(n)
			if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
				break
			}
			if err != nil {
				f.Close()
				return err
			}
		}
	}
	if err := f.Truncate(max(size, off)); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// copyData copies the data of sparse file src into dst at the same
// offsets, skipping its holes (SEEK_DATA, SEEK_HOLE), and returns src's
// size; ok is false when the file system cannot say where its data is
// (then nothing was copied).
func copyData(dst, src *os.File) (int64, bool, error) {
	fi, err := src.Stat()
	if err != nil {
		return 0, false, nil
	}
	size := fi.Size()
	fd := int(src.Fd())
	buf := make([]byte, fileChunk)
	for off := int64(0); off < size; {
		data, err := unix.Seek(fd, off, unix.SEEK_DATA)
		if errors.Is(err, unix.ENXIO) {
			break // no data after off
		}
		if err != nil {
			if off == 0 {
				return 0, false, nil
			}
			return size, true, err
		}
		hole, err := unix.Seek(fd, data, unix.SEEK_HOLE)
		if err != nil {
			return size, true, err
		}
		if copyRange(dst, src, data, hole) {
			off = hole
			continue
		}
		for p := data; p < hole; {
			n, err := src.ReadAt(buf[:min(int64(len(buf)), hole-p)], p)
			if n > 0 {
				if _, werr := dst.WriteAt(buf[:n], p); werr != nil {
					return size, true, werr
				}
				p += int64(n)
			}
			if err != nil && !errors.Is(err, io.EOF) {
				return size, true, err
			}
			if n == 0 {
				break
			}
		}
		off = hole
	}
	return size, true, nil
}

// copyRange copies bytes [from, to) of src to the same offsets of dst in
// the kernel (copy_file_range), as cp does; false when it cannot (then
// the caller copies them itself, from from on: a partial copy is
// written again).
func copyRange(dst, src *os.File, from, to int64) bool {
	for from < to {
		in, out := from, from
		n, err := unix.CopyFileRange(int(src.Fd()), &in, int(dst.Fd()), &out, int(min(to-from, 1<<30)), 0)
		if err != nil || n == 0 {
			return false
		}
		from += int64(n)
	}
	return true
}

// resizeFile makes v's file v.size bytes long. The caller holds mu.
func (st *state) resizeFile(v *volume) {
	if v.file == "" {
		return
	}
	if err := os.Truncate(v.file, v.size); err != nil {
		st.c.log.Error("pvesim: resize disk file", "volume", v.volid, "err", err)
	}
}

// removeFile deletes v's file. The caller holds mu.
func (st *state) removeFile(v *volume) {
	if v.file == "" {
		return
	}
	if err := os.Remove(v.file); err != nil && !errors.Is(err, os.ErrNotExist) {
		st.c.log.Error("pvesim: remove disk file", "volume", v.volid, "err", err)
	}
	v.file = ""
}

// moveVolume moves v (found as volid on from) to node to under its
// current volid, keeping its file. The caller holds mu.
func (st *state) moveVolume(from, volid, to string, v *volume) {
	storage, _, _ := strings.Cut(volid, ":")
	delete(st.volumesOn(from, storage), volid)
	st.addVolume(to, v)
}
