package coordinator

import (
	"context"
	"errors"
	"time"

	"github.com/mapagg/mapagg/internal/coordinator/lifecycle"
	"github.com/mapagg/mapagg/internal/protocol"
	"github.com/mapagg/mapagg/internal/telemetry"
	"github.com/mapagg/mapagg/jobs"
)

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
	defer telemetry.Finish(ctx, j.id, j.spec.SubmittedAt, string(j.cp.State), j.cp.Error).End()
	t.tab.finish(j) // marks it being cleaned up, too
	t.observePace(j)
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
	t.rep.emit(Event{Kind: EventJobFinished, Epoch: t.fence.Epoch, Job: j.id, State: string(j.cp.State), Count: j.cp.DoneCount, Err: why})
	cp := j.cp
	here := lifecycle.Ended{ETag: j.etag, Meta: j.w.meta, Partials: !j.fresh || j.refs, Sweep: true, Unmarked: j.unmarked, Troubles: j.w.troubles}
	t.cleanups.Add(1)
	go func() {
		defer t.cleanups.Done()
		if !t.life.Clean(context.WithoutCancel(ctx), &cp, here) {
			t.tab.setCleaning(cp.Job, false) // else the sweeper does, once the marker is gone
		}
		if t.tab.after.Load() {
			nonBlocking(t.kick, struct{}{}) // its result is stored: a job after it may start
		}
	}()
}

// observePace records how long the shards of j, which ended, ran (pace.go): a succeeded
// aggregate job with paceSamples shards merged this term or more. Run times come in whole
// microseconds, so a median of 0 is a shard under 1 µs, not an unknown pace.
func (t *term) observePace(j *job) {
	if t.pace == nil || j.cp.State != jobs.StateSucceeded || j.cp.Kind != protocol.KindAggregate || j.bk.nRuns < paceSamples {
		return
	}
	t.pace.observe(j.spec.Type, max(j.bk.median(), time.Microsecond))
}

// fail ends j as failed by err. An error of the job's code (a *UserCodeError in its chain) is
// reported too: logged with its stack, and an EventJobCodeFailed.
func (t *term) fail(j *job, err error) {
	if j.cp.State.Terminal() {
		return
	}
	t.rep.codeFailed(j.id, err)
	t.end(j, jobs.StateFailed, err.Error())
}
