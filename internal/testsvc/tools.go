package testsvc

import (
	"bytes"
	"fmt"
	"os/exec"
	"testing"
)

// probeTools checks the command-line tools the documentation's
// walkthroughs use besides bash: nc from Debian's netcat-openbsd (the
// README's raw-protocol tour uses its -q flag) and curl.
func probeTools() error {
	if _, err := exec.LookPath("curl"); err != nil {
		return fmt.Errorf("curl not on PATH (Debian package curl): %w", err)
	}
	if _, err := exec.LookPath("nc"); err != nil {
		return fmt.Errorf("nc not on PATH (Debian package netcat-openbsd): %w", err)
	}
	var out bytes.Buffer
	cmd := exec.Command("nc", "-h")
	cmd.Stdout, cmd.Stderr = &out, &out
	cmd.Run() // usage, exit status 1 on some versions
	if !bytes.Contains(out.Bytes(), []byte("OpenBSD")) {
		return fmt.Errorf("nc is not OpenBSD netcat (Debian package netcat-openbsd); its -h says: %.200s", out.String())
	}
	return nil
}

// Tools makes sure nc (OpenBSD netcat) and curl are installed, with
// .ci/services.sh install tools when they are missing; when they cannot
// be, t fails in CI and is skipped elsewhere.
func Tools(t testing.TB) {
	t.Helper()
	if err := ensureInstalled("tools", probeTools); err != nil {
		unavailable(t, "nc (netcat-openbsd) and curl", err)
	}
}

// ZooKeeperPackage makes sure Debian's zookeeper package (java, the
// server jar ZooKeeperJar, ZkCliPath) is installed, without starting a
// server: for tests that start ZooKeeper the way a person would.
func ZooKeeperPackage(t testing.TB) {
	t.Helper()
	if err := ensureInstalled("zookeeper", probeZooKeeper); err != nil {
		unavailable(t, "the zookeeper package", err)
	}
}
