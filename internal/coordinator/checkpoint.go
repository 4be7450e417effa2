package coordinator

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/mapagg/mapagg/internal/bus"
	"github.com/mapagg/mapagg/internal/coordinator/core"
	"github.com/mapagg/mapagg/internal/coordinator/fence"
	"github.com/mapagg/mapagg/internal/protocol"
	"github.com/mapagg/mapagg/internal/telemetry"
	"github.com/mapagg/mapagg/jobs"
	"github.com/mapagg/mapagg/store"
)

// checkpointer writes a term's checkpoints. It owns what is being written (at most one write
// per job, so each is If-Match on the last one's ETag) and the results waiting for a write.
// Merging calls it through merged; the loop through tick and stored; claiming through now.
type checkpointer struct {
	fence *fence.Fence
	reporter
	cfg      Config
	store    checkpointPutter
	tab      *jobTable // the active jobs, for the tick and stepping down
	loop     jobLoop
	writes   chan written // outcomes of background writes, to the loop
	writers  sync.WaitGroup
	inflight int
	pending  int          // merged results held for a checkpoint, all jobs
	gen      atomic.Value // store.ETag: the jobs container's generation as the term began (lost.go)
}

// written is the outcome of a background checkpoint write.
type written struct {
	s    *snapshot
	etag store.ETag
	err  error
}

// checkpointPutter stores a checkpoint with its status record (Store), and tells whether a blob
// exists: a refused write of a job whose state was lost with the storage is no newer leader's
// (lost.go).
type checkpointPutter interface {
	PutMeta(ctx context.Context, name string, data []byte, meta map[string]string, cond store.Cond) (store.ETag, error)
	Put(ctx context.Context, name string, data []byte, cond store.Cond) (store.ETag, error) // a light job's active marker
	Exists(ctx context.Context, name string) (bool, error)
}

// jobLoop is what the checkpointer asks of the loop that owns the jobs (term): what a job's
// runner asks after a checkpoint is stored (runHost: fail a job, a keyed job's next step), and
// retiring a job whose terminal checkpoint is stored.
type jobLoop interface {
	runHost // a job's runner, after its checkpoint is stored
	retire(ctx context.Context, j *job)
	end(j *job, state jobs.State, why string)
	// A light job's first checkpoint was stored, or refused as one exists (smalljob.go).
	lightStored(j *job, terminal bool)
	lightTaken(ctx context.Context, j *job)
}

var _ checkpointPutter = Store(nil)

func newCheckpointer(f *fence.Fence, rep reporter, cfg Config, st checkpointPutter, tab *jobTable, loop jobLoop) *checkpointer {
	return &checkpointer{fence: f, reporter: rep, cfg: cfg, store: st, tab: tab, loop: loop, writes: make(chan written, 64)}
}

// merged is merging's one call, after a message's results: held (nil if none) is acknowledged
// once a checkpoint covering it is stored. A job that completed or finished its map phase is
// written at once; every dirty job is when CheckpointEvery results are held.
func (c *checkpointer) merged(ctx context.Context, j *job, held *bus.Delivery) {
	if held != nil {
		j.w.acks = append(j.w.acks, held)
		c.pending++
	}
	if j.run.due() && !j.w.writing && j.cp.State == jobs.StateRunning {
		c.start(ctx, j) // e.g. a keyed job's map phase is committed: store it, then the manifest
	}
	if j.complete && j.cp.State == jobs.StateRunning && !j.w.writing {
		// The last result: finish now, not at the next tick (the final checkpoint carries the
		// result; it is as fenced as any other). A write in flight does it when it is stored.
		c.start(ctx, j)
	}
	if c.pending >= c.cfg.CheckpointEvery {
		c.dirty(ctx, true)
	}
}

// tick starts the writes that are due: of jobs whose interval passed (see nextDue), and of jobs
// that ended or completed.
func (c *checkpointer) tick(ctx context.Context) { c.dirty(ctx, false) }

// dirty starts background writes of the dirty jobs that have none in flight: all of them, or
// only those whose checkpoint is due and those that ended or completed. The loop merges on
// meanwhile; each write's outcome comes back to stored.
func (c *checkpointer) dirty(ctx context.Context, all bool) {
	now := time.Now()
	for j := range c.tab.all() {
		if j.w.writing {
			continue
		}
		ending := j.complete && !j.cp.State.Terminal() || j.cp.State.Terminal() && j.dirty
		if ending || j.dirty && (all || !now.Before(j.w.nextDue)) {
			c.start(ctx, j)
		}
	}
}

// adopted starts j's interval: its checkpoint was just stored (at intake, or by the claim), so
// a job shorter than the interval is written once more, at its last result, with no tick's write
// in flight to wait for.
func (c *checkpointer) adopted(j *job) {
	j.w.nextDue = time.Now().Add(c.cfg.CheckpointInterval)
}

// start encodes j's checkpoint now and stores it in the background. The results merged so far
// go with it, to be acknowledged once it is stored.
func (c *checkpointer) start(ctx context.Context, j *job) {
	s, err := c.prepare(j)
	if err != nil {
		c.log.Warn("checkpoint failed; will retry", "job", j.id, "err", err)
		return
	}
	s.acks, j.w.acks = j.w.acks, nil
	j.dirty, j.w.writing = false, true
	c.inflight++
	c.writers.Add(1)
	go func() {
		defer c.writers.Done()
		etag, err := c.put(ctx, s)
		c.writes <- written{s: s, etag: etag, err: err}
	}()
}

// stored takes a background write's outcome: on success the job's checkpoint is the snapshot,
// the results it covers are acknowledged, and an ended job retires; on failure the results wait
// for the next write (a deposed leader stops). follow starts the next write of a job that
// completed or ended while this one was in flight.
func (c *checkpointer) stored(ctx context.Context, w written, follow bool) error {
	c.inflight--
	j := w.s.j
	j.w.writing = false
	if w.err != nil {
		j.w.acks = append(w.s.acks, j.w.acks...)
		j.dirty = true
		if w.s.light && errors.Is(w.err, store.ErrExists) {
			c.loop.lightTaken(ctx, j)
			return nil
		}
		var ue *UserCodeError
		if errors.As(w.err, &ue) {
			// The job's code failed encoding its aggregate: the job fails; its terminal
			// checkpoint holds no aggregate.
			c.loop.fail(j, w.err)
			if follow {
				c.start(ctx, j)
			}
			return nil
		}
		if err := c.writeFailed(ctx, j, w.err); err != nil {
			return err
		}
		if errors.Is(w.err, errRolledBack) && follow && j.dirty {
			c.start(ctx, j) // written back: its next checkpoint goes on
		}
		return nil
	}
	c.apply(w.s, w.etag)
	j.run.stored(ctx, c.loop, j, w.s.run)
	cost := time.Since(w.s.start)
	if w.s.light {
		cost = 0 // it wrote the active marker too, once: not what the job's checkpoints cost
	}
	j.w.nextDue = c.due(cost)
	c.ack(w.s.acks)
	if j.cp.State.Terminal() && !j.dirty {
		c.loop.retire(ctx, j)
		return nil
	}
	if follow && j.dirty && (j.complete || j.cp.State.Terminal() || j.run.due()) {
		c.start(ctx, j)
	}
	return nil
}

func (c *checkpointer) ack(ds []*bus.Delivery) {
	for _, d := range ds {
		_ = d.Ack()
	}
	c.pending -= len(ds)
}

// stepDown finishes the term's writing. The writes in flight finish (or fail) first, as each job's
// next write is If-Match on their ETag. Then, unless the term was deposed, every dirty job is
// written at once, so the next leader starts from here. The writes are fenced: if a newer leader
// already claimed a job, the write fails and its results stay unacknowledged for it.
func (c *checkpointer) stepDown(ctx context.Context, deposed bool) {
	for c.inflight > 0 {
		w := <-c.writes
		if deposed {
			c.inflight--
			continue
		}
		if err := c.stored(context.WithoutCancel(ctx), w, false); err != nil {
			c.log.Warn("checkpoint", "err", err)
		}
	}
	c.writers.Wait()
	if deposed {
		return
	}
	for j := range c.tab.all() {
		if j.light.Load() && !j.cp.State.Terminal() {
			j.dirty = true // stored now, so the next leader resumes it at once (smalljob.go)
		}
	}
	fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 3*time.Second)
	defer cancel()
	if err := c.all(fctx); err != nil {
		c.log.Warn("final checkpoint", "err", err)
	}
}

// Checkpoint cost is kept to about a tenth of the merge loop's time: a job whose checkpoint took
// c to encode and write is next checkpointed (on the tick) after max(CheckpointInterval, 10c), at
// most maxIntervalFactor × CheckpointInterval later. A big aggregate is then written less often,
// instead of stalling merging; acknowledgements wait for it (bounded by CheckpointEvery).
const (
	costFactor        = 10
	maxIntervalFactor = 50
)

func (c *checkpointer) due(cost time.Duration) time.Time {
	iv := c.cfg.CheckpointInterval
	iv = min(max(iv, costFactor*cost), maxIntervalFactor*iv)
	return time.Now().Add(iv)
}

// all writes every dirty job at once (in parallel), then acknowledges the results each write
// covers, and hands jobs that ended to clean-up. For stepping down, with no write in flight.
func (c *checkpointer) all(ctx context.Context) error {
	var dirty []*job
	for j := range c.tab.all() {
		if j.dirty || j.complete && !j.cp.State.Terminal() {
			dirty = append(dirty, j)
		}
	}
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
			errs[i] = c.now(ctx, j)
			costs[i] = time.Since(start)
			return nil
		})
	}
	_ = g.Wait()
	for i, j := range dirty {
		if err := errs[i]; err != nil {
			if err := c.writeFailed(ctx, j, err); err != nil {
				return err
			}
			continue
		}
		j.w.nextDue = c.due(costs[i])
		c.ack(j.w.acks)
		j.w.acks = nil
		if j.cp.State.Terminal() {
			c.loop.retire(ctx, j)
		}
	}
	return nil
}

// snapshot is a job's checkpoint taken in the loop, to be encoded and stored (in the background,
// or at once by now). The Done bitmap is encoded and the runner's state taken together, at one
// moment of the loop, so the stored checkpoint is consistent however long the write takes. The
// runner's encode (a jobs.Snapshotter's, say) runs in the writer, off the loop, as does encoding
// the checkpoint itself.
type snapshot struct {
	j       *job
	cp      protocol.Checkpoint // as stored, Done and Aggregate dropped
	stored  protocol.Checkpoint // to store: Done set, Aggregate from encode
	run     runState            // the runner's part; its encode gives Aggregate
	ifMatch store.ETag
	acks    []*bus.Delivery // results this checkpoint covers: acknowledged once it is stored
	start   time.Time
	meta    map[string]string // the status record stored with it (set by put)
	create  bool              // stored only if no checkpoint exists: a lost job's failed status, a light job's first
	light   bool              // the job's first write (smalljob.go): marked first unless terminal
	// troubles is store.TransientFailures as the snapshot was taken; wholeAt the job's
	// jobWrites.troubles then. Equal, the store had no trouble since the job's state was known
	// whole, so a rollback cannot have lost it (lost.go).
	troubles, wholeAt uint64
}

// prepare takes j's checkpoint. When every shard is merged it also finalizes: the checkpoint
// carries the result and state succeeded. If the job's code fails on the way (encoding the
// aggregate), the job fails, and its checkpoint is the terminal one.
func (c *checkpointer) prepare(j *job) (*snapshot, error) {
	s, err := c.prepareOnce(j)
	var ue *UserCodeError
	if errors.As(err, &ue) {
		c.loop.fail(j, err)
		return c.prepareOnce(j) // terminal: none of the job's code is called
	}
	return s, err
}

func (c *checkpointer) prepareOnce(j *job) (*snapshot, error) {
	start := time.Now()
	cp := j.cp
	cp.WriterEpoch, cp.WriterTerm = c.fence.Epoch, c.fence.ID
	cp.Seq++
	cp.UpdatedAt = c.cfg.Now().UTC()
	cp.DoneCount = int(j.done.GetCardinality())
	var err error
	if cp.Done, err = j.done.ToBytes(); err != nil {
		return nil, fmt.Errorf("encode done bitmap: %w", err)
	}
	if j.complete && cp.State == jobs.StateRunning {
		res, err := j.run.result(j)
		if err != nil {
			c.codeFailed(j.id, err)
			cp.State, cp.Error = jobs.StateFailed, err.Error()
		} else {
			cp.State, cp.Result = jobs.StateSucceeded, res
		}
	}
	st, err := j.run.state(j, cp.State.Terminal())
	if err != nil {
		return nil, err
	}
	cp.Phase, cp.PhaseDone, cp.PhaseTotal = st.phase, st.phaseDone, st.phaseTotal
	if cp.State.Terminal() && cp.FinishedAt == nil {
		now := cp.UpdatedAt
		cp.FinishedAt = &now
	}
	stored := cp
	cp.Done, cp.Aggregate = nil, nil
	light := j.light.Load()
	return &snapshot{j: j, cp: cp, stored: stored, run: st, ifMatch: j.etag, start: start, create: j.w.lost || light, light: light,
		troubles: store.TransientFailures(), wholeAt: j.w.troubles}, nil
}

// put encodes a snapshot and stores it, If-Match on the ETag its job had when it was prepared.
// It touches no loop state, so it may run in the background.
func (c *checkpointer) put(ctx context.Context, s *snapshot) (store.ETag, error) {
	defer telemetry.Start(ctx, s.j.id, "checkpoint").End()
	agg, err := s.run.encode()
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
	s.meta = statusMeta(c.log, &cp, s.j.spec)
	cond := store.Cond{IfMatch: s.ifMatch}
	if s.create {
		cond = store.Cond{IfNoneMatch: true} // the lost job's failed status (lost.go), a light job's first
	}
	if s.light && !cp.State.Terminal() {
		// A light job that runs on is taken in now: its active marker first, as intake's
		// commitPlanned does (a storage rollback keeps a prefix of the writes).
		if _, err := c.store.Put(ctx, protocol.ActiveBlob(cp.Job), nil, store.Cond{}); err != nil {
			return "", fmt.Errorf("write active marker: %w", err)
		}
	}
	etag, err := c.store.PutMeta(ctx, protocol.CheckpointBlob(cp.Job), data, s.meta, cond)
	c.cfg.Metrics.CheckpointWritten(time.Since(began), len(data), err)
	if !s.create && (errors.Is(err, store.ErrConflict) || errors.Is(err, store.ErrNotFound)) {
		// Refused: a newer leader wrote the checkpoint, or the storage lost it with the job's
		// other state. Only the first is a reason to step down.
		gen := c.generation()
		if s.troubles == s.wholeAt {
			gen = "" // the store had no trouble since the job's state was known whole: no rollback
		}
		if lost := stateLost(ctx, c.store, s.j.id, gen); lost != nil {
			return "", lost
		}
	}
	if errors.Is(err, store.ErrConflict) {
		return "", c.fence.Conflict(ctx, s.j.id)
	}
	return etag, err
}

// apply records a stored snapshot as its job's last checkpoint. What the loop changed since the
// snapshot (counts, a state set by end) stays; a terminal state the snapshot stored wins.
func (c *checkpointer) apply(s *snapshot, etag store.ETag) {
	j := s.j
	j.etag, j.w.meta, j.w.troubles = etag, s.meta, s.troubles
	j.cp.WriterEpoch, j.cp.WriterTerm, j.cp.Seq, j.cp.UpdatedAt, j.cp.DoneCount = s.cp.WriterEpoch, s.cp.WriterTerm, s.cp.Seq, s.cp.UpdatedAt, s.cp.DoneCount
	j.cp.Phase, j.cp.PhaseDone, j.cp.PhaseTotal = s.cp.Phase, s.cp.PhaseDone, s.cp.PhaseTotal
	if s.cp.State.Terminal() {
		j.cp.State, j.cp.Result, j.cp.Error, j.cp.FinishedAt = s.cp.State, s.cp.Result, s.cp.Error, s.cp.FinishedAt
	}
	if s.light {
		c.loop.lightStored(j, s.cp.State.Terminal())
	}
}

// now checkpoints j at once (claiming a job, stepping down). If the job's code fails encoding
// its aggregate, the job fails, and its terminal checkpoint is written instead.
func (c *checkpointer) now(ctx context.Context, j *job) error {
	s, err := c.prepare(j)
	if err != nil {
		return err
	}
	etag, err := c.put(ctx, s)
	var ue *UserCodeError
	if errors.As(err, &ue) {
		c.loop.fail(j, err)
		if s, err = c.prepare(j); err != nil {
			return err
		}
		etag, err = c.put(ctx, s)
	}
	if err != nil {
		return err
	}
	c.apply(s, etag)
	j.dirty = false
	return nil
}

// learnGeneration reads the jobs container's generation for stateLost, trying again while the
// storage cannot answer, until it knows it or ctx ends.
func (c *checkpointer) learnGeneration(ctx context.Context) {
	g, ok := c.store.(generationer)
	if !ok {
		return
	}
	for wait := 100 * time.Millisecond; ; wait = min(2*wait, 5*time.Second) {
		gen, err := g.Generation(ctx)
		if err == nil {
			c.gen.Store(gen)
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
	}
}

// generation is the jobs container's generation as the term began; "" while unknown.
func (c *checkpointer) generation() store.ETag {
	g, _ := c.gen.Load().(store.ETag)
	return g
}

// writeFailed handles a checkpoint write of job j that failed with err: a job whose state was
// lost ends (lose), one the store rolled back is written back (restore), a deposed term stops
// (ErrDeposed), and any other failure waits for the job's next write.
func (c *checkpointer) writeFailed(ctx context.Context, j *job, err error) error {
	switch {
	case errors.Is(err, errStateLost):
		c.lose(ctx, j, err)
	case errors.Is(err, errRolledBack):
		return c.restore(ctx, j, err)
	case errors.Is(err, ErrDeposed) || errors.Is(err, core.ErrRetryClaim):
		return fmt.Errorf("%w: %v", ErrDeposed, err)
	default:
		j.dirty = true
		c.log.Warn("checkpoint failed; will retry", "job", j.id, "err", err)
	}
	return nil
}

// restore writes back job j's state, which the store lost in a rollback of its recent writes
// (why says how that was found; lost.go): its spec, and its active marker while it runs, each
// only if missing, then its checkpoint as this term holds it, If-None-Match. The job goes on.
// It returns ErrDeposed when another term wrote the checkpoint first; a write that fails
// otherwise is tried again at the next checkpoint.
func (c *checkpointer) restore(ctx context.Context, j *job, why error) error {
	c.log.Warn("the store lost the job's recent writes; writing back the state this term holds", "job", j.id, "err", why)
	err := c.rewrite(ctx, j)
	if err == nil {
		j.w.lost = true // written If-None-Match
		err = c.now(ctx, j)
		j.w.lost = false
	}
	if errors.Is(err, store.ErrExists) {
		err = c.fence.Conflict(ctx, j.id) // another term wrote it first
	}
	if err != nil {
		return c.writeFailed(ctx, j, err)
	}
	c.ack(j.w.acks)
	j.w.acks = nil
	if j.cp.State.Terminal() {
		c.loop.retire(ctx, j)
	}
	return nil
}

// rewrite stores job j's spec if it is missing, and its active marker while it runs.
func (c *checkpointer) rewrite(ctx context.Context, j *job) error {
	data, err := j.spec.Encode()
	if err != nil {
		return fmt.Errorf("encode spec: %w", err)
	}
	if _, err := c.store.Put(ctx, protocol.SpecBlob(j.id), data, store.Cond{IfNoneMatch: true}); err != nil && !errors.Is(err, store.ErrExists) {
		return fmt.Errorf("write spec: %w", err)
	}
	if !j.cp.State.Terminal() {
		if _, err := c.store.Put(ctx, protocol.ActiveBlob(j.id), nil, store.Cond{}); err != nil {
			return fmt.Errorf("write active marker: %w", err)
		}
	}
	return nil
}

// lose ends job j, whose state was lost with the storage (why says how that was found): it
// fails with LostStateError, its failed status is stored as a new checkpoint, and it leaves the
// term. The results held for it are acknowledged: nothing is left to merge them into.
func (c *checkpointer) lose(ctx context.Context, j *job, why error) {
	c.log.Error("job's state was lost with the storage; the job fails", "job", j.id, "err", why)
	c.loop.end(j, jobs.StateFailed, LostStateError)
	if j.cp.State != jobs.StateFailed || j.cp.Error != LostStateError {
		// It ended here, but its terminal checkpoint was lost with the rest (and its outputs
		// may be): it failed all the same.
		j.cp.State, j.cp.Error, j.cp.Result = jobs.StateFailed, LostStateError, nil
	}
	j.w.lost = true
	if err := c.now(ctx, j); err != nil {
		// The status cannot be written (the storage is still away): the job leaves the term all
		// the same, as the next write would find the same.
		c.log.Warn("cannot store the failed status of a job lost with the storage", "job", j.id, "err", err)
		j.dirty = false
	}
	j.w.lost = false
	c.ack(j.w.acks)
	j.w.acks = nil
	c.loop.retire(ctx, j)
}
