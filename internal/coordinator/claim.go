package coordinator

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/RoaringBitmap/roaring/v2"
	"golang.org/x/sync/errgroup"

	"github.com/mapagg/mapagg/internal/coordinator/core"
	"github.com/mapagg/mapagg/internal/protocol"
	"github.com/mapagg/mapagg/jobs"
	"github.com/mapagg/mapagg/store"
)

// How the term takes a job in: at election and on rescan it claims every job marked active that
// it does not hold (a fenced read and write-back of the checkpoint), loads the job's spec and
// runner, and adopts it into the job table and a dispatcher.

// ensure claims a planned job this term does not hold yet.
func (t *term) ensure(ctx context.Context, id string) error {
	if t.tab.get(id) != nil {
		return nil
	}
	j, err := t.claim(ctx, id)
	if err != nil {
		if errors.Is(err, ErrDeposed) {
			return err
		}
		t.log.Error("cannot resume job", "job", id, "err", err)
		return nil
	}
	if j != nil {
		t.adopt(ctx, j)
	}
	return nil
}

// claim loads a planned job's checkpoint and takes ownership of it by writing it back with this
// term's epoch (If-Match on the ETag read). From then on, any writer holding an older ETag — a
// deposed leader — fails. A conflict means someone wrote in between: re-read and try again, unless
// the writer had a higher epoch, in which case this leader is the deposed one.
//
// It returns nil (and no error) for a job that has no checkpoint or has already ended.
func (t *term) claim(ctx context.Context, id string) (*job, error) {
	if t.tab.isWaiting(id) {
		return nil, nil // for a type this process lacks (waiting.go)
	}
	for try := 0; try < 5; try++ {
		data, etag, err := t.store.Get(ctx, protocol.CheckpointBlob(id))
		if errors.Is(err, store.ErrNotFound) {
			t.in.requeue(ctx, id)
			return nil, nil
		}
		if err != nil {
			return nil, err
		}
		cp, err := protocol.DecodeCheckpoint(data)
		if err != nil {
			t.log.Error("unreadable checkpoint; job left as it is", "job", id, "err", err)
			return nil, nil
		}
		if err := t.fence.Fenced(cp); err != nil {
			return nil, err
		}
		if cp.State.Terminal() {
			t.life.Cleanup(ctx, cp) // a leader died between the final checkpoint and its clean-up
			return nil, nil
		}
		if cp.State == jobs.StateWaiting && cp.Plan == "" {
			j, err := t.in.startWaiting(ctx, cp, etag)
			if errors.Is(err, core.ErrRetryClaim) {
				continue
			}
			return j, err
		}
		if cp.State == jobs.StateWaiting { // planned, then paused by a leader without its type
			cp.State, cp.Error = jobs.StateRunning, ""
		}
		j, err := t.load(ctx, cp)
		if errors.Is(err, jobs.ErrUnknownType) {
			if err := t.in.pause(ctx, cp, etag); errors.Is(err, core.ErrRetryClaim) {
				continue
			} else if err != nil {
				return nil, err
			}
			return nil, nil
		}
		var ue *UserCodeError
		if errors.As(err, &ue) {
			// The job's own code cannot take it back: it fails here, stored, so that no leader
			// tries again (and again).
			t.rep.codeFailed(id, err)
			if err := t.in.endStored(ctx, cp, etag, jobs.StateFailed, fmt.Sprintf("resume: %v", err)); errors.Is(err, core.ErrRetryClaim) {
				continue
			} else if err != nil {
				return nil, err
			}
			return nil, nil
		}
		if err != nil {
			return nil, fmt.Errorf("resume %s: %w", id, err)
		}
		j.etag = etag
		switch err := t.ck.now(ctx, j); {
		case err == nil && j.cp.State.Terminal():
			// Its code failed while it was checkpointed: stored as failed, it is not resumed.
			t.life.Cleanup(ctx, &j.cp)
			return nil, nil
		case err == nil:
			// A cancel issued while no leader listened (during a failover) takes effect now,
			// not at the next rescan.
			if ok, err := t.store.Exists(ctx, protocol.CancelBlob(id)); err == nil && ok {
				j.cancelled = true
			}
			return j, nil
		case errors.Is(err, core.ErrRetryClaim):
			continue
		default:
			return nil, err
		}
	}
	return nil, fmt.Errorf("claim %s: the checkpoint kept changing", id)
}

// load rebuilds a job from its checkpoint and spec. The plan stays where it is (see plan.go).
func (t *term) load(ctx context.Context, cp *protocol.Checkpoint) (*job, error) {
	id := cp.Job
	spec, impl, err := t.readSpec(ctx, id)
	if err != nil {
		return nil, err
	}
	run, kind, err := t.loadRunner(spec, impl, cp) // runner.go
	if err != nil {
		return nil, err
	}
	done := roaring.New()
	if len(cp.Done) > 0 {
		if err := done.UnmarshalBinary(cp.Done); err != nil {
			return nil, fmt.Errorf("done bitmap from checkpoint: %w", err)
		}
	}
	if int(done.GetCardinality()) != cp.DoneCount {
		return nil, fmt.Errorf("checkpoint says %d shards done, its bitmap holds %d", cp.DoneCount, done.GetCardinality())
	}
	j := &job{id: id, spec: spec, impl: impl, cp: *cp, run: run, done: done, progress: make(chan struct{}, 1)}
	j.merged.Store(int64(cp.DoneCount))
	j.cp.Done, j.cp.Aggregate = nil, nil
	j.cp.Version, j.cp.Kind = protocol.CheckpointVersion, kind // an earlier release's checkpoint says no kind
	j.complete = cp.DoneCount == cp.Total
	if cp.State == jobs.StateRunning && cp.Dispatched < cp.Total {
		// Nothing of the plan is read here: the dispatcher makes or reads the shards it needs as
		// the window drains. Check now that it can.
		if _, err := t.plans.source(j); err != nil {
			return nil, err
		}
	}
	return j, nil
}

func (t *term) readSpec(ctx context.Context, id string) (*protocol.Spec, jobs.Job, error) {
	data, _, err := t.store.Get(ctx, protocol.SpecBlob(id))
	if err != nil {
		return nil, nil, fmt.Errorf("read spec: %w", err)
	}
	spec, err := protocol.ParseSpec(data)
	if err != nil {
		return nil, nil, err
	}
	impl, err := t.cfg.Registry.Lookup(spec.Type)
	if err != nil {
		return spec, nil, err
	}
	return spec, impl, nil
}

// loadRunner returns the runner of a job resumed from checkpoint cp, with cp's state, and the
// job's kind. A checkpoint of an earlier release says no kind: the job's code decides, as it did
// then.
func (t *term) loadRunner(spec *protocol.Spec, impl jobs.Job, cp *protocol.Checkpoint) (runner, protocol.Kind, error) {
	kind := cp.Kind
	if kind == 0 {
		kj, err := runsKeyed(spec, impl)
		if err != nil {
			return nil, 0, err
		}
		kind = protocol.KindAggregate
		if kj != nil {
			kind = protocol.KindKeyed
		}
	}
	switch kind {
	case protocol.KindKeyed:
		if jobs.KeyedForm(impl) == nil {
			return nil, kind, fmt.Errorf("%w: job %s is keyed; type %q on this leader is not", jobs.ErrBadCheckpoint, cp.Job, spec.Type)
		}
		kr := &keyedRun{id: cp.Job, container: t.plans.containerName(), log: t.log}
		return kr, kind, kr.restore(cp.Aggregate)
	default:
		run, err := newAggregateRun(spec, impl)
		if err != nil {
			return nil, kind, err
		}
		err = core.Isolate(spec.Type, "restore aggregate", func() error { return run.agg.UnmarshalBinary(cp.Aggregate) })
		if err != nil {
			return nil, kind, fmt.Errorf("aggregate from checkpoint: %w", err)
		}
		return run, kind, nil
	}
}

// rescan claims every job marked active that this term does not hold: at election, and
// periodically for a job planned by a deposed leader that did not know it was deposed.
func (t *term) rescan(ctx context.Context) error {
	marks, err := t.store.List(ctx, protocol.ActivePrefix)
	if err != nil {
		t.log.Warn("list active jobs", "err", err)
		return nil
	}
	var ids []string
	for _, m := range marks {
		id := strings.TrimPrefix(m.Name, protocol.ActivePrefix)
		if t.tab.get(id) != nil || protocol.CheckID(id) != nil {
			continue
		}
		if t.tab.isCleaning(id) {
			continue // ended here, its clean-up runs
		}
		if t.tab.isWaiting(id) {
			// Waiting for a type this process lacks: only a cancel changes that in this term.
			if ok, err := t.store.Exists(ctx, protocol.CancelBlob(id)); err != nil || !ok {
				continue
			}
			t.tab.setWaiting(id, false)
		}
		ids = append(ids, id)
	}
	if len(ids) == 0 {
		return nil
	}
	claimed := make([]*job, len(ids))
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(16)
	for i, id := range ids {
		g.Go(func() error {
			j, err := t.claim(gctx, id)
			if errors.Is(err, ErrDeposed) {
				return err
			}
			if err != nil {
				t.log.Error("cannot resume job", "job", id, "err", err)
			}
			claimed[i] = j
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return err
	}
	for _, j := range claimed {
		if j != nil {
			t.adopt(ctx, j)
		}
	}
	return nil
}

// adopt makes j active and starts dispatching what of it is not yet dispatched.
func (t *term) adopt(ctx context.Context, j *job) {
	if !t.tab.add(j) {
		releaseLight(j) // smalljob.go
		return          // claimed meanwhile (a rescan found its marker), or ended meanwhile (jobtable.go)
	}
	t.ck.adopted(j)
	if t.hints.take(j.id, time.Now()) {
		j.cancelled = true // hinted before it was held (smalljob.go)
	}
	if j.cancelled && !j.complete {
		t.log.Info("job claimed with a cancel marker", "job", j.id)
		t.end(j, jobs.StateCancelled, "cancelled by user")
		return
	}
	if j.complete {
		j.dirty = true // finalize at the next checkpoint (a job with no shards, or all merged)
	}
	j.run.adopted(ctx, t, j) // runner.go
	if j.cp.State == jobs.StateRunning && j.cp.Dispatched < j.cp.Total {
		src, err := t.plans.source(j)
		if err != nil {
			t.fail(j, core.WrapOp("dispatch", err))
		} else {
			dctx, cancel := context.WithCancel(ctx)
			j.stopDispatch = cancel
			j.fair.counted = j.merged.Load()
			t.rebalance(time.Now()) // the job's window, and a smaller one for its type's others
			t.dispatchers.Add(1)
			go func() {
				defer t.dispatchers.Done()
				t.send.dispatch(dctx, j, src, j.cp.Dispatched)
			}()
		}
	}
	t.log.Info("job running", "job", j.id, "type", j.spec.Type, "shards", j.cp.Total, "done", j.cp.DoneCount, "dispatched", j.cp.Dispatched)
	t.rep.emit(Event{Kind: EventJobResumed, Epoch: t.fence.Epoch, Job: j.id, Count: j.cp.DoneCount})
}
