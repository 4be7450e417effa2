package coordinator

import (
	"context"
	"errors"
	"time"

	"github.com/mapagg/mapagg/internal/bus"
	"github.com/mapagg/mapagg/internal/protocol"
	"github.com/mapagg/mapagg/jobs"
)

// dispatchEvent is a dispatcher's progress (upto) or failure, for the loop.
type dispatchEvent struct {
	job  string
	upto int
	err  error
}

// onDispatched records a dispatcher's progress in its job, or fails the job.
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
				if data, err = protocol.EncodeShards(src.kind, id, typ, epoch, k, shards[k-i:end-i]); err == nil {
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

// room is how many shards from i the dispatcher may publish now (whole messages of per shards, or
// up to total); 0 means wait. It is what the job's window (fair.go) leaves, once that is at least a
// quarter of the window, so a busy job publishes in a few larger rounds. With nothing outstanding
// one message always goes (a message may carry more than the window).
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
