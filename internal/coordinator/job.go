package coordinator

import (
	"context"
	"sync/atomic"

	"github.com/RoaringBitmap/roaring/v2"

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
	// bk is the job's backup-task bookkeeping (backup.go).
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
