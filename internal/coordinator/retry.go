package coordinator

import (
	"context"
	"errors"
	"time"

	"github.com/mapagg/mapagg/internal/protocol"
	"github.com/mapagg/mapagg/jobs"
	"github.com/mapagg/mapagg/store"
)

// Automatic retries. A job submitted with --retries N that fails is submitted again by the leader
// as part of its clean-up. The new job is a spec copied from it (retries N-1, retry_of naming it)
// under an id derived from its own (protocol.RetryJobID). It is queued to become visible after a
// backoff. Clean-up keeps the job's active marker until both are stored, so a leader dying half-way
// leaves the retry to the next one; the id makes it one job however often it is retried.

const maxRetryBackoff = 10 * time.Minute

// retryBackoff is the delay before the attempt-th retry: RetryBackoff doubled each time.
func (t *lifecycle) retryBackoff(attempt int) time.Duration {
	d := t.cfg.RetryBackoff
	for i := 1; i < attempt && d < maxRetryBackoff; i++ {
		d *= 2
	}
	return min(d, maxRetryBackoff)
}

// retryFailed submits the retry of the failed job of cp if its spec asks for one. It returns
// false when the retry could not be stored (the caller keeps the job's active marker).
func (t *lifecycle) retryFailed(ctx context.Context, cp *protocol.Checkpoint) bool {
	if cp.State != jobs.StateFailed {
		return true
	}
	data, _, err := t.store.Get(ctx, protocol.SpecBlob(cp.Job))
	if errors.Is(err, store.ErrNotFound) {
		return true
	}
	if err != nil {
		t.log.Warn("retry: read spec", "job", cp.Job, "err", err)
		return false
	}
	spec, err := protocol.ParseSpec(data)
	if err != nil || spec.Retries <= 0 {
		return true
	}
	next, attempt := protocol.RetryJobID(spec.ID)
	rs := *spec
	rs.ID, rs.Retries, rs.RetryOf, rs.SubmittedAt = next, spec.Retries-1, spec.ID, t.cfg.Now().UTC()
	b, err := rs.Encode()
	if err != nil {
		t.log.Warn("retry: encode spec", "job", cp.Job, "err", err)
		return true
	}
	// The message first, then the spec: a spec stored means its message was queued too, so a
	// clean-up run again (a new leader's) queues nothing twice. The message stays invisible for
	// the backoff, well after the spec is stored.
	if ok, err := t.store.Exists(ctx, protocol.SpecBlob(next)); err != nil {
		return false
	} else if ok {
		return true // retried already
	}
	delay := t.retryBackoff(attempt)
	if err := t.queue.EnqueueAfter(ctx, next, delay); err != nil {
		t.log.Warn("retry: queue", "job", cp.Job, "retry", next, "err", err)
		return false
	}
	if _, err := t.store.Put(ctx, protocol.SpecBlob(next), b, store.Cond{IfNoneMatch: true}); err != nil && !errors.Is(err, store.ErrExists) {
		t.log.Warn("retry: write spec", "job", cp.Job, "retry", next, "err", err)
		return false
	}
	t.log.Info("failed job retried", "job", cp.Job, "retry", next, "attempt", attempt, "after", delay, "retries_left", rs.Retries)
	t.emit(Event{Kind: EventJobRetried, Epoch: t.epoch, Job: next, Count: attempt})
	return true
}

// retryOf returns the job that retries failed job id, if its spec asks for one ("" if not).
func (t jobReader) retryOf(ctx context.Context, id string) (string, error) {
	data, _, err := t.store.Get(ctx, protocol.SpecBlob(id))
	if errors.Is(err, store.ErrNotFound) {
		return "", nil
	}
	if err != nil {
		return "", err
	}
	spec, err := protocol.ParseSpec(data)
	if err != nil || spec.Retries <= 0 {
		return "", nil
	}
	next, _ := protocol.RetryJobID(id)
	return next, nil
}
