// Package fsutil (not API) holds the file-system steps the durable stores
// of the project share.
package fsutil

import "os"

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
