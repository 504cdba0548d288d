package store

import (
	"os"

	"golang.org/x/sys/unix"
)

// tmpfsTempDir makes a directory on /dev/shm when that is a tmpfs with at
// least 2 GiB available (the tests hold a few hundred MiB at most), or
// returns "".
func tmpfsTempDir() string {
	const shm = "/dev/shm"
	var st unix.Statfs_t
	if err := unix.Statfs(shm, &st); err != nil || st.Type != unix.TMPFS_MAGIC || st.Bavail*uint64(st.Bsize) < 2<<30 {
		return ""
	}
	dir, err := os.MkdirTemp(shm, "metaq-store-test-")
	if err != nil {
		return ""
	}
	return dir
}
