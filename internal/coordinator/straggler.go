package coordinator

import (
	"slices"
	"time"

	"github.com/RoaringBitmap/roaring/v2"
)

// Backup tasks (MapReduce's answer to stragglers, Spark's speculation): near a job's end, a shard
// that has been running much longer than its peers is dispatched once more, to whichever worker
// is free. Exactly-once merging is unchanged: the first result of a shard is merged, the other is
// a duplicate and dropped.
//
// The leader does not see a worker start a shard; it sees results. But workers pull a job's
// shards in the order they were dispatched (one consumer per type, first in first out), so when a
// shard's result is merged, every shard dispatched before it had been pulled. A shard still
// missing then is overtaken: from that moment it has been held by a worker at least as long as
// now − overtaken, on top of the later shard's own run time. A shard on a healthy worker is
// merged within about one shard time of being overtaken (it ran alongside, or waited in the
// worker's prefetch for a slot); one on a slow worker stays missing. The shards dispatched last
// have no later shard to overtake them: once no result has come for the wait, they count as
// overtaken at the last merge (every free worker would have taken them by then).
//
// The rule: once every shard of a job is dispatched and at most a quarter of them is left (Spark's
// speculation quantile), a shard overtaken more than the wait ago is dispatched again. The wait is
// backupFactor × the median run time of the job's recently merged shards (per message of
// ShardsPerMsg shards). It is at least backupMinWait (Spark's minTaskRuntime: scheduling noise must
// not look like a straggler). Once every shard of the job has been pulled (none is missing above
// the highest merged one), workers are going idle and a needless copy costs little: the floor is
// then backupDrainedMinWait. Each shard gets one backup per term, a job at most backupMaxShards. A
// backup dispatched before the job's queue drains waits at the end of it. So it runs when workers
// free up at the end, when it is needed, on whichever worker pulls it first. If the original was
// merged meanwhile, the copy only costs a worker that one shard. A keyed job's map phase is a job
// of its own here: while its gate holds the reduce tasks back, its shards are the map tasks.
const (
	backupTailDivisor    = 4                      // the tail: at most a quarter of the shards left
	backupMaxShards      = 1024                   // backed up at most, per job and term
	backupFactor         = 2                      // overtaken this many median shard times ago
	backupMinWait        = 100 * time.Millisecond // and at least this long ago (Spark's minTaskRuntime)
	backupDrainedMinWait = 20 * time.Millisecond  // or this, once every shard of the job was pulled
	backupSilenceMax     = 64                     // shards above the highest merged backed up by silence, at most
	backupSamples        = 64                     // run times the median is taken over
	backupCheckInterval  = 10 * time.Millisecond  // how often the loop looks for stragglers
	backupScanGap        = 64                     // gaps up to this are scanned shard by shard
	backupCompactMin     = 1024                   // late is compacted from this length on
	backupStall          = 3 * backupCheckInterval
)

// backupState is one job's backup bookkeeping in a term, owned by the loop.
type backupState struct {
	runs  [backupSamples]int64 // run times (µs) of the last merged shards, a ring
	nRuns int
	// hi is the highest shard index merged this term (valid when nRuns > 0); lastMerge when.
	hi        int
	lastMerge time.Time
	// late are the shards found missing when a later shard was merged, by index and so by time.
	// Merged ones are dropped at each look in the tail, and whenever late reaches compactAt, so
	// it holds about the shards in flight, not the job's.
	late      []overtaken
	compactAt int
	// backed are the shards backed up this term.
	backed *roaring.Bitmap
	// lastLook is when the loop last looked at the job; no look counts before quietUntil.
	lastLook, quietUntil time.Time
	// lastWait is the wait of the last look (for the log).
	lastWait time.Duration
}

type overtaken struct {
	index uint32
	at    time.Time
}

// merged records shard index, just merged into done after running micros µs.
func (b *backupState) merged(done *roaring.Bitmap, index int, micros int64, now time.Time) {
	first := b.nRuns == 0
	b.runs[b.nRuns%backupSamples] = max(micros, 0)
	b.nRuns++
	b.lastMerge = now
	if first {
		b.hi = -1
	}
	if index <= b.hi {
		return
	}
	from := uint64(b.hi + 1)
	b.hi = index
	if uint64(index)-from <= backupScanGap {
		for i := from; i < uint64(index); i++ {
			if !done.Contains(uint32(i)) {
				b.late = append(b.late, overtaken{index: uint32(i), at: now})
			}
		}
	} else {
		for it := missingIn(done, from, uint64(index)).Iterator(); it.HasNext(); {
			b.late = append(b.late, overtaken{index: it.Next(), at: now})
		}
	}
	if len(b.late) >= max(b.compactAt, backupCompactMin) {
		b.compact(done)
		b.compactAt = 2 * len(b.late)
	}
}

// missingIn returns the shards of [from, to) not in done. (roaring.Flip keeps done's shards
// outside the range.)
func missingIn(done *roaring.Bitmap, from, to uint64) *roaring.Bitmap {
	m := roaring.New()
	m.AddRange(from, to)
	m.AndNot(done)
	return m
}

// compact drops the merged shards from late.
func (b *backupState) compact(done *roaring.Bitmap) {
	keep := b.late[:0]
	for _, o := range b.late {
		if !done.Contains(o.index) {
			keep = append(keep, o)
		}
	}
	clear(b.late[len(keep):])
	b.late = keep
}

// median is the median run time of the last merged shards (0 before any).
func (b *backupState) median() time.Duration {
	n := min(b.nRuns, backupSamples)
	if n == 0 {
		return 0
	}
	var s [backupSamples]int64
	copy(s[:], b.runs[:n])
	slices.Sort(s[:n])
	return time.Duration(s[n/2]) * time.Microsecond
}

// wait is how long a shard must have been overtaken to be backed up; drained: every shard of the
// job has been pulled (workers are free, so a needless copy costs little).
func (b *backupState) wait(perMsg int, drained bool) time.Duration {
	floor := backupMinWait
	if drained {
		floor = backupDrainedMinWait
	}
	return max(time.Duration(backupFactor*max(perMsg, 1))*b.median(), floor)
}

// stragglers returns the shards of a job (done merged, total shards) to back up now, at most limit,
// and drops merged shards from late. It looks only when the loop has been looking every
// backupCheckInterval. After a stall of the loop (a synchronous storage call, the process short of
// CPU), results waiting to be merged would make shards look late, so it waits as long again.
func (b *backupState) stragglers(done *roaring.Bitmap, total, perMsg, limit int, now time.Time) []int {
	if gap := now.Sub(b.lastLook); !b.lastLook.IsZero() && gap > backupStall {
		b.quietUntil = now.Add(gap)
	}
	b.lastLook = now
	if b.nRuns == 0 || limit <= 0 || now.Before(b.quietUntil) {
		return nil
	}
	if b.backed == nil {
		b.backed = roaring.New()
	}
	// Every shard was pulled when none is missing above the highest merged one.
	var above uint64
	if b.hi+1 < total {
		above = uint64(total-b.hi-1) - done.CardinalityInRange(uint64(b.hi+1), uint64(total))
	}
	wait := b.wait(perMsg, above == 0)
	b.lastWait = wait
	b.compact(done)
	var idx []int
	for _, o := range b.late {
		if now.Sub(o.at) < wait || len(idx) == limit {
			break // the rest were overtaken later still
		}
		if int(o.index) < total && !b.backed.Contains(o.index) { // (a keyed job's reduce tasks wait)
			idx = append(idx, int(o.index))
		}
	}
	// The shards above the highest merged one: overtaken by nothing, so by silence. Only a few:
	// many are mostly still queued, and silence cannot tell them from a stalled system.
	if len(idx) < limit && above > 0 && above <= backupSilenceMax && now.Sub(b.lastMerge) >= wait {
		for it := missingIn(done, uint64(b.hi+1), uint64(total)).Iterator(); it.HasNext() && len(idx) < limit; {
			if i := it.Next(); !b.backed.Contains(i) {
				idx = append(idx, int(i))
			}
		}
	}
	slices.Sort(idx)
	for _, i := range idx {
		b.backed.Add(uint32(i))
	}
	return idx
}

func u32s(xs []int) []uint32 {
	out := make([]uint32, len(xs))
	for i, x := range xs {
		out[i] = uint32(x)
	}
	return out
}
