package node

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"

	"github.com/mapagg/mapagg/internal/joblog"
	"github.com/mapagg/mapagg/internal/telemetry"
	"github.com/mapagg/mapagg/internal/why"
	"github.com/mapagg/mapagg/internal/worker"
)

// jobLogs gives each shard attempt on worker id a logger whose lines go to its job's log (the
// append blob <job>/log), with the worker, shard and attempt: job code's env.Logger(). The lines
// are kept while the attempt runs and written by one append when it ends. With tracing on
// (traced), every line carries the job's trace id (telemetry.TraceID, derived from the job id),
// so a line leads to the job's trace in the collector.
//
// The engine (internal/worker) knows only the worker.JobLogs function; the handler and the
// blob it writes are package joblog's, so the worker needs no storage client of its own and
// tests of the worker can give it any logger.
//
// The attempt is also recorded in running until its lines are written (the attempt's end), so
// the worker can say which of a job's tasks it runs and since when (internal/why).
func jobLogs(jl *joblog.Log, id string, traced bool, running *why.Running) worker.JobLogs {
	return func(job string, shard, attempt int) (*slog.Logger, func(context.Context) error) {
		a := &attemptLog{jl: jl, worker: id, job: job, shard: shard, attempt: attempt, traced: traced}
		a.started = running.Start(job, shard, attempt)
		a.running = running
		return slog.New(a), a.flush
	}
}

// attemptLog is the handler of one shard attempt's job code. Most attempts log nothing, and a
// worker runs tens of thousands of shards a second: the job-log handler (and its buffer) is
// made at the first line, and a flush of an attempt that logged nothing writes nothing.
type attemptLog struct {
	jl             *joblog.Log
	worker, job    string
	shard, attempt int
	traced         bool
	running        *why.Running
	started        why.Started
	once           sync.Once
	h              *joblog.Handler // set by once
	made           atomic.Bool     // h is set
}

func (a *attemptLog) handler() *joblog.Handler {
	a.once.Do(func() {
		var trace string
		if a.traced {
			trace = telemetry.TraceID(a.job)
		}
		a.h = joblog.NewHandler(a.jl, a.job, a.worker, a.shard, a.attempt, trace, nil)
		a.made.Store(true)
	})
	return a.h
}

// Enabled is the job log's level (joblog.NewHandler's default, Info), without making it.
func (a *attemptLog) Enabled(_ context.Context, level slog.Level) bool {
	return level >= slog.LevelInfo
}

func (a *attemptLog) Handle(ctx context.Context, r slog.Record) error {
	return a.handler().Handle(ctx, r)
}

func (a *attemptLog) WithAttrs(attrs []slog.Attr) slog.Handler { return a.handler().WithAttrs(attrs) }

func (a *attemptLog) WithGroup(name string) slog.Handler { return a.handler().WithGroup(name) }

// flush ends the attempt's running record and writes its lines, if it logged any.
func (a *attemptLog) flush(ctx context.Context) error {
	a.running.Done(a.started)
	if !a.made.Load() {
		return nil
	}
	return a.h.Flush(ctx)
}
