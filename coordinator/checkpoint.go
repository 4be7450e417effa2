package coordinator

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/mapagg/mapagg/bus"
	"github.com/mapagg/mapagg/internal/protocol"
	"github.com/mapagg/mapagg/jobs"
	"github.com/mapagg/mapagg/store"
	"golang.org/x/sync/errgroup"
)

// written is the outcome of a background checkpoint write.
type written struct {
	s    *snapshot
	etag store.ETag
	err  error
}

// checkpointAll writes every dirty job at once (in parallel), then acknowledges the results each
// write covers, and hands jobs that ended to clean-up. For stepping down, with no write in flight.
func (t *term) checkpointAll(ctx context.Context) error {
	var dirty []*job
	for _, j := range t.active {
		if j.dirty || j.complete && !j.cp.State.Terminal() {
			dirty = append(dirty, j)
		}
	}
	return t.checkpoint(ctx, dirty)
}

// checkpointDirty starts background writes of the dirty jobs that have none in flight: all of
// them, or only those whose checkpoint is due (see nextDue) and those that ended or completed.
// The loop merges on meanwhile; each write's outcome comes back to commit.
func (t *term) checkpointDirty(ctx context.Context, all bool) {
	now := time.Now()
	for _, j := range t.active {
		if j.writing {
			continue
		}
		ending := j.complete && !j.cp.State.Terminal() || j.cp.State.Terminal() && j.dirty
		if ending || j.dirty && (all || !now.Before(j.nextDue)) {
			t.startWrite(ctx, j)
		}
	}
}

// startWrite encodes j's checkpoint now and stores it in the background. The results merged so
// far go with it, to be acknowledged once it is stored.
func (t *term) startWrite(ctx context.Context, j *job) {
	s, err := t.prepare(j)
	if err != nil {
		t.log.Warn("checkpoint failed; will retry", "job", j.id, "err", err)
		return
	}
	s.acks, j.acks = j.acks, nil
	j.dirty, j.writing = false, true
	t.inflight++
	t.writers.Add(1)
	go func() {
		defer t.writers.Done()
		etag, err := t.put(ctx, s)
		t.writes <- written{s: s, etag: etag, err: err}
	}()
}

// commit takes a background write's outcome: on success the job's checkpoint is the snapshot,
// the results it covers are acknowledged, and an ended job retires; on failure the results wait
// for the next write (a deposed leader stops). follow starts the next write of a job that
// completed or ended while this one was in flight.
func (t *term) commit(ctx context.Context, w written, follow bool) error {
	j := w.s.j
	j.writing = false
	if w.err != nil {
		j.acks = append(w.s.acks, j.acks...)
		j.dirty = true
		var ue *UserCodeError
		if errors.As(w.err, &ue) {
			// The job's code failed encoding its aggregate: the job fails; its terminal
			// checkpoint holds no aggregate.
			t.fail(j, w.err)
			if follow {
				t.startWrite(ctx, j)
			}
			return nil
		}
		if errors.Is(w.err, ErrDeposed) || errors.Is(w.err, errRetryClaim) {
			return fmt.Errorf("%w: %v", ErrDeposed, w.err)
		}
		t.log.Warn("checkpoint failed; will retry", "job", j.id, "err", w.err)
		return nil
	}
	t.apply(w.s, w.etag)
	t.keyedStored(ctx, j, w.s) // keyed.go
	j.nextDue = t.due(time.Since(w.s.start))
	for _, d := range w.s.acks {
		_ = d.Ack()
	}
	t.pending -= len(w.s.acks)
	if j.cp.State.Terminal() && !j.dirty {
		t.retire(ctx, j)
		return nil
	}
	if follow && j.dirty && (j.complete || j.cp.State.Terminal() || j.mapPhaseDone()) {
		t.startWrite(ctx, j)
	}
	return nil
}

// Checkpoint cost is kept to about a tenth of the merge loop's time: a job whose checkpoint took
// c to encode and write is next checkpointed (on the tick) after max(CheckpointInterval, 10c), at
// most maxIntervalFactor × CheckpointInterval later. A big aggregate is then written less often,
// instead of stalling merging; acknowledgements wait for it (bounded by CheckpointEvery).
const (
	costFactor        = 10
	maxIntervalFactor = 50
)

func (t *term) due(cost time.Duration) time.Time {
	iv := min(max(t.cfg.CheckpointInterval, costFactor*cost), maxIntervalFactor*t.cfg.CheckpointInterval)
	return time.Now().Add(iv)
}

// checkpoint writes the given jobs (in parallel), then acknowledges the results each write
// covers, and hands jobs that ended to clean-up.
func (t *term) checkpoint(ctx context.Context, dirty []*job) error {
	if len(dirty) == 0 {
		return nil
	}
	errs := make([]error, len(dirty))
	costs := make([]time.Duration, len(dirty))
	var g errgroup.Group
	g.SetLimit(16)
	for i, j := range dirty {
		g.Go(func() error {
			start := time.Now()
			errs[i] = t.write(ctx, j)
			costs[i] = time.Since(start)
			return nil
		})
	}
	_ = g.Wait()
	for i, j := range dirty {
		if err := errs[i]; err != nil {
			if errors.Is(err, ErrDeposed) || errors.Is(err, errRetryClaim) {
				return fmt.Errorf("%w: %v", ErrDeposed, err)
			}
			t.log.Warn("checkpoint failed; will retry", "job", j.id, "err", err)
			continue
		}
		j.nextDue = t.due(costs[i])
		for _, d := range j.acks {
			_ = d.Ack()
		}
		t.pending -= len(j.acks)
		j.acks = nil
		if j.cp.State.Terminal() {
			t.retire(ctx, j)
		}
	}
	return nil
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
