package coordinator

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/RoaringBitmap/roaring/v2"

	"github.com/mapagg/mapagg/internal/bus"
	"github.com/mapagg/mapagg/internal/protocol"
	"github.com/mapagg/mapagg/internal/queue"
	"github.com/mapagg/mapagg/jobs"
	"github.com/mapagg/mapagg/store"
)

// job is one running job's in-memory state, owned by the term's main loop.
type job struct {
	id   string
	spec *protocol.Spec
	impl jobs.Job
	// cp is the last checkpoint written (Done and Aggregate left nil: they live in done and run).
	cp   protocol.Checkpoint
	etag store.ETag
	// run runs the job by its kind (cp.Kind): merges its partials or commits its tasks.
	run      runner
	done     *roaring.Bitmap
	dirty    bool
	complete bool // every shard merged: the next checkpoint finalizes
	// fresh: this term planned the job (intake), not claimed it; refs: a result of it named a
	// large partial. A fresh job without refs has no partials to clean up.
	fresh, refs bool
	// w is the job's part of the checkpointer's state (checkpoint.go).
	w jobWrites
	// bk is the job's backup-task bookkeeping (straggler.go).
	bk backupState
	// light: nothing of the job is stored yet (smalljob.go); read by the dispatcher. unmarked:
	// no active marker was written for it. msg is its queue message, kept hidden by keep until
	// its first checkpoint is stored.
	light    atomic.Bool
	unmarked bool
	msg      queue.Message
	keep     func()
	// cancelled: claim found the job's cancel marker; adopt ends it.
	cancelled bool
	// rep is the job's self-repair bookkeeping (repair.go).
	rep repairState
	// stopDispatch cancels the job's dispatcher, if one runs.
	stopDispatch context.CancelFunc
	// merged mirrors done's cardinality for the dispatcher, which keeps at most DispatchWindow
	// shards dispatched and not merged; progress wakes it after merges.
	merged   atomic.Int64
	progress chan struct{}
	// window is the job's fair share of its type's dispatch budget: how many of its shards may
	// be dispatched and not merged (fair.go). Set by the loop, read by the dispatcher.
	window atomic.Int64
	fair   fairAccount
	// gate, when above 0, stops the dispatcher at shard gate-1: a keyed job's reduce tasks wait
	// for its map manifest (keyed.go). Set by the loop and the manifest's writer.
	gate atomic.Int64
}

// mergedOne tells the dispatcher one more shard is merged.
func (j *job) mergedOne() {
	j.merged.Add(1)
	j.wake()
}

// wake tells the dispatcher its window may have room.
func (j *job) wake() {
	select {
	case j.progress <- struct{}{}:
	default:
	}
}

// repairState is a job's self-repair bookkeeping, owned by the loop.
type repairState struct {
	seenDone  int    // shards merged at the last look
	idle      int    // consecutive looks that found nothing of the job in either stream
	rounds    int    // repair rounds since the last merge
	doneRound int    // shards merged when the last round was dispatched
	round     int    // repair rounds of the job in this term
	refused   string // why the job's last refused result was dead-lettered
}

// progressed records a merge seen by a look.
func (r *repairState) progressed(done int) {
	r.seenDone, r.idle = done, 0
	if done > r.doneRound {
		r.rounds = 0
	}
}

// fairAccount is a job's part of fair dispatch, owned by the loop (its window, read by the
// dispatcher, is job.window).
type fairAccount struct {
	counted int64 // merges already counted in the type's rate
}

// jobWrites is one job's part of the checkpointer's state, kept on the job.
type jobWrites struct {
	// acks are merged results waiting for the checkpoint that includes them.
	acks []*bus.Delivery
	// writing: a checkpoint of the job is being stored in the background.
	writing bool
	// nextDue is when the tick next checkpoints the job (it adapts to the checkpoint's cost).
	nextDue time.Time
	// meta is the status record stored with the last checkpoint (its ETag is the job's etag).
	meta map[string]string
	// lost: the job's state was lost with the storage; its next write creates its checkpoint
	// (the failed status), If-None-Match (lost.go).
	lost bool
	// troubles is store.TransientFailures when the job's stored state was last known whole: as
	// it joined the term, and before each checkpoint write that succeeded. A rollback of the
	// store can only have lost the job's writes if it changed since (lost.go).
	troubles uint64
}
