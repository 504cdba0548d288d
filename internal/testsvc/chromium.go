package testsvc

import (
	"errors"
	"os/exec"
	"testing"
)

// chromiumNames are the executables Debian's chromium package (and
// other distributions) install.
var chromiumNames = []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable"}

func findChromium() (string, error) {
	for _, n := range chromiumNames {
		if p, err := exec.LookPath(n); err == nil {
			return p, nil
		}
	}
	return "", errors.New("no chromium on PATH (Debian package chromium)")
}

func probeChromium() error { _, err := findChromium(); return err }

// Chromium returns the path of a Chromium browser for headless tests
// (chromedp), installing Debian's chromium with .ci/services.sh when it
// is missing. One that cannot be installed fails t in CI and skips it
// elsewhere.
func Chromium(t testing.TB) string {
	t.Helper()
	if err := ensureInstalled("chromium", probeChromium); err != nil {
		unavailable(t, "chromium", err)
	}
	p, err := findChromium()
	if err != nil {
		unavailable(t, "chromium", err)
	}
	return p
}
