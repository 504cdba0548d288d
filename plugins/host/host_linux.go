//go:build linux

package host

import (
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
