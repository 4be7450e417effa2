package coordinator

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/mapagg/mapagg/internal/protocol"
	"github.com/mapagg/mapagg/internal/queue"
	"github.com/mapagg/mapagg/internal/telemetry"
	"github.com/mapagg/mapagg/jobs"
	"github.com/mapagg/mapagg/store"
)

// The intake's loop: receive a batch, then for each message read → admit → plan → commit, in
// the queue's order (intakeOne). Waiting jobs (waiting.go), jobs after others (after.go) and
// light jobs (smalljob.go) branch off it; what they share is in intake.go.

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
//
// A receive is a storage request, as each job's own writes are: a receive that got fewer
// messages than it asked for emptied the queue, so the next waits for a submit's hint or the
// poll (idle), and a hint for a job whose message was received already wakes nothing. Under a
// burst of submits, one receive then takes the messages of every hint that came while the last
// batch was taken in, instead of one receive a hint and an empty one after each batch.
func (in *intake) run(ctx context.Context) {
	ahead := map[string]*lookahead{}
	took := &recentIDs{}
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
			in.idle(ctx, ahead, took)
			continue
		}
		in.health.begin()
		want := min(16, free)
		msgs, err := in.queue.Receive(ctx, want, in.cfg.QueueVisibility)
		if err != nil {
			in.health.failed(err)
			if ctx.Err() == nil {
				in.log.Warn("receive from the job queue", "err", err)
			}
			in.idle(ctx, ahead, took)
			continue
		}
		in.health.ok()
		in.drained.Store(len(msgs) < want)
		if len(msgs) == 0 {
			in.idle(ctx, ahead, took)
			continue
		}
		in.lastNs.Store(time.Now().UnixNano())
		in.taken.Add(int64(len(msgs)))
		for _, m := range msgs {
			took.add(messageJob(m))
		}
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
		if len(msgs) < want {
			in.idle(ctx, ahead, took) // the queue was emptied: wait for the next submit
		}
	}
}

// messageJob is the job id a queue message names (before an inline spec).
func messageJob(m queue.Message) string {
	id, _, _ := strings.Cut(strings.TrimSpace(m.Text), "\n")
	return id
}

// recentIDs remembers the jobs of the last recentMax messages received, so that their hints,
// which may come after the receive that took them, wake nothing.
type recentIDs struct {
	ids  [recentMax]string
	next int
}

const recentMax = 64

func (r *recentIDs) add(id string) {
	r.ids[r.next] = id
	r.next = (r.next + 1) % recentMax
}

func (r *recentIDs) has(id string) bool {
	return id != "" && slices.Contains(r.ids[:], id)
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
		id := messageJob(m)
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

// idle waits for a submission, the queue poll interval or ctx. A hint for a job in took (its
// message was received already) is passed over. An announced id gets its reads started (at most
// lookaheadMax ids are held; reads older than lookaheadTTL are forgotten).
func (in *intake) idle(ctx context.Context, ahead map[string]*lookahead, took *recentIDs) {
	poll := time.NewTimer(in.cfg.QueuePoll)
	defer poll.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case h := <-in.wake:
			if took.has(h.id) {
				continue
			}
			if !h.readAhead {
				return
			}
			for k, la := range ahead {
				if time.Since(la.started) > lookaheadTTL {
					delete(ahead, k)
				}
			}
			if _, ok := ahead[h.id]; !ok && len(ahead) < lookaheadMax && protocol.CheckID(h.id) == nil {
				ahead[h.id] = in.readAhead(ctx, h.id, false)
			}
			return
		case <-poll.C:
			return
		}
	}
}

// lookaheadMax and lookaheadTTL bound the reads intake starts ahead of announced jobs (idle).
const (
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
