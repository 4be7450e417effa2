package coordinator

import (
	"context"
	"time"

	"github.com/RoaringBitmap/roaring/v2"

	"github.com/mapagg/mapagg/bus"
	"github.com/mapagg/mapagg/internal/protocol"
)

// Backup tasks (MapReduce's answer to stragglers): near a job's end, shards running much longer
// than their peers are dispatched once more, to whichever worker is free. Exactly-once merging
// is unchanged: the first result of a shard is merged, the other is a duplicate and dropped.
const (
	backupTailDivisor = 10   // the tail: at most a tenth of the shards left
	backupMaxShards   = 1024 // backed up at most, per job
	backupWaitFactor  = 4    // no result for this many mean shard times
	backupMinWait     = 200 * time.Millisecond
)

// backups dispatches backup copies of the shards left of every job in its tail whose results
// stopped coming: once per job and term.
func (t *term) backups(ctx context.Context) {
	now := time.Now()
	for _, j := range t.active {
		if j.backedUp || j.complete || j.cp.State.Terminal() || j.cp.Dispatched < j.cp.Total || j.meanMicros == 0 {
			continue
		}
		left := j.cp.Total - int(j.done.GetCardinality())
		if left <= 0 || left > max(1, j.cp.Total/backupTailDivisor) {
			continue
		}
		wait := max(time.Duration(backupWaitFactor*j.meanMicros)*time.Microsecond, backupMinWait)
		if now.Sub(j.lastMerge) < wait {
			continue
		}
		missing := roaring.Flip(j.done, 0, uint64(j.cp.Total))
		var idx []int
		for it := missing.Iterator(); it.HasNext() && len(idx) < backupMaxShards; {
			idx = append(idx, int(it.Next()))
		}
		j.backedUp = true
		t.log.Info("backup tasks: dispatching the shards left once more", "job", j.id, "shards", len(idx),
			"since_last_merge", now.Sub(j.lastMerge).Round(time.Millisecond), "mean_shard", (time.Duration(j.meanMicros) * time.Microsecond).Round(time.Microsecond))
		src, err := t.source(j)
		if err != nil {
			t.log.Warn("backup tasks: plan", "job", j.id, "err", err)
			continue
		}
		t.dispatchers.Add(1)
		go func(id, typ string, epoch uint64) {
			defer t.dispatchers.Done()
			t.dispatchBackups(ctx, id, typ, epoch, src, idx)
		}(j.id, j.spec.Type, j.cp.PlanEpoch)
	}
}

// dispatchBackups publishes the given shards (ascending) again, from src, each with its backup
// message id (so a re-dispatch of the backup adds nothing). A failure only loses the backups.
func (t *term) dispatchBackups(ctx context.Context, id, typ string, epoch uint64, src *planSource, idx []int) {
	subject := t.bus.ShardTypeSubject(typ, id)
	out := make([]bus.Outgoing, 0, len(idx))
	for _, i := range idx {
		shard, err := src.shard(ctx, i)
		if err != nil {
			t.log.Warn("backup tasks: plan", "job", id, "shard", i, "err", err)
			return
		}
		m := protocol.ShardMsg{Job: id, Type: typ, Index: i, Epoch: epoch, Shard: shard}
		b, err := m.Encode()
		if err != nil {
			return
		}
		out = append(out, bus.Outgoing{Subject: subject, MsgID: protocol.BackupShardMsgID(id, i), Data: b})
	}
	if err := t.bus.PublishAll(ctx, out); err != nil && ctx.Err() == nil {
		t.log.Warn("backup tasks: publish", "job", id, "err", err)
	}
}
