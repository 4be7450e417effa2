package coordinator

import (
	"context"
	"fmt"
	"time"

	"github.com/mapagg/mapagg/internal/bus"
	"github.com/mapagg/mapagg/internal/protocol"
	"github.com/mapagg/mapagg/internal/telemetry"
	"github.com/mapagg/mapagg/jobs"
)

// onResult merges the results of one message (one result, or a batch of one job's), exactly once. A
// result is merged only if its shard is not in the done-bitmap and its epoch is the job's plan
// epoch. The message is acknowledged only after the checkpoint that includes every result it merged
// is written. A message that changes nothing is acknowledged at once; one with a result that cannot
// be merged yet (its large partial unreadable) is handed back whole, and the results of it already
// merged come back as duplicates, which are dropped.
func (t *term) onResult(ctx context.Context, d *bus.Delivery) error {
	rs, err := protocol.DecodeResults(d.Data())
	if err != nil {
		t.log.Error("malformed result; dead-lettered", "subject", d.Subject(), "err", err)
		t.rep.emit(Event{Kind: EventDeadLettered, Epoch: t.fence.Epoch, Err: err})
		if derr := t.bus.DeadLetter(ctx, "results", d.Data(), err.Error()); derr != nil {
			_ = d.Nak(time.Second)
			return nil
		}
		_ = d.Term(err.Error())
		return nil
	}
	id := rs[0].Job // a batch holds one job's results
	j := t.tab.get(id)
	if j == nil {
		if !t.tab.ended(id) && t.reader.Succeeded(ctx, id) {
			// A replay of a job that succeeded (after a NATS restart, or past the duplicate
			// window): one read, no claim and no clean-up writes.
			t.tab.sawEnd(id, jobs.StateSucceeded)
		}
		if !t.tab.ended(id) {
			if err := t.ensure(ctx, id); err != nil {
				return err
			}
		}
		if j = t.tab.get(id); j == nil {
			_ = d.Ack() // the job ended (or was never planned): nothing to merge into
			return nil
		}
	}
	defer telemetry.Start(ctx, id, "merge", telemetry.Int("results", len(rs)), telemetry.Int("epoch", int(t.fence.Epoch))).End()
	hold, retry := false, false
	for _, r := range rs {
		switch t.mergeOne(ctx, j, r) {
		case mergeKept:
			hold = true
		case mergeRetry:
			retry = true
		}
	}
	var held *bus.Delivery
	switch {
	case retry:
		_ = d.Nak(time.Second)
	case hold:
		held = d
	default:
		_ = d.Ack()
	}
	t.ck.merged(ctx, j, held)
	return nil
}

// mergeOne merges one result into j, or says why not.
func (t *term) mergeOne(ctx context.Context, j *job, r *protocol.ResultMsg) mergeOutcome {
	if r.Ref != "" {
		j.refs = true // clean-up lists the partials (finish.go)
	}
	switch {
	case r.Epoch != j.cp.PlanEpoch:
		t.log.Warn("result from another plan epoch dropped", "job", r.Job, "shard", r.Index, "epoch", r.Epoch, "plan_epoch", j.cp.PlanEpoch)
		return mergeDropped
	case r.Kind != 0 && r.Kind != j.cp.Kind: // zero: a result of an earlier release
		return t.refuseResult(ctx, j, r, fmt.Sprintf("result for shard %d of job %s: a result of a job of kind %s, the job is %s", r.Index, r.Job, r.Kind, j.cp.Kind))
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
	if out := j.run.accept(ctx, t, j, r, partial); out != mergeDone {
		return out
	}
	j.done.Add(uint32(r.Index))
	t.cfg.Metrics.ResultMerged()
	j.mergedOne()
	j.dirty = true
	j.bk.merged(j.done, r.Index, r.Micros, time.Now())
	if t.merged++; t.merged == 1 {
		t.log.Info("first result merged", "job", r.Job, "shard", r.Index, "since_elected", time.Since(t.elected).Round(time.Millisecond))
		t.rep.emit(Event{Kind: EventFirstMerge, Epoch: t.fence.Epoch, Job: r.Job, Shard: r.Index})
	}
	if int(j.done.GetCardinality()) == j.cp.Total && j.run.ready(ctx, t, j) {
		j.complete = true
	}
	return mergeKept
}
