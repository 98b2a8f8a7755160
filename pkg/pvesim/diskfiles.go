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
	"syscall"
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
		if ok, err := copyExtents(f, sf); ok {
			if err == nil {
				err = f.Truncate(max(size, src.size))
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

// Whence values of lseek that find a sparse file's data and holes.
const (
	seekData = 3
	seekHole = 4
)

// copyExtents copies the data of the sparse file src into dst at the same
// offsets, reading only what the file system holds as data (not its
// holes: a copy of a large, mostly empty disk reads only its bytes, so the
// simulator's lock is not held for the time of reading gigabytes of
// zeros). ok is false where the file system cannot tell data from holes;
// the caller then reads the whole file.
func copyExtents(dst, src *os.File) (ok bool, err error) {
	if _, err := src.Seek(0, seekData); err != nil && !errors.Is(err, syscall.ENXIO) {
		return false, nil
	}
	buf := make([]byte, fileChunk)
	var off int64
	for {
		start, err := src.Seek(off, seekData)
		if errors.Is(err, syscall.ENXIO) {
			return true, nil // no data after off
		}
		if err != nil {
			return true, err
		}
		end, err := src.Seek(start, seekHole)
		if err != nil {
			return true, err
		}
		if _, err := src.Seek(start, io.SeekStart); err != nil {
			return true, err
		}
		for pos := start; pos < end; {
			n, err := src.Read(buf[:min(int64(len(buf)), end-pos)])
			if n > 0 {
				if _, werr := dst.WriteAt(buf[:n], pos); werr != nil {
					return true, werr
				}
				pos += int64(n)
			}
			if err != nil {
				return true, err
			}
		}
		off = end
	}
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
