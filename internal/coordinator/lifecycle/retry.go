package lifecycle

import (
	"context"
	"errors"
	"time"

	"github.com/mapagg/mapagg/internal/coordinator/core"
	"github.com/mapagg/mapagg/internal/jobstore"
	"github.com/mapagg/mapagg/internal/protocol"
	"github.com/mapagg/mapagg/jobs"
)

// Automatic retries. A job submitted with --retries N that fails is submitted again by the leader
// as part of its clean-up. The new job is a spec copied from it (retries N-1, retry_of naming it)
// under an id derived from its own (protocol.RetryJobID). It is queued to become visible after a
// backoff (jobstore.Jobs.SubmitLater). Clean-up keeps the job's active marker until both are stored, so a leader dying half-way
// leaves the retry to the next one; the id makes it one job however often it is retried.

const maxRetryBackoff = 10 * time.Minute

// retryBackoff is the delay before the attempt-th retry: RetryBackoff doubled each time.
func (t *Lifecycle) retryBackoff(attempt int) time.Duration {
	d := t.cfg.RetryBackoff
	for i := 1; i < attempt && d < maxRetryBackoff; i++ {
		d *= 2
	}
	return min(d, maxRetryBackoff)
}

// retryFailed submits the retry of the failed job of cp if its spec asks for one: a copy of the
// whole spec (jobstore.RetrySpec) with one retry fewer. It returns false when the retry could not
// be stored (the caller keeps the job's active marker).
func (t *Lifecycle) retryFailed(ctx context.Context, cp *protocol.Checkpoint) bool {
	if cp.State != jobs.StateFailed {
		return true
	}
	js := t.jobStore()
	spec, err := js.Spec(ctx, cp.Job)
	switch {
	case errors.Is(err, jobstore.ErrNoSuchJob), errors.Is(err, protocol.ErrBadSpec):
		return true
	case err != nil:
		t.log.Warn("retry: read spec", "job", cp.Job, "err", err)
		return false
	case spec.Retries <= 0:
		return true
	}
	next, attempt := protocol.RetryJobID(spec.ID)
	rs := jobstore.RetrySpec(spec, next, t.cfg.Now())
	rs.Retries--
	delay := t.retryBackoff(attempt)
	queued, err := js.SubmitLater(ctx, rs, delay)
	switch {
	case errors.Is(err, protocol.ErrBadSpec):
		t.log.Warn("retry: encode spec", "job", cp.Job, "err", err)
		return true
	case err != nil:
		t.log.Warn("retry: submit", "job", cp.Job, "retry", next, "err", err)
		return false
	case !queued:
		return true // retried already
	}
	t.log.Info("failed job retried", "job", cp.Job, "retry", next, "attempt", attempt, "after", delay, "retries_left", rs.Retries)
	t.emit(core.Event{Kind: core.EventJobRetried, Epoch: t.fence.Epoch, Job: next, Count: attempt})
	return true
}
