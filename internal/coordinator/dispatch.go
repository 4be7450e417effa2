package coordinator

import (
	"context"
	"errors"
	"log/slog"
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

// shardSender is the component that publishes a term's shards: a job's dispatcher, and the
// rounds of self-repair and backup tasks. It reads a job's window but changes nothing of it;
// progress and failures go to the loop (progress).
type shardSender struct {
	log      *slog.Logger
	bus      shardPublisher
	batch    int    // Config.DispatchBatch
	termID   string // the term's id: backup tasks' message ids
	progress chan<- dispatchEvent
}

// shardPublisher publishes shards (Bus).
type shardPublisher interface {
	PublishAll(ctx context.Context, msgs []bus.Outgoing) error
	ShardTypeSubject(typ, job string) string
}

var _ shardPublisher = Bus(nil)

// dispatch publishes shards [from, Total) in batches, reporting progress to the loop, and keeps
// at most DispatchWindow of them dispatched and not merged. Shards come from src as they are
// needed, so the dispatcher holds its batch and at most one plan page. A publish (or a plan page
// read) that fails is retried until ctx ends: the shards stream or storage may be briefly
// unavailable; a plan that cannot be read (a corrupt page) fails the job.
func (d *shardSender) dispatch(ctx context.Context, j *job, src *planSource, from int) {
	id, typ, epoch, total := j.id, j.spec.Type, j.cp.PlanEpoch, j.cp.Total
	subject := d.bus.ShardTypeSubject(typ, id)
	per := max(j.cp.ShardsPerMsg, 1)
	for i := from; i < total; {
		n := d.room(j, i, total, per)
		for ; n == 0; n = d.room(j, i, total, per) {
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
					msgID := protocol.ShardMsgID(id, k)
					if j.light.Load() { // nothing stored yet: a later plan must not be its duplicate (smalljob.go)
						msgID = protocol.FreshShardMsgID(id, k, d.termID, time.Now())
					}
					batch = append(batch, bus.Outgoing{Subject: subject, MsgID: msgID, Data: data})
				}
				k = end
			}
			if err != nil {
				d.report(ctx, dispatchEvent{job: id, err: err})
				return
			}
			err = d.bus.PublishAll(ctx, batch)
		} else if _, ok := err.(*UserCodeError); ok || errors.Is(err, jobs.ErrBadCheckpoint) {
			d.report(ctx, dispatchEvent{job: id, err: err})
			return
		}
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			d.log.Warn("dispatch batch failed; retrying", "job", id, "from", i, "err", err)
			select {
			case <-ctx.Done():
				return
			case <-time.After(500 * time.Millisecond):
			}
			continue
		}
		i += n
		d.report(ctx, dispatchEvent{job: id, upto: i})
	}
}

// room is how many shards from i the dispatcher may publish now (whole messages of per shards, or
// up to total); 0 means wait. It is what the job's window (fair.go) leaves, once that is at least a
// quarter of the window, so a busy job publishes in a few larger rounds. With nothing outstanding
// one message always goes (a message may carry more than the window).
func (d *shardSender) room(j *job, i, total, per int) int {
	if g := int(j.gate.Load()) - 1; g >= 0 { // a keyed job's reduce tasks wait (keyed.go)
		if i >= g {
			return 0
		}
		total = min(total, g)
	}
	n := min(max(d.batch/per, 1)*per, total-i)
	m := int(j.merged.Load())
	window := int(j.window.Load())
	free := window - max(i-m, 0)
	if i > m && free < min(n, max(window/4, per)) {
		return 0
	}
	return min(n, max(free/per*per, per))
}

func (d *shardSender) report(ctx context.Context, ev dispatchEvent) {
	select {
	case d.progress <- ev:
	case <-ctx.Done():
	}
}
