package coordinator

import (
	"context"
	"errors"
	"time"

	"github.com/mapagg/mapagg/internal/protocol"
	"github.com/mapagg/mapagg/internal/queue"
	"github.com/mapagg/mapagg/jobs"
)

// Small jobs (docs/design.md, "A small job's requests"). A job taken in on its message's first
// delivery stores nothing while it runs: no active marker, no first checkpoint. Its queue
// message, kept hidden by this term, is its only record. Its first checkpoint write is either its
// final one (the job ended within one checkpoint interval), created If-None-Match, or, for a job
// that runs on, the write intake would have made, with the active marker before it. Once that
// write is stored the message is deleted. A leader that dies before it leaves nothing behind
// but the message, which comes back (QueueVisibility) with a dequeue count of 2 and is taken in
// the full way, planned again under the new term (its shards get new ids: FreshShardMsgID).
//
// Such a job (light) also skips the cancel-marker read when its message was queued after this
// term began to hear cancel hints (a hint for a job not yet held is kept, cancelHints), and its
// shards carry their sending time in their ids, so the first worker to run one skips the check
// of the job's end.

// lightSkew is the margin between the storage service's clock (a message's insertion time) and
// this term's: a message is taken for queued after the term listened only when its insertion
// time is this much later.
const lightSkew = 2 * time.Second

// lightMessage reports whether m may be taken in light: its first delivery, queued after this
// term listened for cancel hints, on a queue whose messages can be kept hidden.
func (in *intake) lightMessage(m queue.Message) bool {
	if _, ok := in.queue.(Extender); !ok {
		return false
	}
	return m.DequeueCount == 1 && !m.Inserted.IsZero() && !in.listening.IsZero() &&
		m.Inserted.After(in.listening.Add(lightSkew))
}

// lightJob reports whether a job runs light: an indexed aggregate job (its plan is a function of
// its parameters, so planning it again after a crash stores nothing).
func lightJob(spec *protocol.Spec, impl jobs.Job) bool {
	_, indexed := impl.(jobs.Indexed)
	return indexed && len(spec.After) == 0
}

// commitLight hands a planned light job to the main loop in its turn, writing nothing. Its
// message stays hidden, kept by the job, until the job's first checkpoint is stored.
func (in *intake) commitLight(ctx context.Context, m queue.Message, j *job, start time.Time, tn *turn) bool {
	id, spec := j.id, j.spec
	cp, err := in.firstCheckpoint(id, spec.Type, jobs.StateRunning, "", j)
	if err != nil {
		var ue *UserCodeError
		if errors.As(err, &ue) {
			in.refuse(ctx, m, id, spec.Type, err)
		}
		return false
	}
	cp.Done, cp.Aggregate = nil, nil
	j.cp, j.complete, j.fresh, j.unmarked = cp, cp.Total == 0, true, true
	j.light.Store(true)
	j.msg = m
	j.keep = in.holdAlone(ctx, m)
	in.log.Info("job planned", "job", id, "type", spec.Type, "shards", cp.Total, "plan", cp.Plan, "stored", false, "took", time.Since(start).Round(time.Microsecond))
	in.emit(Event{Kind: EventJobPlanned, Epoch: in.fence.Epoch, Job: id, Count: cp.Total})
	if !tn.wait(ctx) {
		j.keep()
		return false
	}
	defer tn.done()
	in.tab.handOver()
	select {
	case in.handed <- j:
		return true
	case <-ctx.Done():
		in.tab.handBack()
		j.keep()
		return false
	}
}

// holdAlone moves m out of its received batch and keeps it hidden on its own until the returned
// stop (or the term's end).
func (in *intake) holdAlone(ctx context.Context, m queue.Message) (stop func()) {
	m, unlock := in.hiding.latest(m)
	unlock()
	return in.keepHidden(ctx, []queue.Message{m})
}

// lightStored takes a light job's first stored checkpoint: the job is on record, so its message
// goes. A non-terminal one was written after the job's active marker (put).
func (t *term) lightStored(j *job, terminal bool) {
	j.light.Store(false)
	if !terminal {
		j.unmarked = false
	}
	m, keep := j.msg, j.keep
	j.keep = nil
	if keep == nil {
		return
	}
	t.cleanups.Add(1)
	go func() {
		defer t.cleanups.Done()
		ctx, cancel := context.WithTimeout(context.Background(), markTimeout)
		defer cancel()
		t.in.deleteMsg(ctx, m)
		keep()
	}()
}

// lightTaken drops a light job whose first checkpoint was refused because one exists: another
// message of the job was taken in first (a requeue, a second submit of one id). The job is then
// taken the full way: marked, its message deleted and the stored job claimed.
func (t *term) lightTaken(ctx context.Context, j *job) {
	t.log.Warn("a small job's checkpoint exists already; claiming it instead", "job", j.id)
	if j.stopDispatch != nil {
		j.stopDispatch()
	}
	t.ck.ack(j.w.acks) // merged into a plan that is given up: the claimed one has its own epoch
	j.w.acks = nil
	t.tab.drop(j)
	m, keep := j.msg, j.keep
	j.keep = nil
	t.cleanups.Add(1)
	go func() {
		defer t.cleanups.Done()
		t.in.planned(ctx, m, j.id)
		if keep != nil {
			keep()
		}
	}()
}

// releaseLight lets go of a light job this term does not keep (a job of its id is held already):
// its message comes back, taken in the full way.
func releaseLight(j *job) {
	if j.keep != nil {
		j.keep()
		j.keep = nil
	}
}
