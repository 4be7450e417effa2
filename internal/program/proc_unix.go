//go:build unix

package program

import (
	"os/exec"
	"syscall"
)

// sysProcAttr puts the program in a process group of its own, so a kill reaches its children.
func sysProcAttr() *syscall.SysProcAttr { return &syscall.SysProcAttr{Setpgid: true} }

// killGroup kills the program's process group.
func killGroup(cmd *exec.Cmd) {
	if cmd.Process != nil {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	}
}
