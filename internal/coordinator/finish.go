package coordinator

import (
	"context"
	"errors"
	"time"

	"github.com/mapagg/mapagg/internal/protocol"
	"github.com/mapagg/mapagg/jobs"
	"github.com/mapagg/mapagg/store"
)

// checkCancels looks for cancel markers of active jobs (a backstop for the NATS hint).
func (t *term) checkCancels(ctx context.Context) {
	for j := range t.tab.all() {
		if j.cp.State.Terminal() {
			continue
		}
		if ok, err := t.store.Exists(ctx, protocol.CancelBlob(j.id)); err == nil && ok {
			t.cancel(ctx, j.id, "cancelled by user")
		}
	}
}

// cancel ends a running job as cancelled (or failed, via fail); the terminal checkpoint is
// written at the next checkpoint tick, then its queued shards are purged.
func (t *term) cancel(ctx context.Context, id, why string) {
	j := t.tab.get(id)
	if j == nil {
		t.tab.setWaiting(id, false) // a waiting job: claim reads the marker and ends it
		if err := t.ensure(ctx, id); err != nil || t.tab.get(id) == nil {
			return
		}
		j = t.tab.get(id)
	}
	t.end(j, jobs.StateCancelled, why)
}

func (t *term) end(j *job, state jobs.State, why string) {
	if j.cp.State.Terminal() {
		return
	}
	if j.stopDispatch != nil {
		j.stopDispatch()
	}
	j.cp.State, j.cp.Error, j.dirty = state, why, true
	t.log.Info("job ending", "job", j.id, "state", state, "reason", why)
}

// retire removes an ended job from the term and cleans up after it in the background.
func (t *term) retire(ctx context.Context, j *job) {
	t.tab.finish(j)         // marks it being cleaned up, too
	t.rebalance(time.Now()) // its type's other jobs share its budget
	if t.tab.after.Load() {
		nonBlocking(t.kick, struct{}{})
	}
	t.log.Info("job finished", "job", j.id, "state", j.cp.State, "shards", j.cp.Total,
		"duplicates", j.cp.Duplicates, "error", j.cp.Error)
	var why error
	if j.cp.Error != "" {
		why = errors.New(j.cp.Error)
	}
	t.emit(Event{Kind: EventJobFinished, Epoch: t.epoch, Job: j.id, State: string(j.cp.State), Count: j.cp.DoneCount, Err: why})
	cp := j.cp
	here := endedHere{etag: j.etag, meta: j.w.meta, partials: !j.fresh || j.refs, sweep: true}
	t.cleanups.Add(1)
	go func() {
		defer t.cleanups.Done()
		if !t.life.clean(context.WithoutCancel(ctx), &cp, here) {
			t.tab.setCleaning(cp.Job, false) // else the sweeper does, once the marker is gone
		}
		if t.tab.after.Load() {
			nonBlocking(t.kick, struct{}{}) // its result is stored: a job after it may start
		}
	}()
}

// endedHere is what the term that ended a job knows of it, which spares its clean-up reads.
type endedHere struct {
	etag store.ETag        // the final checkpoint's ETag ("": not known)
	meta map[string]string // the status record stored with it
	// partials: large partials of the job may exist (their folder is listed). A job this term
	// planned, and of which no result named one, has none.
	partials bool
	// sweep: the active marker goes to the term's sweeper (sweep.go), not deleted at once.
	sweep bool
}

// cleanup runs after a job's terminal checkpoint: the result copy, the queued shards, the large
// partials and the active marker. Each step is idempotent; a leader that dies half-way leaves the
// rest to the next one (claim calls cleanup for terminal jobs still marked active).
func (l *lifecycle) cleanup(ctx context.Context, cp *protocol.Checkpoint) {
	l.clean(ctx, cp, endedHere{partials: true})
}

// clean is cleanup with what the term that ended the job knows. It reports whether it handed the
// active marker to the sweeper (here.sweep).
func (l *lifecycle) clean(ctx context.Context, cp *protocol.Checkpoint, here endedHere) (swept bool) {
	id := cp.Job
	if cp.State == jobs.StateSucceeded && !cp.ResultStored {
		if _, err := l.store.Put(ctx, protocol.ResultBlob(id), cp.Result, store.Cond{}); err != nil {
			l.log.Warn("write result copy", "job", id, "err", err)
			return false // keep the marker: the next pass retries
		}
		l.dropResult(ctx, cp, here) // result.go
	} else if cp.State != jobs.StateSucceeded {
		if err := l.bus.PurgeJob(ctx, id); err != nil {
			l.log.Warn("purge shards", "job", id, "err", err)
		}
	}
	if here.partials {
		if parts, err := l.store.List(ctx, protocol.PartialsPrefix(id)); err == nil {
			for _, p := range parts {
				_ = l.store.Delete(ctx, p.Name)
			}
		}
	}
	l.deletePlan(ctx, cp)
	l.cleanupKeyed(ctx, cp) // keyed.go
	if !l.retryFailed(ctx, cp) {
		return false // keep the marker: the next pass retries (retry.go)
	}
	if err := l.markEnded(ctx, cp); err != nil {
		l.log.Warn("job ended", "job", id, "err", err)
		return false // keep the marker: the next pass retries (retention.go)
	}
	if here.sweep {
		l.sweep.add(id)
		return true
	}
	if err := l.store.Delete(ctx, protocol.ActiveBlob(id)); err != nil {
		l.log.Warn("delete active marker", "job", id, "err", err)
	}
	return false
}

// deletePlan removes a finished job's stored plan pages (an indexed plan stored none).
func (l *lifecycle) deletePlan(ctx context.Context, cp *protocol.Checkpoint) {
	if cp.Plan != protocol.PlanPages {
		return
	}
	pages, err := l.store.List(ctx, protocol.PlanPrefix(cp.Job, cp.PlanEpoch))
	if err != nil {
		l.log.Warn("list plan pages", "job", cp.Job, "err", err)
		return
	}
	for _, p := range pages {
		_ = l.store.Delete(ctx, p.Name)
	}
}
