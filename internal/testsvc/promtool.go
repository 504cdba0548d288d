package testsvc

import (
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"testing"
	"time"
)

// promtool is Prometheus's checker, from Debian's prometheus package
// (.ci/services.sh install promtool).
func probePromtool() error {
	if _, err := exec.LookPath("promtool"); err != nil {
		return fmt.Errorf("promtool not on PATH (Debian package prometheus): %w", err)
	}
	return nil
}

// PromtoolCheckMetrics runs `promtool check metrics` on a scrape (the
// text exposition format) and returns its findings: "" when the metrics
// are clean. A missing promtool is installed with .ci/services.sh; one
// that cannot be installed fails t in CI and skips it elsewhere.
func PromtoolCheckMetrics(t testing.TB, scrape []byte) string {
	t.Helper()
	if err := ensureInstalled("promtool", probePromtool); err != nil {
		unavailable(t, "promtool", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "promtool", "check", "metrics")
	cmd.Stdin = bytes.NewReader(scrape)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	if err != nil && out.Len() == 0 {
		t.Fatalf("testsvc: promtool check metrics: %v", err)
	}
	return out.String() // promtool exits non-zero when it reports problems
}
