package coordinator

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/RoaringBitmap/roaring/v2"

	"github.com/mapagg/mapagg/internal/bus"
	"github.com/mapagg/mapagg/internal/protocol"
)

// Publishing backup copies: when a job is in its tail, the term asks the job's backupState
// (straggler.go) which shards are stragglers and publishes each once more.

// backups dispatches backup copies of the stragglers of every job in its tail (straggler.go).
func (t *term) backups(ctx context.Context) {
	now := time.Now()
	for j := range t.tab.all() {
		total := backupTotal(j)
		if j.complete || j.cp.State.Terminal() || j.cp.Dispatched < total {
			continue
		}
		b := &j.bk
		left := total - int(j.done.CardinalityInRange(0, uint64(total)))
		if left <= 0 || left > max(1, total/backupTailDivisor) {
			continue
		}
		limit := backupMaxShards
		if b.backed != nil {
			limit -= int(b.backed.GetCardinality())
		}
		idx := b.stragglers(j.done, total, j.cp.ShardsPerMsg, limit, now)
		if len(idx) == 0 {
			continue
		}
		src, err := t.plans.source(j)
		var ue *UserCodeError
		if errors.As(err, &ue) {
			t.fail(j, fmt.Errorf("backup tasks: %w", err))
			continue
		}
		if err != nil {
			t.log.Warn("backup tasks: plan", "job", j.id, "err", err)
			continue
		}
		t.log.Info("backup tasks: dispatching stragglers once more", "job", j.id, "shards", shardList(roaring.BitmapOf(u32s(idx)...)),
			"left", left, "wait", b.lastWait.Round(time.Millisecond), "median_shard", b.median().Round(time.Microsecond))
		t.rep.emit(Event{Kind: EventBackup, Epoch: t.fence.Epoch, Job: j.id, Shard: idx[0], Count: len(idx)})
		t.dispatchers.Add(1)
		go func(id, typ string, epoch uint64) {
			defer t.dispatchers.Done()
			t.send.dispatchBackups(ctx, id, typ, epoch, src, idx)
		}(j.id, j.spec.Type, j.cp.PlanEpoch)
	}
}

// backupTotal is the shards of j that can be dispatched now: a keyed job's map tasks while its
// gate holds the reduce tasks back (its map phase has a tail too), else all of them.
func backupTotal(j *job) int {
	if g := int(j.gate.Load()) - 1; g >= 0 {
		return min(g, j.cp.Total)
	}
	return j.cp.Total
}

// dispatchBackups publishes the given shards (ascending) again, from src, one message each with a
// backup message id of this term. So JetStream drops neither it as a duplicate of the original nor
// a later term's backup as a duplicate of this one. A failure only loses the backups.
func (d *shardSender) dispatchBackups(ctx context.Context, id, typ string, epoch uint64, src *planSource, idx []int) {
	subject := d.bus.ShardTypeSubject(typ, id)
	out := make([]bus.Outgoing, 0, len(idx))
	for _, i := range idx {
		shard, err := src.shard(ctx, i)
		if err != nil {
			d.log.Warn("backup tasks: plan", "job", id, "shard", i, "err", err)
			return
		}
		m := protocol.ShardMsg{Kind: src.kind, Job: id, Type: typ, Index: i, Epoch: epoch, Shard: shard}
		b, err := m.Encode()
		if err != nil {
			return
		}
		out = append(out, bus.Outgoing{Subject: subject, MsgID: protocol.BackupShardMsgID(id, i, d.termID), Data: b})
	}
	if err := d.bus.PublishAll(ctx, out); err != nil && ctx.Err() == nil {
		d.log.Warn("backup tasks: publish", "job", id, "err", err)
	}
}
