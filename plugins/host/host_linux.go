//go:build linux

package host

import (
	"errors"
	"os/exec"
	"syscall"
)

// setPdeathsig makes the kernel SIGKILL the plugin when the host dies, even
// by SIGKILL, when Kill and Close never run.
//
// Caveat: Pdeathsig fires when the OS thread that forked the child exits,
// not the process. The Go runtime keeps threads alive, except one whose
// goroutine exits while locked to it (runtime.LockOSThread); were that the
// forking thread, the plugin would be killed early, and the monitor would
// restart it. The other direction is covered too: plugins.Serve polls its
// parent pid and exits when re-parented, the portable backstop.
func setPdeathsig(cmd *exec.Cmd) {
	if !usePdeathsig {
		return
	}
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
}

// isTextBusy reports an exec that failed with ETXTBSY: the binary was open
// for writing, as a just-written copy can be for a moment when another
// goroutine forks (the child holds the descriptor until its own exec).
func isTextBusy(err error) bool { return errors.Is(err, syscall.ETXTBSY) }
