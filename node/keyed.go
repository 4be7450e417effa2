package node

import (
	"fmt"
	"log/slog"
	"os"
	"runtime/debug"
	"strconv"
	"strings"
)

// registerKeyedFlags adds the keyed jobs' settings: the memory of keyed tasks and the default
// partition count.
func registerKeyedFlags(fs *flagSet, c *Config) {
	fs.Var((*byteSize)(&c.MemoryBudget), "memory-budget", "memory of keyed tasks (map buffers, reduce merges), shared by the running tasks; beyond it they spill to local disk: bytes, or with KiB, MiB, GiB (default an eighth of the machine's memory or cgroup limit, at most 128MiB, at least 8MiB × --concurrency)")
	fs.IntVar(&c.Partitions, "partitions", 0, "least reduce partitions (output blobs) of a keyed job that does not choose, 1 to 10000; a bigger input gets one for every 4 map tasks (default 8; the leader's setting counts)")
}

// byteSize is a flag of bytes: a number, optionally with a unit (KiB, MiB, GiB, or KB, MB, GB
// taken as the same powers of two).
type byteSize int64

func (b *byteSize) String() string {
	if b == nil || *b == 0 {
		return ""
	}
	n := int64(*b)
	for _, u := range []struct {
		name string
		size int64
	}{{"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}} {
		if n%u.size == 0 {
			return fmt.Sprintf("%d%s", n/u.size, u.name)
		}
	}
	return strconv.FormatInt(n, 10)
}

func (b *byteSize) Set(s string) error {
	n, err := parseByteSize(s)
	if err != nil {
		return err
	}
	*b = byteSize(n)
	return nil
}

func parseByteSize(s string) (int64, error) {
	t := strings.TrimSpace(s)
	mult := int64(1)
	for _, u := range []struct {
		suffix string
		size   int64
	}{{"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}, {"GB", 1 << 30}, {"MB", 1 << 20}, {"KB", 1 << 10}, {"G", 1 << 30}, {"M", 1 << 20}, {"K", 1 << 10}, {"B", 1}} {
		if v, ok := strings.CutSuffix(t, u.suffix); ok {
			t, mult = strings.TrimSpace(v), u.size
			break
		}
	}
	n, err := strconv.ParseInt(t, 10, 64)
	if err != nil || n < 0 || n > (1<<40)/mult {
		return 0, fmt.Errorf("%q is not a size: use bytes, or a number with KiB, MiB or GiB (e.g. 256MiB), up to 1TiB", s)
	}
	return n * mult, nil
}

// memoryLimitHeadroom is what a worker needs beside its keyed tasks' budget: the runtime, NATS
// and storage clients, shard and result buffers.
const memoryLimitHeadroom = 128 << 20

// memoryLimitFloor is the least budget the soft memory limit is computed from.
const memoryLimitFloor = 128 << 20

// setMemoryLimit sets the Go runtime's soft memory limit to the keyed budget plus headroom,
// unless GOMEMLIMIT is set: without it the collector lets the heap grow to twice what keyed
// tasks hold before it runs.
func setMemoryLimit(budget int64, log *slog.Logger) {
	if os.Getenv("GOMEMLIMIT") != "" {
		return
	}
	// At least what the former 128 MiB default gave: a leader holding a big aggregate must not
	// run its collector without pause because the keyed budget is small.
	limit := max(budget, memoryLimitFloor) + memoryLimitHeadroom
	debug.SetMemoryLimit(limit)
	log.Debug("memory limit", "bytes", limit)
}
