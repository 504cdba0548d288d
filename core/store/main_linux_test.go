package store

import (
	"os"
	"time"

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

// processCPU is the process's user + system CPU time so far (0 where
// unknown), for the benchmarks' CPU per operation.
func processCPU() time.Duration {
	var ru unix.Rusage
	if err := unix.Getrusage(unix.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
