package coordinator

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mapagg/mapagg/internal/coordinator/fence"
	"github.com/mapagg/mapagg/internal/coordinator/jobread"
	"github.com/mapagg/mapagg/internal/coordinator/lifecycle"
	"github.com/mapagg/mapagg/internal/protocol"
	"github.com/mapagg/mapagg/internal/queue"
	"github.com/mapagg/mapagg/internal/telemetry"
	"github.com/mapagg/mapagg/jobs"
	"github.com/mapagg/mapagg/store"
)

// intake is the component that takes jobs in: off the queue (planned, or stored as waiting), and
// the waiting ones the loop claims (waiting.go, after.go). It owns the visibility of the messages
// it holds (visibility.go) and hands planned jobs to the loop in the queue's order.
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

	handed  chan *job   // to the loop: planned jobs
	claims  chan string // to the loop: a planned job to make sure of
	wake    chan string // a job was submitted (its id, as announced)
	hiding  hiding      // message id → the received batch it is kept hidden in (visibility.go)
	lastNs  atomic.Int64
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
		handed: make(chan *job), claims: make(chan string, 64), wake: make(chan string, 16)}
}

// announced takes a submitter's hint that a job was queued (protocol.ParseSubmitted). A job
// whose message carries its spec needs no read ahead: "" only wakes intake.
func (in *intake) announced(data []byte) {
	id, inline := protocol.ParseSubmitted(data)
	if inline {
		id = ""
	}
	nonBlocking(in.wake, id)
}

// Enqueue queues job id, whose spec is stored, and wakes intake (the scheduler's submitter).
func (in *intake) Enqueue(ctx context.Context, id string) error {
	if err := in.queue.Enqueue(ctx, id); err != nil {
		return err
	}
	nonBlocking(in.wake, id)
	return nil
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

// run takes job ids off the queue until ctx ends. A message is deleted only once its job has a
// checkpoint (running, with its active marker, or failed with the reason), so a leader dying
// mid-intake loses nothing: the message becomes visible again after QueueVisibility.
//
// A submitter announces the job's id on NATS once it is queued: intake then starts the job's
// reads at once, beside the queue receive that hands it the message, so their storage round
// trips overlap (see lookahead). The queue stays the only source of jobs: reads started for an
// announced id are used only for a queue message of that id, and nothing is written for one.
//
// The messages of one receive are taken in side by side (intakeBatch); a receive asks for no
// more messages than there are free places under MaxActiveJobs, so the limit holds exactly.
// The next receive starts once a batch's jobs are handed over: the batch's tails (active
// markers, message deletes) run on beside it, at most tailsMax batches of them.
func (in *intake) run(ctx context.Context) {
	ahead := map[string]*lookahead{}
	var tails sync.WaitGroup
	defer tails.Wait()
	slots := make(chan struct{}, tailsMax)
	for ctx.Err() == nil {
		// Wait for a free slot; it is taken below, once a receive has messages.
		select {
		case slots <- struct{}{}:
			<-slots
		case <-ctx.Done():
			return
		}
		free := in.cfg.MaxActiveJobs - in.tab.count()
		if free <= 0 {
			in.idle(ctx, ahead)
			continue
		}
		in.health.begin()
		msgs, err := in.queue.Receive(ctx, min(16, free), in.cfg.QueueVisibility)
		if err != nil {
			in.health.failed(err)
			if ctx.Err() == nil {
				in.log.Warn("receive from the job queue", "err", err)
			}
			in.idle(ctx, ahead)
			continue
		}
		in.health.ok()
		if len(msgs) == 0 {
			in.idle(ctx, ahead)
			continue
		}
		in.lastNs.Store(time.Now().UnixNano())
		stop := in.keepHidden(ctx, msgs)
		slots <- struct{}{}
		rest := in.intakeBatch(ctx, msgs, ahead)
		tails.Add(1)
		go func() {
			defer tails.Done()
			rest()
			stop()
			<-slots
		}()
	}
}

// tailsMax bounds the batches whose tails (markers, deletes) run beside intake.
const tailsMax = 2

// intakeBatch takes msgs in side by side: each goes through read, admit, plan and commit on a
// goroutine of its own, so their storage operations overlap; planned jobs reach the main loop in
// the queue's order. It returns once every message has handed over its job or given up; rest
// waits for what the messages still do (markers, deletes).
func (in *intake) intakeBatch(ctx context.Context, msgs []queue.Message, ahead map[string]*lookahead) (rest func()) {
	var wg sync.WaitGroup
	prev := make(chan struct{})
	close(prev)
	turns := make([]chan struct{}, 0, len(msgs))
	for _, m := range msgs {
		id, _, _ := strings.Cut(strings.TrimSpace(m.Text), "\n") // the id, before an inline spec
		la := ahead[id]
		delete(ahead, id)
		tn := &turn{prev: prev, mine: make(chan struct{})}
		prev = tn.mine
		turns = append(turns, tn.mine)
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer tn.done()
			in.intakeOne(ctx, m, la, tn)
		}()
	}
	for _, c := range turns {
		<-c // past its hand-over (or given up)
	}
	return wg.Wait
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

// idle waits for a submission, the queue poll interval or ctx. An announced id gets its reads
// started (at most lookaheadMax ids are held; reads older than lookaheadTTL are forgotten).
func (in *intake) idle(ctx context.Context, ahead map[string]*lookahead) {
	select {
	case <-ctx.Done():
	case id := <-in.wake:
		for k, la := range ahead {
			if time.Since(la.started) > lookaheadTTL {
				delete(ahead, k)
			}
		}
		if _, ok := ahead[id]; !ok && len(ahead) < lookaheadMax && protocol.CheckID(id) == nil {
			ahead[id] = in.readAhead(ctx, id, false)
		}
	case <-time.After(in.cfg.QueuePoll):
	}
}

const (
	markTimeout  = 10 * time.Second
	lookaheadMax = 16
	lookaheadTTL = 2 * time.Second
)

// lookahead is the reads intake makes of a job before it plans it, made at once: the spec, and
// (for a job not taken in light, smalljob.go) a cancel marker. Reads made a moment before the
// message arrives are as good as reads made after: the spec never changes, and a cancel marker
// written later is found when the job is claimed or by the periodic look (checkCancels).
// Whether the job was planned already (a leader died after its first checkpoint, before
// deleting the message) is not read: the first checkpoint's If-None-Match says so, one storage
// operation fewer on a new job's path. An announced job's read ahead is its spec only.
type lookahead struct {
	started   time.Time
	done      sync.WaitGroup
	cancelled bool
	cancelErr error
	data      []byte
	specErr   error
}

func (in *intake) readAhead(ctx context.Context, id string, cancel bool) *lookahead {
	la := &lookahead{started: time.Now()}
	la.done.Add(1)
	go func() {
		defer la.done.Done()
		la.data, _, la.specErr = in.store.Get(ctx, protocol.SpecBlob(id))
	}()
	if cancel {
		la.checkCancel(ctx, in.store, id)
	}
	return la
}

// checkCancel reads job id's cancel marker, beside the reads already started.
func (la *lookahead) checkCancel(ctx context.Context, st Store, id string) {
	la.done.Add(1)
	go func() {
		defer la.done.Done()
		la.cancelled, la.cancelErr = st.Exists(ctx, protocol.CancelBlob(id))
	}()
}

// intakeOne takes in queue message m (la: its reads, if started ahead, else nil) in four
// stages: read, admit, plan, commit. It reports whether it handed a job to the main loop.
//
// A message delivered for the first time since this term listened takes the light way
// (smalljob.go): no cancel-marker read, and an indexed job is handed over with nothing stored.
func (in *intake) intakeOne(ctx context.Context, m queue.Message, la *lookahead, tn *turn) bool {
	light := in.lightMessage(m)
	id, spec, ok := in.read(ctx, m, la, light)
	if !ok {
		return false
	}
	defer telemetry.Start(ctx, id, "intake", telemetry.Str("type", spec.Type)).End()
	impl, ok := in.admit(ctx, m, id, spec)
	if !ok {
		return false
	}
	start := time.Now()
	j, ok := in.planOne(ctx, m, id, spec, impl)
	if !ok {
		return false
	}
	if light && lightJob(spec, impl) {
		return in.commitLight(ctx, m, j, start, tn)
	}
	return in.commitPlanned(ctx, m, j, start, tn)
}

// read checks message m and reads its job's spec (unless the message carries it) and cancel
// marker (unless light). Malformed messages, messages tried too often and jobs without a spec are
// dead-lettered; a spec that does not parse is refused.
func (in *intake) read(ctx context.Context, m queue.Message, la *lookahead, light bool) (string, *protocol.Spec, bool) {
	id, inline, perr := protocol.ParseQueueText(m.Text)
	log := in.log.With("job", protocol.Clip(id, protocol.ClipLen)) // outside input: maybe huge
	if err := protocol.CheckID(id); err != nil {
		log.Error("malformed queue message; dead-lettered", "err", err)
		in.deadQueue(ctx, m, err.Error())
		return "", nil, false
	}
	if perr != nil {
		log.Warn("inline spec not used; reading the stored one", "err", perr)
	}
	if m.DequeueCount > in.cfg.MaxQueueDequeues {
		reason := fmt.Sprintf("job %s could not be planned in %d tries", id, m.DequeueCount-1)
		log.Error("giving up on a job message; dead-lettered", "dequeues", m.DequeueCount)
		in.writeFirst(ctx, id, "", jobs.StateFailed, reason, nil)
		in.deadQueue(ctx, m, reason)
		return "", nil, false
	}
	switch {
	case inline != nil && light:
		return id, inline, true // the spec in hand, and no marker to read
	case inline != nil:
		la = &lookahead{data: nil}
		la.checkCancel(ctx, in.store, id)
	case la == nil:
		la = in.readAhead(ctx, id, !light)
	case !light:
		la.checkCancel(ctx, in.store, id)
	}
	la.done.Wait()
	if inline != nil {
		return in.cancelledFirst(ctx, m, id, inline, la)
	}
	if errors.Is(la.specErr, store.ErrNotFound) {
		log.Error("queued job has no spec; dead-lettered")
		in.deadQueue(ctx, m, "no spec blob for job "+id)
		return "", nil, false
	}
	if la.specErr != nil {
		log.Warn("read spec", "err", la.specErr)
		return "", nil, false
	}
	spec, err := protocol.ParseSpec(la.data)
	if err != nil {
		in.refuse(ctx, m, id, "", err)
		return "", nil, false
	}
	return in.cancelledFirst(ctx, m, id, spec, la)
}

// cancelledFirst ends a job whose cancel marker la found before the job started; else it
// passes the job on.
func (in *intake) cancelledFirst(ctx context.Context, m queue.Message, id string, spec *protocol.Spec, la *lookahead) (string, *protocol.Spec, bool) {
	if la.cancelErr == nil && la.cancelled {
		_, err := in.writeFirst(ctx, id, spec.Type, jobs.StateCancelled, "cancelled by user before it started", nil)
		switch {
		case errors.Is(err, store.ErrExists):
			in.planned(ctx, m, id) // planned before the cancel: the claim reads the marker
		case err == nil:
			in.deleteMsg(ctx, m)
		}
		return "", nil, false
	}
	return id, spec, true
}

// admit decides whether the job runs now: not while it waits for other jobs (after.go) or for a
// leader with its type (waiting.go).
func (in *intake) admit(ctx context.Context, m queue.Message, id string, spec *protocol.Spec) (jobs.Job, bool) {
	if len(spec.After) > 0 && in.after(ctx, m, id, spec) {
		return nil, false
	}
	impl, err := in.cfg.Registry.Lookup(spec.Type)
	if err != nil {
		in.wait(ctx, m, id, spec.Type)
		return nil, false
	}
	return impl, true
}

// planOne splits the job. An indexed job stores nothing: its shards are made from the parameters
// as they are dispatched. Any other is split now and its plan stored in pages, before the first
// checkpoint (which says where the plan is), unless the job was planned already, whose pages
// must not be rewritten under it.
func (in *intake) planOne(ctx context.Context, m queue.Message, id string, spec *protocol.Spec, impl jobs.Job) (*job, bool) {
	if _, ok := impl.(jobs.Indexed); !ok {
		switch ok, err := in.store.Exists(ctx, protocol.CheckpointBlob(id)); {
		case err != nil:
			in.log.Warn("check for a checkpoint", "job", id, "err", err)
			return nil, false
		case ok:
			in.planned(ctx, m, id)
			return nil, false
		}
	}
	j, err := in.plans.plan(ctx, id, spec, impl)
	switch {
	case errors.Is(err, errPlanStorage):
		in.log.Warn("planning a job", "job", id, "err", err)
		return nil, false
	case err != nil:
		if ctx.Err() == nil {
			in.refuse(ctx, m, id, spec.Type, err)
		}
		return nil, false
	}
	return j, true
}

// commitPlanned stores the job's first checkpoint and hands the job to the main loop in its turn.
//
// The active marker (how the next leader finds the job) is stored before the first checkpoint. A
// storage rollback (the emulator's kill -9) keeps a prefix of the writes, so a checkpoint it keeps
// has its marker. The other order once left a running job that no leader resumed. A marker it keeps
// without the checkpoint sends the job back to the queue (claim). The queue message goes once both
// are stored, after the job is handed over.
func (in *intake) commitPlanned(ctx context.Context, m queue.Message, j *job, start time.Time, tn *turn) bool {
	id, spec := j.id, j.spec
	if err := in.mark(ctx, id); err != nil {
		in.log.Warn("planning a job", "job", id, "err", err)
		return false // the message comes back
	}
	etag, err := in.writeFirst(ctx, id, spec.Type, jobs.StateRunning, "", j)
	if err != nil {
		var ue *UserCodeError
		switch {
		case errors.Is(err, store.ErrExists):
			in.planned(ctx, m, id) // planned already (by a leader that died, or another one)
		case errors.As(err, &ue):
			in.refuse(ctx, m, id, spec.Type, err)
		}
		return false
	}
	// The delete finishes even if the term ends meanwhile (a graceful handover).
	mctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), markTimeout)
	defer func() {
		defer cancel()
		in.deleteMsg(mctx, m)
	}()
	j.etag, j.fresh = etag, true
	in.log.Info("job planned", "job", id, "type", spec.Type, "shards", j.cp.Total, "plan", j.cp.Plan, "took", time.Since(start).Round(time.Microsecond))
	in.emit(Event{Kind: EventJobPlanned, Epoch: in.fence.Epoch, Job: id, Count: j.cp.Total})
	if !tn.wait(ctx) {
		return false
	}
	defer tn.done()
	in.tab.handOver() // uncounted by adopt
	select {
	case in.handed <- j:
		return true
	case <-ctx.Done():
		in.tab.handBack()
		return false
	}
}

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
			cp.ShardsPerMsg = shardsPerMsg(cp.Total)
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
	m, unlock := in.latest(m) // the receipt of the last extension (visibility.go)
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

// shardsPerMsg decides how many consecutive shards travel in one message. Jobs of fewer than 4096
// shards get one each: their shards may be long, and one per message spreads them best. Others get
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
