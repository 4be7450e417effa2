package jobstore

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/mapagg/mapagg/internal/protocol"
	"github.com/mapagg/mapagg/store"
)

// Submit stores a validated spec (If-None-Match), queues its id and wakes the leader. If
// queueing fails the spec is deleted, so a job that Submit refuses leaves nothing behind. With
// InlineSpec a spec of at most protocol.InlineSpecMax bytes also travels in its queue message.
func (j *Jobs) Submit(ctx context.Context, spec *protocol.Spec) error {
	data, err := spec.Encode()
	if err != nil {
		return err
	}
	if _, err := j.Store.Put(ctx, protocol.SpecBlob(spec.ID), data, store.Cond{IfNoneMatch: true}); err != nil {
		return fmt.Errorf("write spec: %w", err)
	}
	text, hint := spec.ID, []byte(spec.ID)
	if j.InlineSpec && len(data) <= protocol.InlineSpecMax {
		text, hint = protocol.QueueText(spec.ID, data), protocol.SubmittedInline(spec.ID)
	}
	if err := j.Queue.Enqueue(ctx, text); err != nil {
		_ = j.Store.Delete(context.WithoutCancel(ctx), protocol.SpecBlob(spec.ID))
		return fmt.Errorf("queue job: %w", err)
	}
	if j.Notify != nil {
		_ = j.Notify.Announce(protocol.CtlSubmitted, hint)
	}
	return nil
}

// SubmitLater submits spec, whose id is derived from another job's (an automatic retry), so
// that its message becomes visible after delay. It may be called again for the same spec (by
// the next leader after a crash) and makes one job: the message goes first, then the spec, so
// a stored spec means its message was queued; the message is invisible well after the spec is
// stored. It returns false when the spec was stored already (nothing was queued).
func (j *Jobs) SubmitLater(ctx context.Context, spec *protocol.Spec, delay time.Duration) (bool, error) {
	data, err := spec.Encode()
	if err != nil {
		return false, err
	}
	if ok, err := j.Store.Exists(ctx, protocol.SpecBlob(spec.ID)); err != nil {
		return false, err
	} else if ok {
		return false, nil
	}
	if err := j.Delay.EnqueueAfter(ctx, spec.ID, delay); err != nil {
		return false, fmt.Errorf("queue job: %w", err)
	}
	if _, err := j.Store.Put(ctx, protocol.SpecBlob(spec.ID), data, store.Cond{IfNoneMatch: true}); err != nil && !errors.Is(err, store.ErrExists) {
		return false, fmt.Errorf("write spec: %w", err)
	}
	return true, nil
}

// RetrySpec is the spec of a retry of the job of old: a copy of the whole spec (type, params,
// priority, schedule and tick, dependencies, retries) under id, naming old as the job it
// retries, submitted at now. The leader's automatic retry then takes one off Retries.
func RetrySpec(old *protocol.Spec, id string, now time.Time) *protocol.Spec {
	rs := *old
	rs.ID, rs.RetryOf, rs.SubmittedAt = id, old.ID, now.UTC()
	rs.Params, rs.After = slices.Clone(old.Params), slices.Clone(old.After)
	if old.Tick != nil {
		tick := *old.Tick
		rs.Tick = &tick
	}
	return &rs
}
