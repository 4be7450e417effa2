package coordinator

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/RoaringBitmap/roaring/v2"

	"github.com/mapagg/mapagg/bus"
	"github.com/mapagg/mapagg/internal/protocol"
	"github.com/mapagg/mapagg/jobs"
	"github.com/mapagg/mapagg/store"
)

// job is one running job's in-memory state, owned by the term's main loop.
type job struct {
	id   string
	spec *protocol.Spec
	impl jobs.Job
	// cp is the last checkpoint written (Done and Aggregate left nil: they live in done and agg).
	cp   protocol.Checkpoint
	etag store.ETag
	agg  jobs.Aggregate
	done *roaring.Bitmap
	// acks are merged results waiting for the checkpoint that includes them.
	acks     []*bus.Delivery
	dirty    bool
	complete bool // every shard merged: the next checkpoint finalizes
	// nextDue is when the tick next checkpoints the job (it adapts to the checkpoint's cost).
	nextDue time.Time
	// writing: a checkpoint of the job is being stored in the background (one at a time, so
	// each write is If-Match on the previous one's ETag).
	writing bool
	// bk is the job's backup-task bookkeeping (backup.go).
	bk backupState
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
	if t.isWaiting(id) {
		return nil, nil // for a type this process lacks (waiting.go)
	}
	for try := 0; try < 5; try++ {
		data, etag, err := t.store.Get(ctx, protocol.CheckpointBlob(id))
		if errors.Is(err, store.ErrNotFound) {
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
		if err := t.fenced(cp); err != nil {
			return nil, err
		}
		if cp.State.Terminal() {
			t.cleanup(ctx, cp) // a leader died between the final checkpoint and its clean-up
			return nil, nil
		}
		if cp.State == jobs.StateWaiting && cp.Plan == "" {
			j, err := t.startWaiting(ctx, cp, etag)
			if errors.Is(err, errRetryClaim) {
				continue
			}
			return j, err
		}
		if cp.State == jobs.StateWaiting { // planned, then paused by a leader without its type
			cp.State, cp.Error = jobs.StateRunning, ""
		}
		j, err := t.load(ctx, cp)
		if errors.Is(err, jobs.ErrUnknownType) {
			if err := t.pause(ctx, cp, etag); errors.Is(err, errRetryClaim) {
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
			t.codeFailed(id, err)
			if err := t.endStored(ctx, cp, etag, jobs.StateFailed, fmt.Sprintf("resume: %v", err)); errors.Is(err, errRetryClaim) {
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
		switch err := t.write(ctx, j); {
		case err == nil && j.cp.State.Terminal():
			// Its code failed while it was checkpointed: stored as failed, it is not resumed.
			t.cleanup(ctx, &j.cp)
			return nil, nil
		case err == nil:
			// A cancel issued while no leader listened (during a failover) takes effect now,
			// not at the next rescan.
			if ok, err := t.store.Exists(ctx, protocol.CancelBlob(id)); err == nil && ok {
				j.cancelled = true
			}
			return j, nil
		case errors.Is(err, errRetryClaim):
			continue
		default:
			return nil, err
		}
	}
	return nil, fmt.Errorf("claim %s: the checkpoint kept changing", id)
}

var errRetryClaim = errors.New("checkpoint changed by an older epoch; re-read")

// load rebuilds a job from its checkpoint and spec. The plan stays where it is (see plan.go).
func (t *term) load(ctx context.Context, cp *protocol.Checkpoint) (*job, error) {
	id := cp.Job
	spec, impl, err := t.readSpec(ctx, id)
	if err != nil {
		return nil, err
	}
	var agg jobs.Aggregate
	kj, err := runsKeyed(spec, impl)
	if kj != nil {
		agg = t.loadKeyed(id) // keyed.go
	} else if err == nil {
		err = isolate(spec.Type, "new aggregate", func() (err error) {
			agg, err = impl.NewAggregate(spec.Params)
			return err
		})
	}
	if err != nil {
		return nil, fmt.Errorf("new aggregate: %w", err)
	}
	if err := isolate(spec.Type, "restore aggregate", func() error { return agg.UnmarshalBinary(cp.Aggregate) }); err != nil {
		return nil, fmt.Errorf("aggregate from checkpoint: %w", err)
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
	j := &job{id: id, spec: spec, impl: impl, cp: *cp, agg: agg, done: done, progress: make(chan struct{}, 1)}
	j.merged.Store(int64(cp.DoneCount))
	j.cp.Done, j.cp.Aggregate = nil, nil
	j.complete = cp.DoneCount == cp.Total
	if cp.State == jobs.StateRunning && cp.Dispatched < cp.Total {
		// Nothing of the plan is read here: the dispatcher makes or reads the shards it needs as
		// the window drains. Check now that it can.
		if _, err := t.source(j); err != nil {
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

// snapshot is a job's checkpoint taken in the loop, to be encoded and stored (in the background,
// or at once by write). The Done bitmap is encoded and the aggregate snapshotted together, at one
// moment of the loop, so the stored checkpoint is consistent however long the write takes. An
// aggregate that is a jobs.Snapshotter is encoded by the writer, off the loop, as is the
// checkpoint itself; any other is encoded in the loop.
type snapshot struct {
	j       *job
	cp      protocol.Checkpoint // as stored, Done and Aggregate dropped
	stored  protocol.Checkpoint // to store: Done set, Aggregate from encode
	encode  func() ([]byte, error)
	ifMatch store.ETag
	acks    []*bus.Delivery // results this checkpoint covers: acknowledged once it is stored
	start   time.Time
	// keyedMaps is how many map tasks of a keyed job the checkpoint commits (keyed.go).
	keyedMaps int
}

// prepare takes j's checkpoint. When every shard is merged it also finalizes: the checkpoint
// carries the result and state succeeded. If the job's code fails on the way (encoding the
// aggregate), the job fails, and its checkpoint is the terminal one.
func (t *term) prepare(j *job) (*snapshot, error) {
	s, err := t.prepareOnce(j)
	var ue *UserCodeError
	if errors.As(err, &ue) {
		t.fail(j, err)
		return t.prepareOnce(j) // terminal: none of the job's code is called
	}
	return s, err
}

func (t *term) prepareOnce(j *job) (*snapshot, error) {
	start := time.Now()
	cp := j.cp
	cp.WriterEpoch, cp.WriterTerm = t.epoch, t.id
	cp.Seq++
	cp.UpdatedAt = t.cfg.Now().UTC()
	cp.DoneCount = int(j.done.GetCardinality())
	keyedMaps := 0
	if ka := j.keyedOf(); ka != nil {
		cp.Phase, cp.PhaseDone, cp.PhaseTotal = ka.phase()
		keyedMaps = ka.nMaps
	}
	var err error
	if cp.Done, err = j.done.ToBytes(); err != nil {
		return nil, fmt.Errorf("encode done bitmap: %w", err)
	}
	if j.complete && cp.State == jobs.StateRunning {
		var res []byte
		err := isolateErr(j.typ(), "result", func() (err error) {
			res, err = j.agg.Result()
			return err
		})
		if err != nil {
			t.codeFailed(j.id, err)
			cp.State, cp.Error = jobs.StateFailed, err.Error()
		} else {
			cp.State, cp.Result = jobs.StateSucceeded, res
		}
	}
	var encode func() ([]byte, error)
	switch sn, ok := j.agg.(jobs.Snapshotter); {
	case cp.State.Terminal():
		// An ended job is never resumed (claim only cleans it up): its checkpoint keeps the
		// result, not the aggregate, which for a large one (a vocabulary) would be most of the
		// write the job's end waits for.
		encode = func() ([]byte, error) { return nil, nil }
	case ok:
		var enc func() ([]byte, error)
		if err := isolateErr(j.typ(), "snapshot aggregate", func() error { enc = sn.Snapshot(); return nil }); err != nil {
			return nil, err
		}
		// The encoding runs in the writer's goroutine: isolated there too.
		typ := j.typ()
		encode = func() (b []byte, err error) {
			err = isolateErr(typ, "encode aggregate", func() (err error) {
				b, err = enc()
				return err
			})
			return b, err
		}
	default:
		var agg []byte
		err := isolateErr(j.typ(), "encode aggregate", func() (err error) {
			agg, err = j.agg.MarshalBinary()
			return err
		})
		if err != nil {
			return nil, err
		}
		encode = func() ([]byte, error) { return agg, nil }
	}
	if cp.State.Terminal() && cp.FinishedAt == nil {
		now := cp.UpdatedAt
		cp.FinishedAt = &now
	}
	stored := cp
	cp.Done, cp.Aggregate = nil, nil
	return &snapshot{j: j, cp: cp, stored: stored, encode: encode, ifMatch: j.etag, start: start, keyedMaps: keyedMaps}, nil
}

// put encodes a snapshot and stores it, If-Match on the ETag its job had when it was prepared.
// It touches no loop state, so it may run in the background.
func (t *term) put(ctx context.Context, s *snapshot) (store.ETag, error) {
	agg, err := s.encode()
	if err != nil {
		return "", err
	}
	cp := s.stored
	cp.Aggregate = agg
	data, err := cp.Encode()
	if err != nil {
		return "", err
	}
	began := time.Now()
	etag, err := t.putCheckpoint(ctx, data, &cp, s.j.spec, store.Cond{IfMatch: s.ifMatch})
	t.cfg.Metrics.CheckpointWritten(time.Since(began), len(data), err)
	if errors.Is(err, store.ErrConflict) {
		return "", t.conflict(ctx, s.j.id)
	}
	return etag, err
}

// apply records a stored snapshot as its job's last checkpoint. What the loop changed since the
// snapshot (counts, a state set by end) stays; a terminal state the snapshot stored wins.
func (t *term) apply(s *snapshot, etag store.ETag) {
	j := s.j
	j.etag = etag
	j.cp.WriterEpoch, j.cp.WriterTerm, j.cp.Seq, j.cp.UpdatedAt, j.cp.DoneCount = s.cp.WriterEpoch, s.cp.WriterTerm, s.cp.Seq, s.cp.UpdatedAt, s.cp.DoneCount
	j.cp.Phase, j.cp.PhaseDone, j.cp.PhaseTotal = s.cp.Phase, s.cp.PhaseDone, s.cp.PhaseTotal
	if s.cp.State.Terminal() {
		j.cp.State, j.cp.Result, j.cp.Error, j.cp.FinishedAt = s.cp.State, s.cp.Result, s.cp.Error, s.cp.FinishedAt
	}
}

// write checkpoints j at once (claiming a job, stepping down). If the job's code fails encoding
// its aggregate, the job fails, and its terminal checkpoint is written instead.
func (t *term) write(ctx context.Context, j *job) error {
	s, err := t.prepare(j)
	if err != nil {
		return err
	}
	etag, err := t.put(ctx, s)
	var ue *UserCodeError
	if errors.As(err, &ue) {
		t.fail(j, err)
		if s, err = t.prepare(j); err != nil {
			return err
		}
		etag, err = t.put(ctx, s)
	}
	if err != nil {
		return err
	}
	t.apply(s, etag)
	j.dirty = false
	return nil
}

// conflict explains a failed conditional write: a higher epoch means this leader is deposed; a
// lower one (possible only while claiming) means a deposed leader wrote late: re-read.
func (t *term) conflict(ctx context.Context, id string) error {
	data, _, err := t.store.Get(ctx, protocol.CheckpointBlob(id))
	if err != nil {
		return fmt.Errorf("%w: checkpoint of %s changed and cannot be re-read: %v", ErrDeposed, id, err)
	}
	cp, err := protocol.DecodeCheckpoint(data)
	if err != nil {
		return fmt.Errorf("%w: checkpoint of %s changed: %v", ErrDeposed, id, err)
	}
	if cp.WriterEpoch < t.epoch {
		t.sawEpoch(cp.WriterEpoch)
		return errRetryClaim
	}
	if err := t.fenced(cp); err != nil {
		return err
	}
	return fmt.Errorf("%w: the checkpoint of %s changed under a write of this term (%s)", ErrDeposed, id, t.name())
}

// cleanup runs after a job's terminal checkpoint: the result copy, the queued shards, the large
// partials and the active marker. Each step is idempotent; a leader that dies half-way leaves the
// rest to the next one (claim calls cleanup for terminal jobs still marked active).
func (t *term) cleanup(ctx context.Context, cp *protocol.Checkpoint) {
	id := cp.Job
	if cp.State == jobs.StateSucceeded && !cp.ResultStored {
		if _, err := t.store.Put(ctx, protocol.ResultBlob(id), cp.Result, store.Cond{}); err != nil {
			t.log.Warn("write result copy", "job", id, "err", err)
			return // keep the marker: the next pass retries
		}
		t.dropResult(ctx, cp) // result.go
	} else if cp.State != jobs.StateSucceeded {
		if err := t.bus.PurgeJob(ctx, id); err != nil {
			t.log.Warn("purge shards", "job", id, "err", err)
		}
	}
	if parts, err := t.store.List(ctx, protocol.PartialsPrefix(id)); err == nil {
		for _, p := range parts {
			_ = t.store.Delete(ctx, p.Name)
		}
	}
	t.deletePlan(ctx, cp)
	t.cleanupKeyed(ctx, cp) // keyed.go
	if !t.retryFailed(ctx, cp) {
		return // keep the marker: the next pass retries (retry.go)
	}
	if err := t.markEnded(ctx, cp); err != nil {
		t.log.Warn("job ended", "job", id, "err", err)
		return // keep the marker: the next pass retries (retention.go)
	}
	if err := t.store.Delete(ctx, protocol.ActiveBlob(id)); err != nil {
		t.log.Warn("delete active marker", "job", id, "err", err)
	}
}
