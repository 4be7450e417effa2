package precise

import (
	"context"
	"encoding/binary"
	"errors"
	"os"
	"time"

	"golang.org/x/sys/unix"
)

// idle holds disarmed timerfds for reuse (a channel, not a sync.Pool: a pool would drop files
// without closing them).
var idle = make(chan *os.File, 64)

// kernelSleep sleeps d on a timerfd read through the runtime's poller. ok is false when the
// timerfd failed (then the caller sleeps what is left of d on a timer).
func kernelSleep(ctx context.Context, d time.Duration) (ok bool, err error) {
	var f *os.File
	select {
	case f = <-idle:
	default:
		fd, err := unix.TimerfdCreate(unix.CLOCK_MONOTONIC, unix.TFD_NONBLOCK|unix.TFD_CLOEXEC)
		if err != nil {
			return false, nil
		}
		f = os.NewFile(uintptr(fd), "timerfd") // non-blocking: read through the poller
	}
	spec := unix.ItimerSpec{Value: unix.NsecToTimespec(int64(d))}
	if err := unix.TimerfdSettime(int(f.Fd()), 0, &spec, nil); err != nil {
		_ = f.Close()
		return false, nil
	}
	// A cancelled ctx ends the read at once; that file is closed, not reused (its timer may
	// still be armed).
	stop := context.AfterFunc(ctx, func() { _ = f.SetReadDeadline(time.Unix(1, 0)) })
	var b [8]byte
	_, rerr := f.Read(b[:])
	if !stop() || rerr != nil {
		_ = f.Close()
		if errors.Is(rerr, os.ErrDeadlineExceeded) || ctx.Err() != nil {
			return true, ctx.Err()
		}
		return false, nil
	}
	if binary.NativeEndian.Uint64(b[:]) == 0 {
		_ = f.Close()
		return false, nil
	}
	select {
	case idle <- f:
	default:
		_ = f.Close()
	}
	return true, nil
}
