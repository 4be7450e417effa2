package node

import (
	"io"
	"log/slog"
	"os"
	"runtime/debug"
	"testing"
)

// The soft memory limit is the keyed budget plus headroom, never below what the former 128 MiB
// default gave (a leader holding a big aggregate needs it whatever the keyed budget).
func TestSetMemoryLimit(t *testing.T) {
	if os.Getenv("GOMEMLIMIT") != "" {
		t.Skip("GOMEMLIMIT is set")
	}
	old := debug.SetMemoryLimit(-1)
	t.Cleanup(func() { debug.SetMemoryLimit(old) })
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	for _, c := range []struct{ budget, want int64 }{
		{16 << 20, 256 << 20},
		{1 << 30, 1<<30 + 128<<20},
	} {
		setMemoryLimit(c.budget, log)
		if got := debug.SetMemoryLimit(-1); got != c.want {
			t.Errorf("budget %d MiB: limit %d MiB, want %d", c.budget>>20, got>>20, c.want>>20)
		}
	}
}
