package store

import (
	"flag"
	"fmt"
	"os"
	"testing"
)

// TestMain runs the tests with their temporary directories (t.TempDir, so
// every data directory they make, copy and cut) on a tmpfs when
// tmpfsTempDir finds one with room: the store's code paths are the same
// there (the journal picks syncfs on tmpfs as on ext4, xfs or btrfs), but
// the thousands of files the crash tests copy and the fsyncs of every
// recovery cost a disk file system most of this package's CPU. Set
// METAQ_STORE_TEST_DISK=1 to run them in the default temporary directory
// (make soak does once); benchmarks always measure it.
func TestMain(m *testing.M) {
	flag.Parse()
	var dir string
	if os.Getenv("METAQ_STORE_TEST_DISK") == "" && flag.Lookup("test.bench").Value.String() == "" {
		dir = tmpfsTempDir()
	}
	if dir != "" {
		if err := os.Setenv("TMPDIR", dir); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
	}
	code := m.Run()
	if dir != "" {
		_ = os.RemoveAll(dir)
	}
	os.Exit(code)
}
