package coordinator

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/mapagg/mapagg/internal/protocol"
	"github.com/mapagg/mapagg/internal/queue"
	"github.com/mapagg/mapagg/jobs"
	"github.com/mapagg/mapagg/store"
)

// Mixed versions. A job whose type this leader lacks (a rolling upgrade: the job was validated by a
// worker of the new build) does not fail. Its first checkpoint is stored as waiting, with a reason
// that names the workers that have the type; its active marker is stored too. Every leader's rescan
// claims it; one that has the type plans it then (under its own epoch) and runs it. A leader
// without it leaves it as it is, and looks at it again only in its next term (a process's types do
// not change), or when it is cancelled.
//
// A running job such a leader claims is paused the same way: stored as waiting, its plan,
// progress and aggregate kept. A leader with the type resumes it where it was. Results that
// reach the leader without the type meanwhile are dropped; self-repair dispatches their shards
// again once the job runs.

// wait stores job id (of type typ, which this leader lacks) as waiting and takes its message off
// the queue.
func (in *intake) wait(ctx context.Context, m queue.Message, id, typ string) {
	reason := in.waitReason(typ)
	if err := in.mark(ctx, id); err != nil { // first: see commitPlanned
		in.log.Warn("waiting job", "job", id, "err", err)
		return
	}
	_, err := in.writeFirst(ctx, id, typ, jobs.StateWaiting, reason, nil)
	switch {
	case errors.Is(err, store.ErrExists):
		in.planned(ctx, m, id) // planned by a leader that has the type
		return
	case err != nil:
		return // the message comes back
	}
	in.tab.setWaiting(id, true)
	in.log.Info("job waits for a leader with its type", "job", id, "type", typ, "reason", reason)
	in.emit(Event{Kind: EventJobWaiting, Epoch: in.fence.Epoch, Job: id, Err: errors.New(reason)})
	in.deleteMsg(ctx, m)
}

// waitReason says why a job of type typ waits, and which live workers have the type.
func (in *intake) waitReason(typ string) string {
	var holders []string
	if in.cfg.TypeHolders != nil {
		holders = in.cfg.TypeHolders(typ)
	}
	return fmt.Sprintf("no leader with type %s; workers with it: %s", typ, joinOrNone(holders))
}

func joinOrNone(s []string) string {
	if len(s) == 0 {
		return "none"
	}
	return strings.Join(s, ", ")
}

// startWaiting runs the waiting job of checkpoint cp (read with etag) if this leader has its
// type: it plans it and stores it as running, planned by this term. It returns nil (and no
// error) for a job that goes on waiting or ended here (cancelled, or refused by its own code),
// and core.ErrRetryClaim when the checkpoint changed meanwhile.
func (in *intake) startWaiting(ctx context.Context, cp *protocol.Checkpoint, etag store.ETag) (*job, error) {
	id := cp.Job
	if ok, err := in.store.Exists(ctx, protocol.CancelBlob(id)); err != nil {
		return nil, err
	} else if ok {
		return nil, in.endStored(ctx, cp, etag, jobs.StateCancelled, "cancelled by user while waiting")
	}
	data, _, err := in.store.Get(ctx, protocol.SpecBlob(id))
	if err != nil {
		return nil, fmt.Errorf("read spec: %w", err)
	}
	spec, err := protocol.ParseSpec(data)
	if err != nil {
		return nil, in.endStored(ctx, cp, etag, jobs.StateFailed, err.Error())
	}
	if wait, err := in.stillAfter(ctx, cp, etag, spec); wait || err != nil {
		return nil, err // waits for other jobs (after.go)
	}
	impl, err := in.cfg.Registry.Lookup(spec.Type)
	if err != nil {
		in.tab.setWaiting(id, true)
		if reason := in.waitReason(spec.Type); reason != cp.Error {
			next := *cp
			next.Error = reason
			if _, err := in.putStored(ctx, &next, etag); err != nil {
				return nil, err
			}
		}
		return nil, nil
	}
	j, err := in.plans.plan(ctx, id, spec, impl)
	switch {
	case errors.Is(err, errPlanStorage):
		return nil, err
	case err != nil:
		in.codeFailed(id, err)
		return nil, in.endStored(ctx, cp, etag, jobs.StateFailed, err.Error())
	}
	// The job's first running checkpoint: planned by this term, over the waiting one.
	next, err := in.firstCheckpoint(id, spec.Type, jobs.StateRunning, "", j)
	if err != nil {
		in.codeFailed(id, err)
		return nil, in.endStored(ctx, cp, etag, jobs.StateFailed, err.Error())
	}
	next.StartedAt, next.Seq = cp.StartedAt, cp.Seq
	if j.etag, err = in.putStored(ctx, &next, etag); err != nil {
		return nil, err
	}
	next.Done, next.Aggregate = nil, nil
	j.cp = next
	j.complete = next.Total == 0
	in.log.Info("waiting job planned", "job", id, "type", spec.Type, "shards", next.Total, "plan", next.Plan)
	in.emit(Event{Kind: EventJobPlanned, Epoch: in.fence.Epoch, Job: id, Count: next.Total})
	return j, nil
}

// pause stores the planned job of checkpoint cp (read with etag), whose type this leader lacks,
// as waiting: everything else of it is kept for a leader that has the type.
func (in *intake) pause(ctx context.Context, cp *protocol.Checkpoint, etag store.ETag) error {
	if ok, err := in.store.Exists(ctx, protocol.CancelBlob(cp.Job)); err != nil {
		return err
	} else if ok {
		return in.endStored(ctx, cp, etag, jobs.StateCancelled, "cancelled by user while waiting")
	}
	reason := in.waitReason(cp.Type)
	if cp.State != jobs.StateWaiting || cp.Error != reason {
		next := *cp
		next.State, next.Error = jobs.StateWaiting, reason
		if _, err := in.putStored(ctx, &next, etag); err != nil {
			return err
		}
	}
	in.tab.setWaiting(cp.Job, true)
	in.log.Info("running job paused: this leader lacks its type", "job", cp.Job, "type", cp.Type, "reason", reason)
	in.emit(Event{Kind: EventJobWaiting, Epoch: in.fence.Epoch, Job: cp.Job, Err: errors.New(reason)})
	return nil
}
