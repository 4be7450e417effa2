package coordinator

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/mapagg/mapagg/bus"
	"github.com/mapagg/mapagg/internal/protocol"
	"github.com/mapagg/mapagg/jobs"
	"github.com/mapagg/mapagg/store"
)

// Coordinator is the leader-only work. One Coordinator lives as long as its process; each term
// of leadership is one call to Lead.
type Coordinator struct {
	cfg   Config
	store Store
	queue Queue
	bus   Bus
	env   jobs.Env
	log   *slog.Logger

	leading  atomic.Bool
	lastBeat atomic.Int64  // unix nanos of the main loop's last turn
	qhealth  queueHealth   // intake's receives
	seen     atomic.Uint64 // the highest writer epoch of any checkpoint read (HighestEpochSeen)
}

// HighestEpochSeen is the highest epoch of any checkpoint this coordinator read: its next term
// must take an epoch above it (election.Elector.RaiseEpochFloor), even if the lease blob's
// epoch went back in time.
func (c *Coordinator) HighestEpochSeen() uint64 { return c.seen.Load() }

func (c *Coordinator) sawEpoch(n uint64) {
	for {
		s := c.seen.Load()
		if n <= s || c.seen.CompareAndSwap(s, n) {
			return
		}
	}
}

// New returns a coordinator over the jobs container, the intake queue and the bus; env is what
// job types read when they split a job.
func New(cfg Config, st Store, q Queue, b Bus, env jobs.Env) (*Coordinator, error) {
	cfg = cfg.withDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Coordinator{cfg: cfg, store: st, queue: q, bus: b, env: env, log: cfg.Logger.With("component", "coordinator")}, nil
}

// Healthy reports ErrStalled when this process leads and its main loop has not turned within
// StallTimeout. Wire it to the elector, so a stuck coordinator stops renewing its lease.
func (c *Coordinator) Healthy() error {
	if !c.leading.Load() {
		return nil
	}
	if since := time.Since(time.Unix(0, c.lastBeat.Load())); since > c.cfg.StallTimeout {
		return fmt.Errorf("%w: no progress for %v", ErrStalled, since.Round(time.Millisecond))
	}
	if d, err := c.qhealth.err(); err != nil && c.cfg.QueueCutOff > 0 && d > c.cfg.QueueCutOff {
		return err // hand over: another worker may reach the queue
	}
	return nil
}

func (c *Coordinator) beat() { c.lastBeat.Store(time.Now().UnixNano()) }

// term is one leadership term's state, owned by Lead's goroutine except where noted.
type term struct {
	*Coordinator
	epoch   uint64
	id      string // random: tells this term from another that got the same epoch (fence.go)
	elected time.Time
	log     *slog.Logger

	active map[string]*job
	// waiting are the jobs this term found waiting for a type it lacks (waiting.go); claims run
	// in parallel, hence the lock.
	waitMu   sync.Mutex
	waiting  map[string]bool
	finished map[string]jobs.State  // jobs this term saw end (bounded)
	hiding   atomic.Pointer[hidden] // the received batch intake keeps hidden (visibility.go)
	pending  int                    // merged results awaiting a checkpoint, all jobs
	merged   int64                  // results merged this term
	nActive  atomic.Int32           // len(active), for intake

	newJobs    chan *job          // from intake
	claimReq   chan string        // from intake: a planned job to make sure of
	dispatched chan dispatchEvent // from dispatchers
	cancels    chan string        // from NATS hints
	wake       chan string        // to intake: a job was submitted (its id, as announced)
	stageErr   chan error         // from stages of their own (schedules): the term must end
	kick       chan struct{}      // a job ended: rescan soon, for the jobs waiting after it
	afterSeen  atomic.Bool        // a job waits after others (after.go): kick on every end
	cleaning   sync.Map           // ids of ended jobs whose clean-up runs: rescan leaves them
	keyedLost  chan keyedLoss     // from map manifest writers: committed map runs gone (keyed.go)

	dispatchers sync.WaitGroup
	cleanups    sync.WaitGroup

	// Checkpoint writes in the background, at most one per job: their outcomes come back on
	// writes, to the loop.
	writes   chan written
	writers  sync.WaitGroup
	inflight int

	fair fairState // fair dispatch between the running jobs of a type (fair.go)
}

// written is the outcome of a background checkpoint write.
type written struct {
	s    *snapshot
	etag store.ETag
	err  error
}

type dispatchEvent struct {
	job  string
	upto int
	err  error
}

// Lead runs one term of leadership until ctx ends (leadership lost or the process stopping) or
// the coordinator finds itself deposed. It resumes every running job from its checkpoint, then
// takes new jobs from the queue. On return it has stopped dispatching and written a final
// checkpoint of every job it could.
func (c *Coordinator) Lead(ctx context.Context, epoch uint64) error {
	t := c.newTerm(epoch)
	c.beat()
	c.qhealth.ok()
	c.leading.Store(true)
	defer c.leading.Store(false)
	t.log.Info("coordinator starting")

	// A term stopped while it starts has ended normally, like one stopped later.
	stopped := func(err error) error {
		if ctx.Err() != nil && !errors.Is(err, ErrDeposed) {
			return nil
		}
		return err
	}
	if err := t.rescan(ctx); err != nil {
		return stopped(err)
	}
	feed, err := c.bus.OpenResults(ctx, epoch, c.cfg.ResultsPrefetch)
	if err != nil {
		return stopped(err)
	}
	defer feed.Stop()
	t.log.Info("coordinator resumed", "jobs", len(t.active), "since_elected", time.Since(t.elected).Round(time.Millisecond))
	c.emit(Event{Kind: EventTermStarted, Epoch: epoch, Count: len(t.active)})

	for _, sub := range []struct {
		subj string
		fn   func([]byte)
	}{
		{bus.CtlCancel, func(b []byte) { t.onCancelHint(ctx, string(b)) }},
		{bus.CtlSubmitted, func(b []byte) { nonBlocking(t.wake, string(b)) }},
	} {
		stop, err := c.bus.Subscribe(sub.subj, sub.fn)
		if err != nil {
			return stopped(fmt.Errorf("subscribe %s: %w", sub.subj, err))
		}
		defer stop()
	}

	intakeCtx, stopIntake := context.WithCancel(ctx)
	var intake sync.WaitGroup
	intake.Add(1)
	go func() {
		defer intake.Done()
		t.intake(intakeCtx)
	}()
	intake.Add(1)
	go func() {
		defer intake.Done()
		if err := t.runSchedules(intakeCtx); err != nil {
			nonBlocking(t.stageErr, err)
		}
	}()
	intake.Add(1)
	go func() {
		defer intake.Done()
		if err := t.runRetention(intakeCtx); err != nil {
			nonBlocking(t.stageErr, err)
		}
	}()

	err = t.loop(ctx, feed)

	// Step down: stop taking and dispatching work, then checkpoint what was merged, so the next
	// leader starts from here. The writes are fenced: if a newer leader already claimed a job, the
	// write fails and its results stay unacknowledged for that leader.
	stopIntake()
	intake.Wait()
	for _, j := range t.active {
		if j.stopDispatch != nil {
			j.stopDispatch()
		}
	}
	t.dispatchers.Wait()
	// Writes in flight finish (or fail) first: each job's next write is If-Match on their ETag.
	for t.inflight > 0 {
		w := <-t.writes
		t.inflight--
		if !errors.Is(err, ErrDeposed) {
			if cerr := t.commit(context.WithoutCancel(ctx), w, false); cerr != nil {
				t.log.Warn("checkpoint", "err", cerr)
			}
		}
	}
	t.writers.Wait()
	if !errors.Is(err, ErrDeposed) {
		fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 3*time.Second)
		if cerr := t.checkpointAll(fctx); cerr != nil {
			t.log.Warn("final checkpoint", "err", cerr)
		}
		cancel()
	}
	t.cleanups.Wait()
	t.log.Info("coordinator stopped", "merged", t.merged, "err", err)
	if ctx.Err() != nil && !errors.Is(err, ErrDeposed) {
		err = nil
	}
	c.emit(Event{Kind: EventTermEnded, Epoch: epoch, Err: err})
	return err
}

func (c *Coordinator) newTerm(epoch uint64) *term {
	id := newTermID()
	return &term{
		Coordinator: c, epoch: epoch, id: id, elected: time.Now(),
		log:    c.log.With("epoch", epoch, "term", id),
		active: map[string]*job{}, waiting: map[string]bool{},
		finished: map[string]jobs.State{},
		newJobs:  make(chan *job), claimReq: make(chan string, 64),
		dispatched: make(chan dispatchEvent, 256), cancels: make(chan string, 64), wake: make(chan string, 16),
		writes: make(chan written, 64), stageErr: make(chan error, 1), kick: make(chan struct{}, 1),
		keyedLost: make(chan keyedLoss, 16),
	}
}

// onCancelHint passes a cancel hint to the loop only when the job's cancel marker exists in
// storage: hints travel on core NATS unauthenticated, and anyone who can publish there must not
// be able to cancel a job. It runs on the subscription's goroutine, not the loop's, so a flood of
// hints delays only other hints (the channel drops what the loop cannot take).
func (t *term) onCancelHint(ctx context.Context, id string) {
	if protocol.CheckID(id) != nil {
		return
	}
	rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if ok, err := t.store.Exists(rctx, protocol.CancelBlob(id)); err != nil || !ok {
		if err == nil {
			t.log.Warn("cancel hint without a cancel marker ignored", "job", id)
		}
		return // a storage error: the rescan reads the marker later
	}
	nonBlocking(t.cancels, id)
}

func nonBlocking[T any](ch chan T, v T) {
	select {
	case ch <- v:
	default:
	}
}

func (t *term) loop(ctx context.Context, feed *bus.Feed) error {
	ckpt := time.NewTicker(t.cfg.CheckpointInterval)
	defer ckpt.Stop()
	rescan := time.NewTicker(t.cfg.RescanInterval)
	defer rescan.Stop()
	repair := time.NewTicker(t.cfg.RepairInterval)
	defer repair.Stop()
	backup := time.NewTicker(backupCheckInterval)
	defer backup.Stop()
	fair := time.NewTicker(fairInterval)
	defer fair.Stop()
	if t.cfg.NoBackupTasks {
		backup.Stop()
	}
	for {
		t.beat()
		select {
		case <-ctx.Done():
			return ctx.Err()
		case d, ok := <-feed.C:
			if !ok {
				if ctx.Err() != nil {
					return ctx.Err()
				}
				_, ferr := feed.Err()
				return fmt.Errorf("%w: results consumer gone (%v)", ErrDeposed, ferr)
			}
			if err := t.onResult(ctx, d); err != nil {
				return err
			}
			if t.pending >= t.cfg.CheckpointEvery {
				t.checkpointDirty(ctx, true)
			}
		case w := <-t.writes:
			t.inflight--
			if err := t.commit(ctx, w, true); err != nil {
				return err
			}
		case err := <-t.stageErr:
			return err
		case <-t.kick:
			if err := t.rescan(ctx); err != nil {
				return err
			}
		case j := <-t.newJobs:
			t.adopt(ctx, j)
		case id := <-t.claimReq:
			if err := t.ensure(ctx, id); err != nil {
				return err
			}
		case ev := <-t.dispatched:
			t.onDispatched(ev)
		case l := <-t.keyedLost:
			t.onKeyedLoss(ctx, l) // keyed.go
		case id := <-t.cancels:
			t.cancel(ctx, id, "cancelled by user")
		case <-ckpt.C:
			t.checkpointDirty(ctx, false)
		case now := <-fair.C:
			t.rebalance(now)
		case <-backup.C: // stopped with NoBackupTasks
			t.backups(ctx)
		case <-repair.C:
			t.repair(ctx)
		case <-rescan.C:
			if err := t.rescan(ctx); err != nil {
				return err
			}
			t.checkCancels(ctx)
		}
	}
}

// adopt makes j active and starts dispatching what of it is not yet dispatched.
func (t *term) adopt(ctx context.Context, j *job) {
	if _, ok := t.active[j.id]; ok {
		return
	}
	t.active[j.id] = j
	t.nActive.Store(int32(len(t.active)))
	// The job's checkpoint was just stored (the first one at intake, or the claim's): the next
	// is due an interval from now, so a job shorter than that is written once more, when its
	// last result is merged, with no tick's write in flight to wait for.
	j.nextDue = time.Now().Add(t.cfg.CheckpointInterval)
	if j.cancelled && !j.complete {
		t.log.Info("job claimed with a cancel marker", "job", j.id)
		t.end(j, jobs.StateCancelled, "cancelled by user")
		return
	}
	if j.complete {
		j.dirty = true // finalize at the next checkpoint (a job with no shards, or all merged)
	}
	t.keyedAdopt(ctx, j) // keyed.go
	if j.cp.State == jobs.StateRunning && j.cp.Dispatched < j.cp.Total {
		src, err := t.source(j)
		if err != nil {
			t.fail(j, wrapOp("dispatch", err))
		} else {
			dctx, cancel := context.WithCancel(ctx)
			j.stopDispatch = cancel
			j.fair.counted = j.merged.Load()
			t.rebalance(time.Now()) // the job's window, and a smaller one for its type's others
			t.dispatchers.Add(1)
			go func() {
				defer t.dispatchers.Done()
				t.dispatch(dctx, j, src, j.cp.Dispatched)
			}()
		}
	}
	t.log.Info("job running", "job", j.id, "type", j.spec.Type, "shards", j.cp.Total, "done", j.cp.DoneCount, "dispatched", j.cp.Dispatched)
	t.emit(Event{Kind: EventJobResumed, Epoch: t.epoch, Job: j.id, Count: j.cp.DoneCount})
}

// ensure claims a planned job this term does not hold yet.
func (t *term) ensure(ctx context.Context, id string) error {
	if _, ok := t.active[id]; ok {
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
		if _, ok := t.active[id]; ok || protocol.CheckID(id) != nil {
			continue
		}
		if _, ok := t.cleaning.Load(id); ok {
			continue // ended here, its clean-up runs
		}
		if t.isWaiting(id) {
			// Waiting for a type this process lacks: only a cancel changes that in this term.
			if ok, err := t.store.Exists(ctx, protocol.CancelBlob(id)); err != nil || !ok {
				continue
			}
			t.setWaiting(id, false)
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

// checkCancels looks for cancel markers of active jobs (a backstop for the NATS hint).
func (t *term) checkCancels(ctx context.Context) {
	for id, j := range t.active {
		if j.cp.State.Terminal() {
			continue
		}
		if ok, err := t.store.Exists(ctx, protocol.CancelBlob(id)); err == nil && ok {
			t.cancel(ctx, id, "cancelled by user")
		}
	}
}

// cancel ends a running job as cancelled (or failed, via fail); the terminal checkpoint is
// written at the next checkpoint tick, then its queued shards are purged.
func (t *term) cancel(ctx context.Context, id, why string) {
	j, ok := t.active[id]
	if !ok {
		t.setWaiting(id, false) // a waiting job: claim reads the marker and ends it
		if err := t.ensure(ctx, id); err != nil || t.active[id] == nil {
			return
		}
		j = t.active[id]
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

func (t *term) onDispatched(ev dispatchEvent) {
	j, ok := t.active[ev.job]
	if !ok || j.cp.State.Terminal() {
		return
	}
	if ev.err != nil {
		t.fail(j, wrapOp("dispatch", ev.err))
		return
	}
	if ev.upto > j.cp.Dispatched {
		j.cp.Dispatched, j.dirty = ev.upto, true
	}
}

// dispatch publishes shards [from, Total) in batches, reporting progress to the loop, and keeps
// at most DispatchWindow of them dispatched and not merged. Shards come from src as they are
// needed, so the dispatcher holds its batch and at most one plan page. A publish (or a plan page
// read) that fails is retried until ctx ends: the shards stream or storage may be briefly
// unavailable; a plan that cannot be read (a corrupt page) fails the job.
func (t *term) dispatch(ctx context.Context, j *job, src *planSource, from int) {
	id, typ, epoch, total := j.id, j.spec.Type, j.cp.PlanEpoch, j.cp.Total
	subject := t.bus.ShardTypeSubject(typ, id)
	per := max(j.cp.ShardsPerMsg, 1)
	for i := from; i < total; {
		n := t.room(j, i, total, per)
		for ; n == 0; n = t.room(j, i, total, per) {
			select {
			case <-ctx.Done():
				return
			case <-j.progress:
			}
		}
		shards, err := src.shardRange(ctx, i, i+n)
		if err == nil {
			batch := make([]bus.Outgoing, 0, n/per+1)
			for k := i; k < i+n && err == nil; {
				end := min((k/per+1)*per, i+n) // messages start at multiples of per, whoever dispatches
				var data []byte
				if data, err = protocol.EncodeShards(id, typ, epoch, k, shards[k-i:end-i]); err == nil {
					batch = append(batch, bus.Outgoing{Subject: subject, MsgID: protocol.ShardMsgID(id, k), Data: data})
				}
				k = end
			}
			if err != nil {
				t.report(ctx, dispatchEvent{job: id, err: err})
				return
			}
			err = t.bus.PublishAll(ctx, batch)
		} else if _, ok := err.(*UserCodeError); ok || errors.Is(err, jobs.ErrBadCheckpoint) {
			t.report(ctx, dispatchEvent{job: id, err: err})
			return
		}
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			t.log.Warn("dispatch batch failed; retrying", "job", id, "from", i, "err", err)
			select {
			case <-ctx.Done():
				return
			case <-time.After(500 * time.Millisecond):
			}
			continue
		}
		i += n
		t.report(ctx, dispatchEvent{job: id, upto: i})
	}
}

// room is how many shards from i the dispatcher may publish now (whole messages of per
// shards, or up to total): what the job's window (fair.go) leaves, once that is at least a
// quarter of the window, so a busy job publishes in a few larger rounds; 0 means wait. With
// nothing outstanding one message always goes (a message may carry more than the window).
func (t *term) room(j *job, i, total, per int) int {
	if g := int(j.gate.Load()) - 1; g >= 0 { // a keyed job's reduce tasks wait (keyed.go)
		if i >= g {
			return 0
		}
		total = min(total, g)
	}
	n := min(max(t.cfg.DispatchBatch/per, 1)*per, total-i)
	m := int(j.merged.Load())
	window := int(j.window.Load())
	free := window - max(i-m, 0)
	if i > m && free < min(n, max(window/4, per)) {
		return 0
	}
	return min(n, max(free/per*per, per))
}

func (t *term) report(ctx context.Context, ev dispatchEvent) {
	select {
	case t.dispatched <- ev:
	case <-ctx.Done():
	}
}

// onResult merges the results of one message (one result, or a batch of one job's), exactly once:
// a result is merged only if its shard is not in the done-bitmap and its epoch is the job's plan
// epoch; the message is acknowledged only after the checkpoint that includes every result it
// merged is written. A message that changes nothing is acknowledged at once; one with a result
// that cannot be merged yet (its large partial unreadable) is handed back whole, and the results
// of it already merged come back as duplicates, which are dropped.
func (t *term) onResult(ctx context.Context, d *bus.Delivery) error {
	rs, err := protocol.DecodeResults(d.Data())
	if err != nil {
		t.log.Error("malformed result; dead-lettered", "subject", d.Subject(), "err", err)
		t.emit(Event{Kind: EventDeadLettered, Epoch: t.epoch, Err: err})
		if derr := t.bus.DeadLetter(ctx, "results", d.Data(), err.Error()); derr != nil {
			_ = d.Nak(time.Second)
			return nil
		}
		_ = d.Term(err.Error())
		return nil
	}
	id := rs[0].Job // a batch holds one job's results
	j, ok := t.active[id]
	if !ok {
		if _, seen := t.finished[id]; !seen && t.resultStored(ctx, id) {
			// A replay of a job that succeeded (after a NATS restart, or past the duplicate
			// window): one read, no claim and no clean-up writes.
			t.finished[id] = jobs.StateSucceeded
		}
		if _, seen := t.finished[id]; !seen {
			if err := t.ensure(ctx, id); err != nil {
				return err
			}
		}
		if j, ok = t.active[id]; !ok {
			_ = d.Ack() // the job ended (or was never planned): nothing to merge into
			return nil
		}
	}
	hold, retry := false, false
	for _, r := range rs {
		switch t.mergeOne(ctx, j, r) {
		case mergeKept:
			hold = true
		case mergeRetry:
			retry = true
		}
	}
	switch {
	case retry:
		_ = d.Nak(time.Second)
	case hold:
		j.acks = append(j.acks, d)
		t.pending++
	default:
		_ = d.Ack()
	}
	if j.mapPhaseDone() && !j.writing && j.cp.State == jobs.StateRunning {
		t.startWrite(ctx, j) // the map phase is committed: store it, then the manifest (keyed.go)
	}
	if j.complete && j.cp.State == jobs.StateRunning && !j.writing {
		// The last result: finish now, not at the next tick (the final checkpoint carries the
		// result; it is as fenced as any other). A write in flight does it when it is stored.
		t.startWrite(ctx, j)
	}
	return nil
}

type mergeOutcome int

const (
	mergeDropped mergeOutcome = iota // nothing to keep (duplicate, other plan, job ended)
	mergeKept                        // changed the job: ack after the next checkpoint
	mergeRetry                       // cannot be merged now: hand the message back
)

// mergeOne merges one result into j, or says why not.
func (t *term) mergeOne(ctx context.Context, j *job, r *protocol.ResultMsg) mergeOutcome {
	switch {
	case r.Epoch != j.cp.PlanEpoch:
		t.log.Warn("result from another plan epoch dropped", "job", r.Job, "shard", r.Index, "epoch", r.Epoch, "plan_epoch", j.cp.PlanEpoch)
		return mergeDropped
	case r.Index >= j.cp.Total:
		return t.refuseResult(ctx, j, r, fmt.Sprintf("result for shard %d of job %s: outside the plan of %d shards", r.Index, r.Job, j.cp.Total))
	case j.cp.State.Terminal():
		return mergeDropped
	case j.done.Contains(uint32(r.Index)):
		j.cp.Duplicates++
		t.cfg.Metrics.DuplicateDropped()
		j.dirty = true
		return mergeKept
	case r.Error != "":
		t.end(j, jobs.StateFailed, r.Error)
		return mergeKept
	}
	partial := r.Partial
	if r.Ref != "" {
		var err error
		if partial, _, err = t.store.Get(ctx, r.Ref); err != nil {
			t.log.Warn("reading a large partial failed; result redelivered later", "job", r.Job, "ref", r.Ref, "err", err)
			return mergeRetry
		}
	}
	if ka := j.keyedOf(); ka != nil {
		// A keyed job's result is its task's commit (keyed.go).
		if out, ok := t.keyedCommit(ctx, j, ka, r, partial); !ok {
			return out
		}
	} else if err := j.call("merge", func() error { return j.agg.Merge(partial) }); err != nil {
		var ue *UserCodeError
		if errors.As(err, &ue) {
			// It panicked: the aggregate may be half-updated. The job fails, and its terminal
			// checkpoint stores no aggregate.
			t.fail(j, fmt.Errorf("shard %d: %w", r.Index, err))
			return mergeKept
		}
		// The aggregate is unchanged (jobs.Aggregate's contract) and the shard stays missing:
		// its real result, or self-repair, completes it.
		return t.refuseResult(ctx, j, r, fmt.Sprintf("result for shard %d of job %s cannot be merged: %v", r.Index, r.Job, err))
	}
	j.done.Add(uint32(r.Index))
	t.cfg.Metrics.ResultMerged()
	j.mergedOne()
	j.dirty = true
	j.bk.merged(j.done, r.Index, r.Micros, time.Now())
	if t.merged++; t.merged == 1 {
		t.log.Info("first result merged", "job", r.Job, "shard", r.Index, "since_elected", time.Since(t.elected).Round(time.Millisecond))
		t.emit(Event{Kind: EventFirstMerge, Epoch: t.epoch, Job: r.Job, Shard: r.Index})
	}
	if int(j.done.GetCardinality()) == j.cp.Total && t.keyedVerified(ctx, j) { // keyed.go
		j.complete = true
	}
	return mergeKept
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

// retire removes an ended job from the term and cleans up after it in the background.
func (t *term) retire(ctx context.Context, j *job) {
	delete(t.active, j.id)
	t.nActive.Store(int32(len(t.active)))
	t.rebalance(time.Now()) // its type's other jobs share its budget
	if len(t.finished) > 100_000 {
		clear(t.finished)
	}
	t.finished[j.id] = j.cp.State
	if t.afterSeen.Load() {
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
	t.cleaning.Store(cp.Job, true)
	t.cleanups.Add(1)
	go func() {
		defer t.cleanups.Done()
		defer t.cleaning.Delete(cp.Job)
		t.cleanup(context.WithoutCancel(ctx), &cp)
	}()
}
