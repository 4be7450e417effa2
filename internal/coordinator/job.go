package coordinator

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"

	"github.com/RoaringBitmap/roaring/v2"

	"github.com/mapagg/mapagg/internal/coordinator/core"
	"github.com/mapagg/mapagg/internal/protocol"
	"github.com/mapagg/mapagg/internal/queue"
	"github.com/mapagg/mapagg/jobs"
	"github.com/mapagg/mapagg/store"
)

// job is one running job's in-memory state, owned by the term's main loop.
type job struct {
	id   string
	spec *protocol.Spec
	impl jobs.Job
	// cp is the last checkpoint written (Done and Aggregate left nil: they live in done and run).
	cp   protocol.Checkpoint
	etag store.ETag
	// run runs the job by its kind (cp.Kind): merges its partials or commits its tasks.
	run      runner
	done     *roaring.Bitmap
	dirty    bool
	complete bool // every shard merged: the next checkpoint finalizes
	// fresh: this term planned the job (intake), not claimed it; refs: a result of it named a
	// large partial. A fresh job without refs has no partials to clean up.
	fresh, refs bool
	// w is the job's part of the checkpointer's state (checkpoint.go).
	w jobWrites
	// bk is the job's backup-task bookkeeping (backup.go).
	bk backupState
	// light: nothing of the job is stored yet (smalljob.go); read by the dispatcher. unmarked:
	// no active marker was written for it. msg is its queue message, kept hidden by keep until
	// its first checkpoint is stored.
	light    atomic.Bool
	unmarked bool
	msg      queue.Message
	keep     func()
	// cancelled: claim found the job's cancel marker; adopt ends it.
	cancelled bool
	// rep is the job's self-repair bookkeeping (repair.go).
	rep repairState
	// stopDispatch cancels the job's dispatcher, if one runs.
	stopDispatch context.CancelFunc
	// merged mirrors done's cardinality for the dispatcher, which keeps at most DispatchWindow
	// shards dispatched and not merged; progress wakes it after merges.
	merged   atomic.Int64
	progress chan struct{}
	// window is the job's fair share of its type's dispatch budget: how many of its shards may
	// be dispatched and not merged (fair.go). Set by the loop, read by the dispatcher.
	window atomic.Int64
	fair   fairAccount
	// gate, when above 0, stops the dispatcher at shard gate-1: a keyed job's reduce tasks wait
	// for its map manifest (keyed.go). Set by the loop and the manifest's writer.
	gate atomic.Int64
}

// mergedOne tells the dispatcher one more shard is merged.
func (j *job) mergedOne() {
	j.merged.Add(1)
	j.wake()
}

// wake tells the dispatcher its window may have room.
func (j *job) wake() {
	select {
	case j.progress <- struct{}{}:
	default:
	}
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
