package agent

import (
	"os"

	"golang.org/x/sys/unix"
)

// startWriteback starts writing n bytes of f at off to disk and returns
// without waiting (sync_file_range: a later fsync waits for less). A
// failure is left to that fsync to report.
func startWriteback(f *os.File, off, n int64) {
	_ = unix.SyncFileRange(int(f.Fd()), off, n, unix.SYNC_FILE_RANGE_WRITE)
}
