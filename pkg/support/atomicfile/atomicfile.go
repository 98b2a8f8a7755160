// Package atomicfile replaces files so that a reader, or the next start after a crash,
// sees either the old content or the new, never a torn write.
package atomicfile

import (
	"crypto/rand"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// WriteFile replaces path with data and gives it mode perm: data goes to a temporary file
// in path's directory, which is synced, then renamed over path; the directory is synced
// last so the rename survives a crash. On error path is unchanged and the temporary file
// is gone.
func WriteFile(path string, data []byte, perm fs.FileMode) error {
	dir := filepath.Dir(path)
	f, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return fmt.Errorf("atomicfile: %w", err)
	}
	tmp := f.Name()
	defer os.Remove(tmp) // fails harmlessly once renamed
	if err := writeSynced(f, data, perm); err != nil {
		return fmt.Errorf("atomicfile: %s: %w", path, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("atomicfile: %w", err)
	}
	if err := SyncDir(dir); err != nil {
		return fmt.Errorf("atomicfile: %w", err)
	}
	return nil
}

// WriteFileIn is WriteFile for name inside root: neither name nor a link
// in root leads the file, or its temporary beside it, out of root. The
// directory is not synced (a Root cannot open itself as a file).
func WriteFileIn(root *os.Root, name string, data []byte, perm fs.FileMode) error {
	tmp := "." + filepath.Base(name) + ".tmp-" + rand.Text()
	f, err := root.OpenFile(filepath.Join(filepath.Dir(name), tmp), os.O_WRONLY|os.O_CREATE|os.O_EXCL, perm)
	if err != nil {
		return fmt.Errorf("atomicfile: %w", err)
	}
	tmp = filepath.Join(filepath.Dir(name), tmp)
	defer root.Remove(tmp) // fails harmlessly once renamed
	if err := writeSynced(f, data, perm); err != nil {
		return fmt.Errorf("atomicfile: %s: %w", name, err)
	}
	if err := root.Rename(tmp, name); err != nil {
		return fmt.Errorf("atomicfile: %w", err)
	}
	return nil
}

// writeSynced writes data to f, sets its mode, syncs and closes it.
func writeSynced(f *os.File, data []byte, perm fs.FileMode) error {
	_, err := f.Write(data)
	if err == nil {
		err = f.Chmod(perm)
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// SyncDir syncs a directory, making renames and removals in it durable.
func SyncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}
