package node

import (
	"context"
	"log/slog"

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
		done := running.Start(job, shard, attempt)
		var trace string
		if traced {
			trace = telemetry.TraceID(job)
		}
		h := joblog.NewHandler(jl, job, id, shard, attempt, trace, nil)
		return slog.New(h), func(ctx context.Context) error { done(); return h.Flush(ctx) }
	}
}
