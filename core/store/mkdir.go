package store

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/metaq-go/metaq/internal/fsutil"
)

// MkdirAllDurable is os.MkdirAll whose result survives a power loss: each
// directory it creates is made durable by fsyncing its parent (a new
// directory entry is on disk only once the directory holding it is
// synced), from the top down. A directory that already exists is left as
// it is.
func MkdirAllDurable(dir string, perm fs.FileMode) error {
	dir = filepath.Clean(dir)
	if fi, err := os.Stat(dir); err == nil {
		if !fi.IsDir() {
			return fmt.Errorf("%s: not a directory", dir)
		}
		return nil
	} else if !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	parent := filepath.Dir(dir)
	if parent != dir {
		if err := MkdirAllDurable(parent, perm); err != nil {
			return err
		}
	}
	if err := os.Mkdir(dir, perm); err != nil && !errors.Is(err, fs.ErrExist) {
		return err
	}
	return syncPath(parent)
}

// syncPath fsyncs the directory at path.
func syncPath(path string) error {
	if err := fsutil.SyncDir(path); err != nil {
		return fmt.Errorf("fsync directory %s: %w", path, err)
	}
	return nil
}
