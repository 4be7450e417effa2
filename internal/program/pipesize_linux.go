package program

import (
	"os"
	"syscall"
)

// fSetPipeSz is F_SETPIPE_SZ (fcntl(2)).
const fSetPipeSz = 1031

// growPipe asks for a pipe buffer of n bytes (Linux caps it at /proc/sys/fs/pipe-max-size, 1 MiB
// by default): a program then reads a frame of its input in one read, without waiting for the
// worker to be scheduled between pieces of 64 KiB. A refusal is not an error.
func growPipe(f *os.File, n int) {
	rc, err := f.SyscallConn()
	if err != nil {
		return
	}
	_ = rc.Control(func(fd uintptr) {
		_, _, _ = syscall.Syscall(syscall.SYS_FCNTL, fd, fSetPipeSz, uintptr(n))
	})
}
