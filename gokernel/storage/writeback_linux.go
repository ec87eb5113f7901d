//go:build linux

package storage

import (
	"os"

	"golang.org/x/sys/unix"
)

// startWriteback asks the kernel to start writing [off, off+n) of f to
// disk without waiting for it: the commit's fsync then finds most of a
// merge's output already written (issue 30: the sync was 45% of a whole
// optimize). Errors are ignored: this is only a hint, the fsync decides.
func startWriteback(f *os.File, off, n int64) {
	_ = unix.SyncFileRange(int(f.Fd()), off, n, unix.SYNC_FILE_RANGE_WRITE)
}
