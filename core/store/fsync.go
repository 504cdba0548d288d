package store

import (
	"os"

	"github.com/metaq-go/metaq/internal/fsutil"
)

// fdatasync flushes f's data and the metadata needed to read it back (its
// size) to stable storage (fsutil.Fdatasync: EINTR is retried, any other
// error is returned and must never be retried, fsyncgate).
func fdatasync(f *os.File) error { return fsutil.Fdatasync(f) }
