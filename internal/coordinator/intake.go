package coordinator

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mapagg/mapagg/internal/coordinator/fence"
	"github.com/mapagg/mapagg/internal/coordinator/jobread"
	"github.com/mapagg/mapagg/internal/coordinator/lifecycle"
	"github.com/mapagg/mapagg/internal/protocol"
	"github.com/mapagg/mapagg/internal/queue"
	"github.com/mapagg/mapagg/jobs"
	"github.com/mapagg/mapagg/store"
)

// intake is the component that takes jobs in: off the queue (planned, or stored as waiting), and
// the waiting ones the loop claims (waiting.go, after.go). It owns the visibility of the messages
// it holds (visibility.go) and hands planned jobs to the loop in the queue's order. Its loop is
// in intakeloop.go; this file holds its state and the steps its chapters share (a job's first
// checkpoint, its markers, a stored job's end, a message's delete).
type intake struct {
	fence *fence.Fence
	reporter
	cfg    Config
	store  Store
	queue  Queue
	dead   deadLetterer
	health *queueHealth // the coordinator's: Healthy reads it
	tab    *jobTable    // counts, and the waiting set
	plans  jobPlanner
	life   ender
	reader jobread.Reader
	pace   *shardPace // shards a message by type (pace.go); nil: shardsPerMsg

	handed  chan *job     // to the loop: planned jobs
	claims  chan string   // to the loop: a planned job to make sure of
	wake    chan wakeHint // a job was submitted
	hiding  hiding        // message id → the received batch it is kept hidden in (visibility.go)
	lastNs  atomic.Int64
	drained atomic.Bool  // the last receive got fewer messages than it asked for (Backlog)
	taken   atomic.Int64 // messages received this term (Backlog)
	elected time.Time
	// listening: since when the term hears cancel hints (set before run starts; smalljob.go).
	listening time.Time
}

// deadLetterer stores a refused message (Bus).
type deadLetterer interface {
	DeadLetter(ctx context.Context, source string, data []byte, reason string) error
}

// jobPlanner splits a job (planner).
type jobPlanner interface {
	plan(ctx context.Context, id string, spec *protocol.Spec, impl jobs.Job) (*job, error)
}

// ender stores what a job's end leaves, and cleans up after one (lifecycle).
type ender interface {
	MarkEnded(ctx context.Context, cp *protocol.Checkpoint) error
	Cleanup(ctx context.Context, cp *protocol.Checkpoint)
}

var (
	_ deadLetterer = Bus(nil)
	_ jobPlanner   = (*planner)(nil)
	_ ender        = (*lifecycle.Lifecycle)(nil)
)

func newIntake(f *fence.Fence, rep reporter, cfg Config, st Store, q Queue, dead deadLetterer, health *queueHealth,
	tab *jobTable, plans jobPlanner, life ender, reader jobread.Reader) *intake {
	return &intake{fence: f, reporter: rep, cfg: cfg, store: st, queue: q, dead: dead, health: health, tab: tab,
		plans: plans, life: life, reader: reader,
		handed: make(chan *job), claims: make(chan string, 64), wake: make(chan wakeHint, 16)}
}

// wakeHint says a job was queued: its id, and whether intake may read its spec ahead (not when
// its message carries the spec).
type wakeHint struct {
	id        string
	readAhead bool
}

// announced takes a submitter's hint that a job was queued (protocol.ParseSubmitted).
func (in *intake) announced(data []byte) {
	id, inline := protocol.ParseSubmitted(data)
	nonBlocking(in.wake, wakeHint{id: id, readAhead: !inline})
}

// Enqueue queues job id, whose spec is stored, and wakes intake (the scheduler's submitter).
func (in *intake) Enqueue(ctx context.Context, id string) error {
	if err := in.queue.Enqueue(ctx, id); err != nil {
		return err
	}
	nonBlocking(in.wake, wakeHint{id: id, readAhead: true})
	return nil
}

// Backlog returns the job queue's approximate depth and how many messages intake received in
// this term: the scheduler estimates from them how long a job it queues would wait.
func (in *intake) Backlog(ctx context.Context) (int, int64, error) {
	d, ok := in.queue.(interface {
		Depth(context.Context) (int, error)
	})
	if !ok {
		return 0, in.taken.Load(), errors.New("the job queue does not tell its depth")
	}
	n, err := d.Depth(ctx)
	if err == nil && in.drained.Load() {
		// The last receive emptied the queue of visible messages: what it counts is hidden, not
		// waiting (a deposed term's received messages until their visibility ends, a job's
		// delayed retry). A job queued now would be taken at the next receive.
		n = 0
	}
	return n, in.taken.Load(), err
}

// lastIntake is when intake last received messages (the term's start before the first).
func (in *intake) LastIntake() time.Time {
	if ns := in.lastNs.Load(); ns != 0 {
		return time.Unix(0, ns)
	}
	return in.elected
}

// requeue puts a marked job without a checkpoint back on the queue, once a term: a storage
// rollback can keep the marker and lose the checkpoint after its message was deleted. It waits
// until the job has been seen so for two rescan intervals, past an intake between its marker and
// its checkpoint. A second message is harmless: intake finds the job planned, or plans it once
// (If-None-Match).
func (in *intake) requeue(ctx context.Context, id string) {
	if !in.tab.requeueDue(id, in.cfg.Now(), 2*in.cfg.RescanInterval) {
		return // queued already, or seen too recently
	}
	if ok, err := in.store.Exists(ctx, protocol.SpecBlob(id)); err != nil || !ok {
		return // unknown: the next rescan asks again; gone: deleted, nothing to run
	}
	if err := in.queue.Enqueue(ctx, id); err != nil {
		in.log.Warn("requeue a marked job without a checkpoint", "job", id, "err", err)
		return
	}
	in.tab.requeuedNow(id)
	in.log.Warn("a marked job had no checkpoint (a storage rollback?); queued again", "job", id)
}

// turn orders the hand-over of a batch's jobs to the main loop: each waits for the one before.
type turn struct {
	prev <-chan struct{}
	mine chan struct{}
	once sync.Once
}

// wait blocks until the message before has handed over its job or given up; false when ctx ended.
func (tn *turn) wait(ctx context.Context) bool {
	select {
	case <-tn.prev:
		return true
	case <-ctx.Done():
		return false
	}
}

func (tn *turn) done() { tn.once.Do(func() { close(tn.mine) }) }

// markTimeout bounds the delete of a planned job's message, which finishes even if the term ends
// meanwhile.
const markTimeout = 10 * time.Second

// writeFirst creates a job's first checkpoint (If-None-Match), running with j's plan (j.cp.Total
// shards, of form j.cp.Plan), waiting, or terminal with a reason. Only one leader's first
// checkpoint can exist.
func (in *intake) writeFirst(ctx context.Context, id, typ string, state jobs.State, reason string, j *job) (store.ETag, error) {
	cp, err := in.firstCheckpoint(id, typ, state, reason, j)
	if err != nil {
		return "", err
	}
	data, err := cp.Encode()
	if err != nil {
		return "", err
	}
	var spec *protocol.Spec
	if j != nil {
		spec = j.spec
	}
	etag, err := in.store.PutMeta(ctx, protocol.CheckpointBlob(cp.Job), data, statusMeta(in.log, &cp, spec), store.Cond{IfNoneMatch: true})
	if err != nil {
		if !errors.Is(err, store.ErrExists) {
			in.log.Warn("write first checkpoint", "job", id, "err", err)
		}
		return "", err
	}
	if state.Terminal() {
		if err := in.life.MarkEnded(ctx, &cp); err != nil {
			in.log.Warn("job refused", "job", id, "err", err) // kept: retention does not see it
		}
	}
	if j != nil {
		cp.Done, cp.Aggregate = nil, nil
		j.cp = cp
		j.complete = cp.Total == 0
	}
	return etag, nil
}

// firstCheckpoint is a job's first checkpoint, planned by this term (see writeFirst).
func (in *intake) firstCheckpoint(id, typ string, state jobs.State, reason string, j *job) (protocol.Checkpoint, error) {
	now := in.cfg.Now().UTC()
	cp := protocol.Checkpoint{Version: protocol.CheckpointVersion, Job: id, Type: typ, State: state, PlanEpoch: in.fence.Epoch,
		WriterEpoch: in.fence.Epoch, WriterTerm: in.fence.ID, Error: reason, Seq: 1, StartedAt: now, UpdatedAt: now}
	if state.Terminal() {
		cp.FinishedAt = &now
	}
	if j != nil {
		cp.Total, cp.Plan, cp.Kind = j.cp.Total, j.cp.Plan, j.cp.Kind
		cp.Phase, cp.PhaseDone, cp.PhaseTotal = j.cp.Phase, j.cp.PhaseDone, j.cp.PhaseTotal // a keyed job's (keyed.go)
		cp.ShardsPerMsg = in.cfg.ShardsPerMsg
		if cp.ShardsPerMsg == 0 {
			cp.ShardsPerMsg = in.perMsg(typ, cp.Kind, cp.Total)
		}
		st, err := j.run.state(j, false)
		if err == nil {
			cp.Aggregate, err = st.encode()
		}
		if err != nil {
			return cp, err
		}
		if cp.Done, err = j.done.ToBytes(); err != nil {
			return cp, err
		}
	}
	return cp, nil
}

// mark stores the active marker of job id: the next leader's rescan finds the job by it.
func (in *intake) mark(ctx context.Context, id string) error {
	if _, err := in.store.Put(ctx, protocol.ActiveBlob(id), nil, store.Cond{}); err != nil {
		return fmt.Errorf("write active marker: %w", err)
	}
	return nil
}

// planned takes the message of a job that has a first checkpoint off the queue, once its active
// marker is stored (the leader that planned it may have died before storing it), and makes sure
// this term holds the job.
func (in *intake) planned(ctx context.Context, m queue.Message, id string) {
	if err := in.mark(ctx, id); err != nil {
		in.log.Warn("planned job", "job", id, "err", err)
		return
	}
	in.deleteMsg(ctx, m)
	in.request(ctx, id)
}

// refuse records why a job cannot run (a failed first checkpoint the user can read with
// `worker status`) and takes it off the queue.
func (in *intake) refuse(ctx context.Context, m queue.Message, id, typ string, why error) {
	in.codeFailed(id, why)
	_, err := in.writeFirst(ctx, id, typ, jobs.StateFailed, why.Error(), nil)
	switch {
	case errors.Is(err, store.ErrExists):
		in.planned(ctx, m, id) // planned before (by a build that accepted it): it runs on
	case err == nil:
		in.log.Error("job refused", "job", id, "type", typ, "err", why)
		in.deleteMsg(ctx, m)
	}
}

func (in *intake) request(ctx context.Context, id string) {
	select {
	case in.claims <- id:
	case <-ctx.Done():
	}
}

func (in *intake) deleteMsg(ctx context.Context, m queue.Message) {
	m, unlock := in.hiding.latest(m) // the receipt of the last extension (visibility.go)
	defer unlock()
	if err := in.queue.Delete(ctx, m); err != nil {
		in.log.Warn("delete queue message", "id", m.ID, "err", err)
	}
}

func (in *intake) deadQueue(ctx context.Context, m queue.Message, reason string) {
	if err := in.dead.DeadLetter(ctx, "queue", []byte(m.Text), reason); err != nil {
		in.log.Warn("dead-letter queue message", "err", err)
		return
	}
	in.deleteMsg(ctx, m)
}

// perMsg is how many shards a message carries for a job of type typ and kind with total shards:
// short shards of an aggregate job travel together (pace.go).
func (in *intake) perMsg(typ string, kind protocol.Kind, total int) int {
	if in.pace == nil || kind != protocol.KindAggregate {
		return shardsPerMsg(total)
	}
	slots := 0
	if in.cfg.Slots != nil {
		slots = in.cfg.Slots(typ)
	}
	return in.pace.perMsg(typ, total, slots)
}

// shardsPerMsg decides how many consecutive shards travel in one message. Jobs of fewer than 4096
// shards get one each: their shards may be long, and one per message spreads them best (unless
// their type's shards are known to be short, shardPace.perMsg). Others get
// about total/4096, 2 to 16, so a big job of small shards costs a fraction of the messages.
func shardsPerMsg(total int) int {
	if total < 4096 {
		return 1
	}
	return min(max(total/4096, 2), 16)
}

func nonBlocking[T any](ch chan T, v T) {
	select {
	case ch <- v:
	default:
	}
}

// endStored ends the job of checkpoint cp (read with etag), which this term does not run, in a
// terminal state, and cleans up after it. It returns core.ErrRetryClaim when the checkpoint changed
// meanwhile.
func (in *intake) endStored(ctx context.Context, cp *protocol.Checkpoint, etag store.ETag, state jobs.State, why string) error {
	next := *cp
	now := in.cfg.Now().UTC()
	next.State, next.Error, next.Result, next.Aggregate, next.FinishedAt = state, why, nil, nil, &now
	if _, err := in.putStored(ctx, &next, etag); err != nil {
		return err
	}
	in.tab.setWaiting(cp.Job, false)
	in.log.Info("job ended", "job", cp.Job, "state", state, "reason", why)
	var werr error
	if why != "" {
		werr = errors.New(why)
	}
	in.emit(Event{Kind: EventJobFinished, Epoch: in.fence.Epoch, Job: cp.Job, State: string(state), Count: cp.DoneCount, Err: werr})
	in.life.Cleanup(ctx, &next)
	return nil
}

// putStored writes cp as this term's (If-Match etag). A conflict is explained by conflict: this
// leader is deposed, or core.ErrRetryClaim.
func (in *intake) putStored(ctx context.Context, cp *protocol.Checkpoint, etag store.ETag) (store.ETag, error) {
	cp.WriterEpoch, cp.WriterTerm = in.fence.Epoch, in.fence.ID
	cp.Seq++
	cp.UpdatedAt = in.cfg.Now().UTC()
	data, err := cp.Encode()
	if err != nil {
		return "", err
	}
	began := time.Now()
	next, err := in.store.Put(ctx, protocol.CheckpointBlob(cp.Job), data, store.Cond{IfMatch: etag})
	in.cfg.Metrics.CheckpointWritten(time.Since(began), len(data), err)
	if errors.Is(err, store.ErrConflict) {
		return "", in.fence.Conflict(ctx, cp.Job)
	}
	return next, err
}

// keepHidden extends the visibility of msgs every third of QueueVisibility until stop, when the
// queue can. Messages deleted meanwhile (through deleteMsg) are left alone.
func (in *intake) keepHidden(ctx context.Context, msgs []queue.Message) (stop func()) {
	ext, ok := in.queue.(Extender)
	if !ok || len(msgs) == 0 {
		return func() {}
	}
	h := &hidden{msgs: make(map[string]queue.Message, len(msgs))}
	for _, m := range msgs {
		h.msgs[m.ID] = m
		in.hiding.store(m.ID, h)
	}
	kctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(in.cfg.QueueVisibility / 3)
		defer tick.Stop()
		for {
			select {
			case <-kctx.Done():
				return
			case <-tick.C:
			}
			h.mu.Lock()
			for id, m := range h.msgs {
				if n, err := ext.Extend(kctx, m, in.cfg.QueueVisibility); err == nil {
					h.msgs[id] = n
				} else if kctx.Err() == nil {
					in.log.Warn("keep a job message hidden", "id", id, "err", err)
				}
			}
			h.mu.Unlock()
		}
	}()
	return func() {
		cancel()
		<-done
		for _, m := range msgs {
			in.hiding.forget(m.ID, h)
		}
	}
}
