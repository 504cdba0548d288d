package testsvc

import (
	"bytes"
	"fmt"
	"os/exec"
	"sync"
	"testing"
)

// pythonCheck is what a Python for the client's tests must run: Python >=
// 3.9 with pytest and setuptools (Debian's python3-pytest and
// python3-setuptools).
const pythonCheck = "import sys, pytest, setuptools; assert sys.version_info >= (3, 9), sys.version"

var (
	pythonMu   sync.Mutex
	pythonPath string
)

// findPython returns the first python3 that passes pythonCheck: the one on
// PATH, else Debian's /usr/bin/python3 (a PATH may put a python3 of its
// own, without Debian's packages, first).
func findPython() (string, error) {
	var errs []string
	cands := []string{"/usr/bin/python3"}
	if p, err := exec.LookPath("python3"); err == nil {
		cands = []string{p, "/usr/bin/python3"}
	}
	for _, p := range cands {
		var out bytes.Buffer
		cmd := exec.Command(p, "-c", pythonCheck)
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Run(); err != nil {
			errs = append(errs, fmt.Sprintf("%s: %v: %s", p, err, tail(out.Bytes(), 300)))
			continue
		}
		return p, nil
	}
	return "", fmt.Errorf("no python3 with pytest and setuptools (Debian packages python3-pytest, python3-setuptools): %v", errs)
}

func probePython() error {
	p, err := findPython()
	if err == nil {
		pythonPath = p
	}
	return err
}

// Python returns a python3 (>= 3.9) that imports pytest and setuptools,
// installing Debian's packages with .ci/services.sh install python when
// none does; when it cannot, t fails in CI and is skipped elsewhere.
func Python(t testing.TB) string {
	t.Helper()
	pythonMu.Lock()
	defer pythonMu.Unlock()
	if pythonPath != "" {
		return pythonPath
	}
	if err := ensureInstalled("python", probePython); err != nil {
		unavailable(t, "python3 with pytest", err)
	}
	return pythonPath
}
