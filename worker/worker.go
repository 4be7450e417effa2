package worker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mapagg/mapagg/bus"
	"github.com/mapagg/mapagg/internal/protocol"
	"github.com/mapagg/mapagg/jobs"
	"github.com/mapagg/mapagg/store"
)

// Config configures a Worker. Zero fields take their defaults.
type Config struct {
	// ID names this worker in results and logs. Required.
	ID string
	// Concurrency is how many shards run at once. Default runtime.NumCPU().
	Concurrency int
	// MaxAttempts is how many times a shard may run before its job fails. Default 3.
	MaxAttempts int
	// RetryBackoff is the redelivery delay after a failed attempt, times the attempt number.
	// Default 250ms.
	RetryBackoff time.Duration
	// ProgressInterval is how often a running shard is marked in progress (+WPI) so it is not
	// redelivered. Default: a third of the bus's shard timeout.
	ProgressInterval time.Duration
	// InlinePartialLimit is the largest partial sent inside a result message; larger ones go to a
	// blob and travel as a reference. Default 256 KiB.
	InlinePartialLimit int
	// MapDelay is added to every map step. For demos and failover tests, which need a short job
	// to last long enough to kill its leader half-way; 0 in production. Default 0.
	MapDelay time.Duration
	// Registry resolves job types. Default jobs.Default().
	Registry *jobs.Registry
	// Logger receives the worker's logs. Default slog.Default().
	Logger *slog.Logger
	// Metrics receives the start and end of every map step (package observe). Default: none.
	Metrics Metrics
}

// Metrics receives measurements of map steps. Calls must return quickly.
type Metrics interface {
	MapStarted(jobType string)
	MapFinished(jobType string, took time.Duration, err error)
}

type noMetrics struct{}

func (noMetrics) MapStarted(string)                        {}
func (noMetrics) MapFinished(string, time.Duration, error) {}

// DefaultConfig returns the defaults (ID left empty).
func DefaultConfig() Config {
	return Config{Concurrency: runtime.NumCPU(), MaxAttempts: 3, RetryBackoff: 250 * time.Millisecond, InlinePartialLimit: 256 << 10}
}

// Validate refuses impossible settings.
func (c Config) Validate() error {
	switch {
	case c.ID == "":
		return errors.New("worker: an ID is required")
	case c.Concurrency < 1 || c.Concurrency > 4096:
		return fmt.Errorf("worker: concurrency %d: must be 1 to 4096", c.Concurrency)
	case c.MaxAttempts < 1 || c.MaxAttempts > 100:
		return fmt.Errorf("worker: max attempts %d: must be 1 to 100", c.MaxAttempts)
	case c.InlinePartialLimit < 1024 || c.InlinePartialLimit > 4<<20:
		return fmt.Errorf("worker: inline partial limit %d: must be 1 KiB to 4 MiB (NATS payload)", c.InlinePartialLimit)
	case c.MapDelay < 0 || c.MapDelay > time.Hour:
		return fmt.Errorf("worker: map delay %v: must be 0 to 1h", c.MapDelay)
	case c.RetryBackoff < 0:
		return fmt.Errorf("worker: retry backoff %v: must not be negative", c.RetryBackoff)
	}
	return nil
}

// Bus is what the worker needs of JetStream.
type Bus interface {
	Shards(ctx context.Context, prefetch int) (*bus.Feed, error)
	PublishAsync(m bus.Outgoing) <-chan error
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
}

// Worker runs shards from the shared consumer.
type Worker struct {
	cfg   Config
	bus   Bus
	store PartialStore
	env   jobs.Env
	log   *slog.Logger

	executed, succeeded, failed, gaveUp, redelivered, malformed atomic.Int64
}

// New returns a worker. env is what map steps read; partials is where large partials go.
func New(cfg Config, b Bus, partials PartialStore, env jobs.Env) (*Worker, error) {
	d := DefaultConfig()
	if cfg.Concurrency == 0 {
		cfg.Concurrency = d.Concurrency
	}
	if cfg.MaxAttempts == 0 {
		cfg.MaxAttempts = d.MaxAttempts
	}
	if cfg.RetryBackoff == 0 {
		cfg.RetryBackoff = d.RetryBackoff
	}
	if cfg.InlinePartialLimit == 0 {
		cfg.InlinePartialLimit = d.InlinePartialLimit
	}
	if cfg.ProgressInterval == 0 {
		cfg.ProgressInterval = max(b.Config().ShardTimeout/3, 100*time.Millisecond)
	}
	if cfg.Registry == nil {
		cfg.Registry = jobs.Default()
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Metrics == nil {
		cfg.Metrics = noMetrics{}
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Worker{cfg: cfg, bus: b, store: partials, env: env, log: cfg.Logger.With("component", "worker")}, nil
}

// Stats returns the counters so far.
func (w *Worker) Stats() Stats {
	return Stats{Executed: w.executed.Load(), Succeeded: w.succeeded.Load(), Failed: w.failed.Load(),
		GaveUp: w.gaveUp.Load(), Redelivered: w.redelivered.Load(), Malformed: w.malformed.Load()}
}

// Run processes shards until ctx ends, whether or not there is a leader. On return, shards it had
// not finished are handed back for redelivery at once, and results it published are acknowledged.
func (w *Worker) Run(ctx context.Context) error {
	feed, err := w.bus.Shards(ctx, w.cfg.Concurrency)
	if err != nil {
		return fmt.Errorf("worker: %w", err)
	}
	defer feed.Stop()
	w.log.Info("processing shards", "concurrency", w.cfg.Concurrency, "max_attempts", w.cfg.MaxAttempts)

	// pending tracks results whose publish is in flight; the shard is acked when JetStream has
	// stored the result, so a crash in between only causes a redelivery (and a duplicate result
	// the coordinator drops).
	var pending sync.WaitGroup
	var slots sync.WaitGroup
	for range w.cfg.Concurrency {
		slots.Add(1)
		go func() {
			defer slots.Done()
			for d := range feed.C {
				w.handle(ctx, d, &pending)
			}
		}()
	}
	<-ctx.Done()
	feed.Stop()
	slots.Wait()
	pending.Wait()
	return nil
}

func (w *Worker) handle(ctx context.Context, d *bus.Delivery, pending *sync.WaitGroup) {
	m, err := protocol.DecodeShardMsg(d.Data())
	if err != nil {
		w.malformed.Add(1)
		w.log.Error("malformed shard message; dead-lettered", "subject", d.Subject(), "err", err)
		if derr := w.bus.DeadLetter(context.WithoutCancel(ctx), "shards", d.Data(), err.Error()); derr != nil {
			w.log.Error("dead-letter failed", "err", derr)
			_ = d.Nak(time.Second)
			return
		}
		_ = d.Term(err.Error())
		return
	}
	log := w.log.With("job", m.Job, "shard", m.Index, "attempt", d.Attempt())
	if d.Attempt() > 1 {
		w.redelivered.Add(1)
	}
	res := protocol.ResultMsg{Job: m.Job, Index: m.Index, Epoch: m.Epoch, Attempt: d.Attempt(), Worker: w.cfg.ID}
	if d.Attempt() > w.cfg.MaxAttempts {
		// Every earlier attempt ended without a verdict: the worker running it died or the shard
		// outlived the shard timeout.
		res.Error = fmt.Sprintf("shard %d of job %s was delivered %d times without finishing (a worker crashed or the shard exceeded the shard timeout); the limit is %d attempts",
			m.Index, m.Job, d.Attempt()-1, w.cfg.MaxAttempts)
		w.gaveUp.Add(1)
		log.Warn("shard gave up", "reason", res.Error)
		w.publish(ctx, d, &res, pending, true)
		return
	}

	partial, dur, err := w.run(ctx, d, m)
	res.Micros = dur.Microseconds()
	if ctx.Err() != nil {
		_ = d.Nak(0) // shutting down: let another worker take it now
		return
	}
	if err != nil {
		w.failed.Add(1)
		if d.Attempt() < w.cfg.MaxAttempts {
			log.Warn("shard failed; will retry", "err", err)
			_ = d.Nak(w.cfg.RetryBackoff * time.Duration(d.Attempt()))
			return
		}
		res.Error = fmt.Sprintf("shard %d of job %s failed after %d attempts: last error: %v", m.Index, m.Job, d.Attempt(), err)
		w.gaveUp.Add(1)
		log.Error("shard failed for good", "err", err)
		w.publish(ctx, d, &res, pending, true)
		return
	}
	if len(partial) > w.cfg.InlinePartialLimit {
		name := protocol.PartialBlob(m.Job, m.Index, d.Attempt())
		if _, err := w.store.Put(ctx, name, partial, store.Cond{}); err != nil {
			log.Warn("storing large partial failed; will retry", "err", err)
			_ = d.Nak(w.cfg.RetryBackoff)
			return
		}
		res.Ref = name
	} else {
		res.Partial = partial
	}
	w.publish(ctx, d, &res, pending, false)
}

// run executes the map step with panic recovery, marking the shard in progress while it runs.
func (w *Worker) run(ctx context.Context, d *bus.Delivery, m *protocol.ShardMsg) (partial []byte, dur time.Duration, err error) {
	w.executed.Add(1)
	job, err := w.cfg.Registry.Lookup(m.Type)
	if err != nil {
		return nil, 0, err
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		t := time.NewTicker(w.cfg.ProgressInterval)
		defer t.Stop()
		for {
			select {
			case <-stop:
				return
			case <-t.C:
				_ = d.InProgress()
			}
		}
	}()
	defer func() {
		close(stop)
		wg.Wait()
	}()
	start := time.Now()
	w.cfg.Metrics.MapStarted(m.Type)
	defer func() {
		dur = time.Since(start)
		if r := recover(); r != nil {
			w.log.Error("map step panicked", "job", m.Job, "shard", m.Index, "panic", r, "stack", string(debug.Stack()))
			err = fmt.Errorf("panic: %v", r)
		}
		w.cfg.Metrics.MapFinished(m.Type, dur, err)
	}()
	if w.cfg.MapDelay > 0 {
		select {
		case <-ctx.Done():
			return nil, 0, ctx.Err()
		case <-time.After(w.cfg.MapDelay):
		}
	}
	partial, err = job.Map(ctx, w.env, jobs.Task{JobID: m.Job, Index: m.Index, Attempt: d.Attempt(), Shard: m.Shard})
	return partial, 0, err
}

// publish stores the result in JetStream and then settles the shard: Ack on success, Term when
// the result reports the shard failed for good. If the publish fails, the shard is redelivered.
func (w *Worker) publish(ctx context.Context, d *bus.Delivery, res *protocol.ResultMsg, pending *sync.WaitGroup, final bool) {
	data, err := res.Encode()
	if err != nil {
		_ = d.Nak(w.cfg.RetryBackoff)
		return
	}
	done := w.bus.PublishAsync(bus.Outgoing{
		Subject: w.bus.ResultSubject(res.Job),
		MsgID:   protocol.ResultMsgID(res.Job, res.Index, res.Attempt),
		Data:    data,
	})
	pending.Add(1)
	go func() {
		defer pending.Done()
		if err := <-done; err != nil {
			w.log.Warn("publishing result failed; shard will be redelivered", "job", res.Job, "shard", res.Index, "err", err)
			_ = d.Nak(w.cfg.RetryBackoff)
			return
		}
		if final {
			_ = d.Term(res.Error)
			return
		}
		w.succeeded.Add(1)
		_ = d.Ack()
	}()
}
