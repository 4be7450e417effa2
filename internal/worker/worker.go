package worker

import (
	"context"
	"fmt"
	"log/slog"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mapagg/mapagg/internal/bus"
	"github.com/mapagg/mapagg/internal/precise"
	"github.com/mapagg/mapagg/internal/protocol"
	"github.com/mapagg/mapagg/internal/telemetry"
	"github.com/mapagg/mapagg/jobs"
	"github.com/mapagg/mapagg/store"
)

// Bus is what the worker needs of JetStream.
type Bus interface {
	Shards(ctx context.Context, opt bus.ShardOptions) (*bus.ShardFeed, error)
	Publish(m bus.Outgoing) (bus.Future, error)
	ResultSubject(job string) string
	DeadLetter(ctx context.Context, source string, data []byte, reason string) error
	Config() bus.Config
}

// PartialStore holds partials too large for a message.
type PartialStore interface {
	Put(ctx context.Context, name string, data []byte, cond store.Cond) (store.ETag, error)
}

var (
	_ Bus          = (*bus.Bus)(nil)
	_ PartialStore = (*store.Container)(nil)
)

// Stats counts what a worker did.
type Stats struct {
	Executed    int64 // map steps run (successful or not)
	Succeeded   int64 // results published
	Failed      int64 // map steps that returned an error or panicked
	GaveUp      int64 // shards reported failed after MaxAttempts
	Redelivered int64 // deliveries with attempt > 1
	Malformed   int64 // undecodable shard messages, dead-lettered
	Replayed    int64 // shard messages of ended jobs, dropped before running
	// PublishRetries counts result publishes retried after a failure (JetStream full, NATS away).
	PublishRetries int64
}

// Worker runs shards from the consumers of the job types it has.
type Worker struct {
	cfg   Config
	bus   Bus
	store PartialStore
	env   jobs.Env
	log   *slog.Logger

	// avgRun is a moving average of map-step durations (ns), -1 until the first one: it sets how
	// many shards are held beyond the running ones.
	avgRun atomic.Int64

	executed, succeeded, failed, gaveUp, redelivered, malformed atomic.Int64
	replayed, publishRetries                                    atomic.Int64
	pubErr                                                      atomic.Pointer[error] // the failure of a publish being retried
	ended                                                       *ended
	keyed                                                       keyedStats
}

// New returns a worker. env is what map steps read; partials is where large partials go.
func New(cfg Config, b Bus, partials PartialStore, env jobs.Env) (*Worker, error) {
	cfg = cfg.withDefaults(b.Config())
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if st := b.Config().ShardTimeout; cfg.ProgressInterval >= st {
		return nil, fmt.Errorf("%w: ProgressInterval %v: use less than the bus's shard timeout %v (default a third of it)", ErrInvalidConfig, cfg.ProgressInterval, st)
	}
	w := &Worker{cfg: cfg, bus: b, store: partials, env: env, log: cfg.Logger.With("component", "worker")}
	if ex, ok := partials.(Propser); ok {
		w.ended = &ended{st: ex, gone: map[string]struct{}{}, checked: map[string]time.Time{}}
	}
	w.avgRun.Store(-1)
	return w, nil
}

// Stats returns the counters so far.
func (w *Worker) Stats() Stats {
	return Stats{Executed: w.executed.Load(), Succeeded: w.succeeded.Load(), Failed: w.failed.Load(),
		GaveUp: w.gaveUp.Load(), Redelivered: w.redelivered.Load(), Malformed: w.malformed.Load(), Replayed: w.replayed.Load(),
		PublishRetries: w.publishRetries.Load()}
}

// PublishErr is why results cannot be published now (JetStream out of space, NATS away), or nil.
// It clears with the next stored result message.
func (w *Worker) PublishErr() error {
	if p := w.pubErr.Load(); p != nil {
		return fmt.Errorf("results cannot be published (retrying; shards held): %w", *p)
	}
	return nil
}

// limit is how many shards the worker holds at once: its slots, plus enough waiting shards to hide
// the pull round trip when shards are short. It holds none extra once they take 100ms or more, and
// none until the first one ran, so a few long shards spread over every worker.
func (w *Worker) limit() int {
	c := w.cfg.Concurrency
	avg := time.Duration(w.avgRun.Load())
	if avg < 0 || avg >= 100*time.Millisecond {
		return c
	}
	extra := c * int((5*time.Millisecond+avg-1)/max(avg, time.Microsecond))
	return c + min(max(extra, c), w.cfg.Prefetch)
}

func (w *Worker) observe(d time.Duration) {
	old := w.avgRun.Load()
	if old < 0 {
		w.avgRun.Store(int64(d))
		return
	}
	w.avgRun.Store(old - old/8 + int64(d)/8)
}

// Run processes shards until ctx ends, whether or not there is a leader. On return, shards it had
// not finished are handed back for redelivery at once, and results it published are acknowledged.
func (w *Worker) Run(ctx context.Context) error {
	types := w.cfg.Registry.Types()
	feed, err := w.bus.Shards(ctx, bus.ShardOptions{Types: types, Limit: w.limit, KeepAlive: w.cfg.ProgressInterval})
	if err != nil {
		return fmt.Errorf("worker: %w", err)
	}
	defer feed.Stop()
	w.log.Info("processing shards", "types", types, "concurrency", w.cfg.Concurrency, "prefetch", w.cfg.Prefetch, "max_attempts", w.cfg.MaxAttempts)

	// Slots hand finished shards to one publisher, which puts every result available at that moment
	// into one message per job (no waiting: one result when idle, many under load). One settler
	// then settles every shard of a message, in publish order, once JetStream has stored it. A
	// crash in between only causes a redelivery (and duplicate results the coordinator drops).
	done := make(chan []outcome, bus.MaxShardLimit)
	settles := make(chan settle, bus.MaxShardLimit)
	var tail sync.WaitGroup
	tail.Add(2)
	go func() {
		defer tail.Done()
		defer close(settles)
		w.publisher(done, settles)
	}()
	go func() {
		defer tail.Done()
		for s := range settles {
			w.settle(ctx, s)
		}
	}()
	var slots sync.WaitGroup
	for range w.cfg.Concurrency {
		slots.Add(1)
		go func() {
			defer slots.Done()
			for d := range feed.C {
				w.handle(ctx, d, done)
			}
		}()
	}
	<-ctx.Done()
	feed.Stop()
	slots.Wait()
	close(done)
	tail.Wait()
	return nil
}

// run executes the map step with panic recovery. The shard is kept alive meanwhile by the feed.
func (w *Worker) run(ctx context.Context, attempt int, m *protocol.ShardMsg) (partial []byte, dur time.Duration, err error) {
	w.executed.Add(1)
	job, err := w.cfg.Registry.Lookup(m.Type)
	if err != nil {
		return nil, 0, err
	}
	start := time.Now()
	w.cfg.Metrics.MapStarted(m.Type)
	log, flush := w.jobLog(m.Job, m.Index, attempt)
	// The task's span in its job's trace: "shard", or "map"/"reduce" (runKeyed renames it).
	var span telemetry.Span
	if telemetry.FromContext(ctx) != nil { // the attributes cost allocations: only when tracing
		ctx, span = telemetry.StartIn(ctx, m.Job, "shard", telemetry.Int("shard", m.Index), telemetry.Int("attempt", attempt),
			telemetry.Str("worker", w.cfg.ID), telemetry.Str("type", m.Type))
	}
	defer func() {
		dur = time.Since(start)
		if r := recover(); r != nil {
			w.log.Error("map step panicked", "job", m.Job, "shard", m.Index, "panic", r, "stack", string(debug.Stack()))
			err = fmt.Errorf("panic: %v", r)
			log.Error("map step panicked", "panic", fmt.Sprint(r))
		}
		span.EndErr(err)
		w.cfg.Metrics.MapFinished(m.Type, dur, err)
		w.flushJobLog(ctx, m.Job, flush)
	}()
	env := jobs.EnvWithLogger(w.env, log)
	ctx = jobs.ContextWithLogger(ctx, log)
	if err := precise.Sleep(ctx, w.cfg.MapDelay); err != nil {
		return nil, 0, err
	}
	if m.Kind == protocol.KindKeyed {
		kj := jobs.KeyedForm(job)
		if kj == nil {
			return nil, 0, fmt.Errorf("%w: a keyed task of job type %q, which is not keyed on this worker", jobs.ErrPermanent, m.Type)
		}
		partial, err = w.runKeyed(ctx, kj, env, m, attempt) // keyed.go
		return partial, 0, err
	}
	partial, err = job.Map(ctx, env, jobs.Task{JobID: m.Job, Index: m.Index, Attempt: attempt, Shard: m.Shard})
	return partial, 0, err
}

// jobLog returns the logger of one shard attempt's job code and the function that writes its
// lines (Config.JobLogs); without JobLogs, lines go to the worker's log.
func (w *Worker) jobLog(job string, shard, attempt int) (*slog.Logger, func(context.Context) error) {
	if w.cfg.JobLogs != nil {
		if log, flush := w.cfg.JobLogs(job, shard, attempt); log != nil && flush != nil {
			return log, flush
		}
	}
	return w.cfg.Logger.With("job", job, "shard", shard, "attempt", attempt), func(context.Context) error { return nil }
}

// flushJobLog writes an attempt's lines to its job's log, even when the worker is stopping
// (the attempt's lines are the ones that explain it): flush bounds its own write (JobLogs), so
// an attempt that logged nothing costs no timer. A failure costs the lines, not the shard.
func (w *Worker) flushJobLog(ctx context.Context, job string, flush func(context.Context) error) {
	if err := flush(context.WithoutCancel(ctx)); err != nil {
		w.log.Warn("write a shard attempt's lines to its job's log", "job", job, "err", err)
	}
}
