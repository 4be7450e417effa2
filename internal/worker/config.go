package worker

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"strings"
	"time"

	"github.com/mapagg/mapagg/internal/bus"
	"github.com/mapagg/mapagg/internal/shuffle"
	"github.com/mapagg/mapagg/jobs"
)

// ErrInvalidConfig is matched by every error Validate returns.
var ErrInvalidConfig = errors.New("worker: invalid config")

// Config configures a Worker. Zero fields take their defaults (withDefaults, the one place).
type Config struct {
	// ID names this worker in results and logs. Required.
	ID string
	// Concurrency is how many shards run at once. Default runtime.NumCPU().
	Concurrency int
	// Prefetch is the most shards held beyond the running ones, waiting their turn, when shards
	// are short: it hides the pull round trip. The worker holds fewer as shards get longer (none
	// extra from 100ms per shard), so a long job's shards are spread over every worker. Held
	// shards are kept alive, so they are never redelivered while this worker lives.
	// Default 4 × Concurrency, at least 32.
	Prefetch int
	// MaxAttempts is how many times a shard may run before its job fails. Default 3.
	MaxAttempts int
	// RetryBackoff is the redelivery delay after a failed attempt, times the attempt number.
	// Default 250ms.
	RetryBackoff time.Duration
	// ProgressInterval is how often every held shard is marked in progress (+WPI), by one ticker
	// per worker, so it is not redelivered. Default: a third of the bus's shard timeout.
	ProgressInterval time.Duration
	// InlinePartialLimit is the largest partial sent inside a result message; larger ones go to a
	// blob and travel as a reference. Default 256 KiB.
	InlinePartialLimit int
	// MapDelay is added to every map step. For demos and failover tests, which need a short job
	// to last long enough to kill its leader half-way; 0 in production. Default 0.
	MapDelay time.Duration
	// MemoryBudget is the memory of keyed tasks (map buffers, reduce merges), shared by the
	// slots: each running task gets MemoryBudget / Concurrency, and spills to TempDir beyond it.
	// Default DefaultMemoryBudget (an eighth of the machine's memory, at most 128 MiB).
	MemoryBudget int64
	// TempDir holds keyed tasks' spill files. Default os.TempDir().
	TempDir string
	// Registry resolves job types; the worker pulls the shards of exactly these types. Default
	// jobs.Default().
	Registry *jobs.Registry
	// Logger receives the worker's logs. Default slog.Default().
	Logger *slog.Logger
	// Metrics receives the start and end of every map step (package observe). Default: none.
	Metrics Metrics
	// JobLogs gives each shard attempt the logger of its job code (env.Logger() in Map,
	// jobs.LoggerFrom in a keyed Reduce) and the function that writes the attempt's lines to the
	// job's log, called once when the attempt ends. Default: job code logs to Logger, with the
	// job, shard and attempt. package node keeps the lines in the job's log (internal/joblog).
	JobLogs JobLogs
}

// JobLogs makes the logger of one shard attempt of job on this worker and the function that
// writes its lines (one append; no lines, no write). shard is the task's index. The worker calls
// flush with a context that is not cancelled when the worker stops: flush bounds its own write
// (joblog.FlushTimeout), and returns at once when the attempt logged nothing.
type JobLogs func(job string, shard, attempt int) (log *slog.Logger, flush func(context.Context) error)

// DefaultConfig returns the defaults (ID left empty; ProgressInterval 0 means a third of the
// bus's shard timeout).
func DefaultConfig() Config {
	n := runtime.NumCPU()
	return Config{Concurrency: n, Prefetch: max(4*n, 32), MaxAttempts: 3, RetryBackoff: 250 * time.Millisecond, InlinePartialLimit: 256 << 10}
}

// withDefaults sets every zero field to its default: the one place defaults are applied. The
// bus's config sets the progress interval.
func (c Config) withDefaults(b bus.Config) Config {
	d := DefaultConfig()
	c.Concurrency = cmp.Or(c.Concurrency, d.Concurrency)
	// Prefetch, ProgressInterval and MemoryBudget default from other fields, so stay explicit.
	if c.Prefetch == 0 {
		c.Prefetch = max(4*c.Concurrency, 32)
	}
	c.MaxAttempts = cmp.Or(c.MaxAttempts, d.MaxAttempts)
	c.RetryBackoff = cmp.Or(c.RetryBackoff, d.RetryBackoff)
	c.InlinePartialLimit = cmp.Or(c.InlinePartialLimit, d.InlinePartialLimit)
	if c.ProgressInterval == 0 {
		c.ProgressInterval = max(b.ShardTimeout/3, 100*time.Millisecond)
	}
	if c.MemoryBudget == 0 {
		c.MemoryBudget = DefaultMemoryBudget(c.Concurrency)
	}
	c.Registry = cmp.Or(c.Registry, jobs.Default())
	c.Logger = cmp.Or(c.Logger, slog.Default())
	c.Metrics = cmp.Or[Metrics](c.Metrics, noMetrics{})
	return c
}

// Validate reports every impossible setting and what to change (zero fields are valid: they take
// their defaults).
func (c Config) Validate() error {
	c = c.withDefaults(bus.DefaultConfig())
	var probs []string
	add := func(format string, args ...any) { probs = append(probs, fmt.Sprintf(format, args...)) }
	if c.ID == "" {
		add("ID is empty: name the worker, e.g. hostname-pid")
	}
	if c.Concurrency < 1 || c.Concurrency > 1024 {
		add("Concurrency %d: use 1 to 1024 (default the number of CPUs)", c.Concurrency)
	}
	if c.Prefetch < 0 || c.Concurrency+c.Prefetch > bus.MaxShardLimit {
		add("Prefetch %d: use 0 to %d minus Concurrency (default 4 × Concurrency)", c.Prefetch, bus.MaxShardLimit)
	}
	if c.MaxAttempts < 1 || c.MaxAttempts > 100 {
		add("MaxAttempts %d: use 1 to 100 (default 3)", c.MaxAttempts)
	}
	if c.InlinePartialLimit < 1024 || c.InlinePartialLimit > 4<<20 {
		add("InlinePartialLimit %d: use 1 KiB to 4 MiB, below the NATS payload limit (default 256 KiB)", c.InlinePartialLimit)
	}
	if c.MapDelay < 0 || c.MapDelay > time.Hour {
		add("MapDelay %v: use 0 to 1h (default 0)", c.MapDelay)
	}
	if c.MemoryBudget < int64(c.Concurrency)*shuffle.MinMemoryBytes || c.MemoryBudget > 1<<40 {
		add("MemoryBudget %d: use at least %d bytes a slot (512 KiB × Concurrency), at most 1 TiB (default 8 MiB a slot)", c.MemoryBudget, shuffle.MinMemoryBytes)
	}
	if c.RetryBackoff < 0 {
		add("RetryBackoff %v: must not be negative (default 250ms)", c.RetryBackoff)
	}
	if c.ProgressInterval < 0 {
		add("ProgressInterval %v: must not be negative (default a third of the shard timeout)", c.ProgressInterval)
	}
	if len(probs) == 0 {
		return nil
	}
	return fmt.Errorf("%w: %s", ErrInvalidConfig, strings.Join(probs, "; "))
}

// Metrics receives measurements of map steps. Calls must return quickly.
type Metrics interface {
	MapStarted(jobType string)
	MapFinished(jobType string, took time.Duration, err error)
}

type noMetrics struct{}

func (noMetrics) MapStarted(string)                        {}
func (noMetrics) MapFinished(string, time.Duration, error) {}
