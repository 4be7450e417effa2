package coordinator

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/RoaringBitmap/roaring/v2"

	"github.com/mapagg/mapagg/internal/bus"
	"github.com/mapagg/mapagg/internal/protocol"
	"github.com/mapagg/mapagg/jobs"
)

// Self-repair (anti-entropy). Exactly-once merging rests on every dispatched shard being, at any
// moment, in one of four places. It is queued or held by a worker (the shards stream keeps a
// message until it is acknowledged), waiting as a result (the results stream likewise), merged (the
// done-bitmap), or about to be published by this term's dispatcher. A storage rollback (a
// checkpoint that goes back in time after its results were acknowledged), a lost JetStream write or
// a purge breaks that: a shard is then nowhere, and nothing would ever bring it back.
//
// So every RepairInterval the leader looks at each running job that has made no progress since the
// last look (reading the streams off its main loop). Suppose neither stream holds a message of the
// job, twice in a row with no merge in between (a result moving from one stream to the other
// between two reads cannot fool two checks). Then the shards dispatched and not merged are missing.
// They are dispatched once more, RepairMaxShards at most per round, with message ids of their own
// (RepairShardMsgID), so JetStream does not drop them as duplicates of the original dispatch.
// Merging stays exactly-once: a repaired shard whose original result shows up after all is a
// duplicate. After RepairRounds rounds without a merge, the job fails with a reason that names the
// shards.

// repair starts a look at every running job that made no progress since the last one (see
// above). The streams are read off the loop, one job after another, and the looks come back on
// t.looked (onLooked); one pass runs at a time.
func (t *term) repair(ctx context.Context) {
	if t.looking {
		return
	}
	var looks []repairLook
	for j := range t.tab.all() {
		if j.complete || j.cp.State.Terminal() || j.cp.Dispatched == 0 {
			continue
		}
		done := int(j.done.GetCardinality())
		if done != j.rep.seenDone {
			j.rep.progressed(done)
			continue
		}
		looks = append(looks, repairLook{id: j.id, done: done})
	}
	if len(looks) == 0 {
		return
	}
	t.looking = true
	t.dispatchers.Add(1)
	go func() {
		defer t.dispatchers.Done()
		for i := range looks {
			// Shards first, results second: a worker publishes a shard's result before it
			// acknowledges the shard, so a shard cannot slip between the two reads unseen.
			bctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			shards, results, err := t.bus.JobBacklog(bctx, looks[i].id)
			cancel()
			if err != nil {
				// NATS is unreachable or slow: stop this pass (the next one tries again).
				if ctx.Err() == nil {
					t.log.Warn("self-repair: cannot read the streams' state", "job", looks[i].id, "err", err)
				}
				looks = looks[:i]
				break
			}
			looks[i].backlog = shards + results
		}
		t.looked <- looks // buffered: the one pass in flight never blocks
	}()
}

// onLooked takes a pass's looks in the loop: a job that merged meanwhile made progress; one that
// neither stream held twice in a row with no merge in between has its missing shards dispatched
// again.
func (t *term) onLooked(ctx context.Context, looks []repairLook) {
	t.looking = false
	for _, l := range looks {
		j := t.tab.get(l.id)
		if j == nil || j.complete || j.cp.State.Terminal() {
			continue
		}
		done := int(j.done.GetCardinality())
		if done != l.done {
			j.rep.progressed(done)
			continue
		}
		if l.backlog > 0 {
			j.rep.idle = 0
			continue
		}
		if j.rep.idle++; j.rep.idle < 2 {
			continue
		}
		j.rep.idle = 0
		t.repairJob(ctx, j, done)
	}
}

// repairJob dispatches j's missing shards once more, or fails j after RepairRounds rounds.
func (t *term) repairJob(ctx context.Context, j *job, done int) {
	missing := roaring.Flip(j.done, 0, uint64(j.cp.Dispatched))
	if missing.IsEmpty() {
		return // the dispatcher is between batches
	}
	if j.rep.rounds >= t.cfg.RepairRounds {
		why := fmt.Sprintf("self-repair: %s never completed after %d re-dispatches without progress (not queued, running or waiting as results)",
			shardList(missing), j.rep.rounds)
		if j.rep.refused != "" {
			why += "; last refused result: " + j.rep.refused
		}
		t.log.Error("self-repair gave up; job failed", "job", j.id, "missing", missing.GetCardinality(), "rounds", j.rep.rounds)
		t.end(j, jobs.StateFailed, why)
		return
	}
	var idx []int
	for it := missing.Iterator(); it.HasNext() && len(idx) < t.cfg.RepairMaxShards; {
		idx = append(idx, int(it.Next()))
	}
	j.rep.rounds++
	j.rep.round++
	j.rep.doneRound = done
	t.log.Warn("self-repair: shards neither merged, queued, running nor waiting as results; dispatching them again",
		"job", j.id, "missing", missing.GetCardinality(), "dispatching", len(idx), "round", j.rep.round, "shards", shardList(missing))
	t.rep.emit(Event{Kind: EventRepaired, Epoch: t.fence.Epoch, Job: j.id, Count: len(idx)})
	per := max(j.cp.ShardsPerMsg, 1)
	src, err := t.plans.source(j)
	if err != nil {
		t.log.Warn("self-repair: plan", "job", j.id, "err", err)
		return
	}
	t.dispatchers.Add(1)
	// The round's id is a clock stamp, not the count: a later term (its count restarted)
	// must not reuse an id JetStream still remembers.
	go func(id, typ string, epoch uint64, round int) {
		defer t.dispatchers.Done()
		t.send.dispatchRepair(ctx, id, typ, epoch, round, per, src, idx)
	}(j.id, j.spec.Type, j.cp.PlanEpoch, int(time.Now().UnixMilli()))
}

// dispatchRepair publishes the given shards (ascending) of the job's plan once more, made or read
// through src: consecutive shards within one of the job's message blocks travel together, each
// message with its repair id. A failure only loses this round (the next look finds the shards
// still missing).
func (d *shardSender) dispatchRepair(ctx context.Context, id, typ string, epoch uint64, round, per int, src *planSource, idx []int) {
	subject := d.bus.ShardTypeSubject(typ, id)
	var out []bus.Outgoing
	for k := 0; k < len(idx); {
		first, end := idx[k], idx[k]+1
		k++
		for k < len(idx) && idx[k] == end && end%per != 0 {
			end++
			k++
		}
		shards, err := src.shardRange(ctx, first, end)
		if err != nil {
			d.log.Warn("self-repair: plan", "job", id, "shards", fmt.Sprintf("%d-%d", first, end-1), "err", err)
			return
		}
		b, err := protocol.EncodeShards(src.kind, id, typ, epoch, first, shards)
		if err != nil {
			d.log.Warn("self-repair: encode", "job", id, "err", err)
			return
		}
		out = append(out, bus.Outgoing{Subject: subject, MsgID: protocol.RepairShardMsgID(id, first, round), Data: b})
	}
	if err := d.bus.PublishAll(ctx, out); err != nil && ctx.Err() == nil {
		d.log.Warn("self-repair: publish", "job", id, "err", err)
	}
}

// shardList names a few shards of set, then how many more: "shards 3, 7, 9 and 120 more".
func shardList(set *roaring.Bitmap) string {
	const few = 8
	n := set.GetCardinality()
	var b strings.Builder
	if n == 1 {
		b.WriteString("shard ")
	} else {
		b.WriteString("shards ")
	}
	i := 0
	for it := set.Iterator(); it.HasNext() && i < few; i++ {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(strconv.FormatUint(uint64(it.Next()), 10))
	}
	if n > few {
		fmt.Fprintf(&b, " and %d more", n-few)
	}
	return b.String()
}

// refuseResult dead-letters one result that cannot be merged (its partial unreadable, its shard
// outside the plan) with the reason, and leaves the job running: the shard stays missing until
// its real result comes or self-repair runs it again. If the dead letter cannot be stored, the
// message is handed back to try again.
func (t *term) refuseResult(ctx context.Context, j *job, r *protocol.ResultMsg, reason string) mergeOutcome {
	reason = protocol.Clip(reason, 512)
	t.log.Error("result refused; dead-lettered", "job", j.id, "shard", r.Index, "worker", protocol.Clip(r.Worker, protocol.ClipLen), "reason", reason)
	data, err := protocol.EncodeResults([]*protocol.ResultMsg{r})
	if err != nil {
		data = nil
	}
	if err := t.bus.DeadLetter(ctx, "results", data, reason); err != nil {
		t.log.Warn("dead-letter a refused result; handing it back", "job", j.id, "err", err)
		return mergeRetry
	}
	j.rep.refused = reason
	t.rep.emit(Event{Kind: EventDeadLettered, Epoch: t.fence.Epoch, Job: j.id, Shard: r.Index, Err: errors.New(reason)})
	return mergeDropped
}
