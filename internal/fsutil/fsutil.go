// Package fsutil (not API) holds the file-system steps the durable stores
// of the project share.
package fsutil

import (
	"os"
	"path/filepath"
)

// SyncDir fsyncs the directory dir, making the entries created, renamed
// or removed in it durable.
func SyncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	return err
}

// zeros is what ZeroFill writes from (read-only).
var zeros [256 << 10]byte

// ZeroFill writes zeros to f's bytes [from, to) with WriteAt (no fsync):
// the pre-write of a journal file, so that later fdatasyncs never change
// its size or allocate blocks.
func ZeroFill(f *os.File, from, to int64) error {
	for from < to {
		n := min(to-from, int64(len(zeros)))
		if _, err := f.WriteAt(zeros[:n], from); err != nil {
			return err
		}
		from += n
	}
	return nil
}

// WriteFileDurable replaces path with data: a temporary file, fsynced,
// renamed over path, and the directory fsynced.
func WriteFileDurable(path string, data []byte) error {
	tmp := path + ".tmp"
	w, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return err
	}
	_, err = w.Write(data)
	if err == nil {
		err = w.Sync()
	}
	if cerr := w.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err == nil {
		err = SyncDir(filepath.Dir(path))
	}
	if err != nil {
		os.Remove(tmp)
	}
	return err
}
