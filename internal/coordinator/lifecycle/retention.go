package lifecycle

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/mapagg/mapagg/internal/coordinator/core"
	"github.com/mapagg/mapagg/internal/jobstore"
	"github.com/mapagg/mapagg/internal/protocol"
	"github.com/mapagg/mapagg/jobs"
	"github.com/mapagg/mapagg/store"
)

// Retention. Every job that ends leaves an ended marker (protocol.EndedBlob) that names its end
// time, state and id, so the leader finds expired jobs by listing one prefix, never every job.
// A stage of the leader deletes each job whose retention for its state has passed, at most
// RetentionBatch a pass, with jobstore.Jobs.Expire: everything under its id, its stream
// messages, its markers. It is fenced as checkpoints are: a job whose checkpoint a newer term
// wrote ends the term.

// runRetention runs the ended-marker migration (retention_migrate.go), then deletes expired
// jobs every RetentionInterval until ctx ends. It returns core.ErrDeposed when it finds a newer
// term's writes.
func (t *Lifecycle) RunRetention(ctx context.Context) error {
	if err := t.migrateEnded(ctx); errors.Is(err, core.ErrDeposed) {
		return err
	} else if err != nil && ctx.Err() == nil {
		t.log.Warn("ended-marker migration stopped; the next term resumes it", "err", err)
	}
	keepJobs := t.cfg.RetainSucceeded <= 0 && t.cfg.RetainFailed <= 0
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(t.cfg.RetentionInterval):
		}
		// Idempotency records are deleted once their window has passed, whatever the jobs'
		// retention: an expired record names no job any more.
		if err := t.ExpireKeys(ctx); err != nil && ctx.Err() == nil {
			t.log.Warn("retention: idempotency records", "err", err)
		}
		if keepJobs {
			continue // keep every job
		}
		if err := t.Expire(ctx); errors.Is(err, core.ErrDeposed) {
			return err
		} else if err != nil && ctx.Err() == nil {
			t.log.Warn("retention", "err", err)
		}
	}
}

// ExpireKeys deletes up to RetentionBatch idempotency records older than
// jobstore.IdempotencyWindow (and records that cannot be read), found by
// jobstore.Jobs.ExpiredKeys. A submit that reuses an expired key creates its record again.
func (t *Lifecycle) ExpireKeys(ctx context.Context) error {
	names, err := t.jobStore().ExpiredKeys(ctx, t.cfg.Now())
	if err != nil {
		if errors.Is(err, store.ErrNotFound) {
			return nil // no container yet
		}
		return fmt.Errorf("list idempotency records: %w", err)
	}
	names = names[:min(len(names), max(t.cfg.RetentionBatch, 1))]
	deleted := 0
	for _, name := range names {
		if ctx.Err() != nil {
			break
		}
		if err := t.store.Delete(ctx, name); err != nil && !errors.Is(err, store.ErrNotFound) {
			t.log.Warn("retention: delete idempotency record", "record", name, "err", err)
			continue
		}
		deleted++
	}
	if deleted > 0 {
		t.log.Info("expired idempotency records deleted", "count", deleted)
	}
	return nil
}

// retention is how long a job ended in state is kept (0: for ever).
func (t *Lifecycle) retention(state jobs.State) time.Duration {
	if state == jobs.StateSucceeded {
		return t.cfg.RetainSucceeded
	}
	return t.cfg.RetainFailed
}

// expire deletes up to RetentionBatch expired jobs, oldest first.
func (t *Lifecycle) Expire(ctx context.Context) error {
	marks, err := t.store.List(ctx, protocol.EndedPrefix)
	if err != nil {
		return fmt.Errorf("list ended jobs: %w", err)
	}
	now := t.cfg.Now()
	deleted := 0
	for _, m := range marks {
		if deleted >= t.cfg.RetentionBatch || ctx.Err() != nil {
			break
		}
		id, state, at, err := protocol.ParseEndedBlob(m.Name)
		if err != nil {
			continue
		}
		keep := t.retention(state)
		if keep <= 0 || now.Before(at.Add(keep)) {
			continue
		}
		if err := t.jobStore().Expire(ctx, id, m.Name); err != nil {
			if errors.Is(err, core.ErrDeposed) {
				return err
			}
			t.log.Warn("retention: delete job", "job", id, "err", err)
			continue
		}
		deleted++
		t.log.Info("expired job deleted", "job", id, "state", state, "ended", at)
		t.emit(core.Event{Kind: core.EventJobDeleted, Epoch: t.fence.Epoch, Job: id, State: string(state)})
	}
	return nil
}

// jobStore is the leader's door to jobstore, where a job's life in storage is written once:
// its deletes fenced as its checkpoints are, its retries queued after a backoff.
func (t *Lifecycle) jobStore() *jobstore.Jobs {
	return &jobstore.Jobs{Store: t.store, Delay: t.queue, Purge: t.bus, Fence: t.fence.Fenced}
}

// markEnded stores the ended marker of the job of terminal checkpoint cp.
func (t *Lifecycle) MarkEnded(ctx context.Context, cp *protocol.Checkpoint) error {
	at := cp.UpdatedAt
	if cp.FinishedAt != nil {
		at = *cp.FinishedAt
	}
	if _, err := t.store.Put(ctx, protocol.EndedBlob(cp.Job, cp.State, at), nil, store.Cond{}); err != nil {
		return fmt.Errorf("write ended marker: %w", err)
	}
	return nil
}
