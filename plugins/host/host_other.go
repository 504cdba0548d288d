//go:build !linux

package host

import "os/exec"

// setPdeathsig is Linux only; elsewhere plugins.Serve's parent watch makes
// a plugin exit when its host is gone.
func setPdeathsig(*exec.Cmd) {}

// isTextBusy is Linux only (the ETXTBSY race of exec after a write).
func isTextBusy(error) bool { return false }
