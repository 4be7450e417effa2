package coordinator

import (
	"iter"
	"maps"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mapagg/mapagg/jobs"
	"github.com/mapagg/mapagg/store"
)

// jobTable is the one record of which jobs a term holds: active, waiting for a type, finished,
// being cleaned up, queued again. Active and finished belong to the loop; the rest, and the
// count intake reads, are safe from any goroutine.
type jobTable struct {
	active   map[string]*job       // loop only
	finished map[string]jobs.State // loop only: jobs this term saw end (bounded)

	nActive atomic.Int32 // len(active), for intake
	handing atomic.Int32 // jobs intake hands to the loop, not adopted yet
	after   atomic.Bool  // a job waits after others (after.go): a job's end kicks a rescan

	mu       sync.Mutex
	waiting  map[string]bool      // for a type this process lacks (waiting.go)
	cleaning map[string]bool      // ended here: clean-up runs or the marker waits for the sweeper
	requeued map[string]time.Time // marked without a checkpoint: first seen; zero once queued again
}

// finishedMax bounds the finished set: past it, it starts over.
const finishedMax = 100_000

func newJobTable() *jobTable {
	return &jobTable{active: map[string]*job{}, finished: map[string]jobs.State{},
		waiting: map[string]bool{}, cleaning: map[string]bool{}, requeued: map[string]time.Time{}}
}

// get returns active job id, or nil.
func (tb *jobTable) get(id string) *job { return tb.active[id] }

// all yields the active jobs (deleting the one yielded is allowed).
func (tb *jobTable) all() iter.Seq[*job] { return maps.Values(tb.active) }

func (tb *jobTable) len() int { return len(tb.active) }

// add makes j active; false if a job of its id is active already. A job intake handed over
// (fresh) is uncounted from handing either way. One with a stored first checkpoint is refused if
// its id ended in this term: a duplicate queue message of it (a retried submit) had it claimed
// from that checkpoint and run to its end while intake waited for its turn to hand it over, so
// its plan is stale (adopting it would write over the terminal checkpoint and depose the term;
// its own message is deleted by intake). A light job (smalljob.go) stored nothing: its first
// write, created If-None-Match, finds the stored end instead.
func (tb *jobTable) add(j *job) bool {
	if j.fresh {
		defer tb.handing.Add(-1)
		if !j.light.Load() && tb.ended(j.id) {
			return false
		}
	}
	if _, ok := tb.active[j.id]; ok {
		return false
	}
	tb.active[j.id] = j
	tb.nActive.Store(int32(len(tb.active)))
	j.w.troubles = store.TransientFailures()
	return true
}

// finish removes j from the active jobs, records its end and marks it being cleaned up.
func (tb *jobTable) finish(j *job) {
	delete(tb.active, j.id)
	tb.nActive.Store(int32(len(tb.active)))
	if len(tb.finished) >= finishedMax {
		clear(tb.finished)
	}
	tb.finished[j.id] = j.cp.State
	tb.setCleaning(j.id, true)
}

// drop removes j from the active jobs without recording an end (a light job given up for the
// stored one of its id, smalljob.go).
func (tb *jobTable) drop(j *job) {
	if tb.active[j.id] == j {
		delete(tb.active, j.id)
		tb.nActive.Store(int32(len(tb.active)))
	}
}

// ended reports whether the term saw job id end.
func (tb *jobTable) ended(id string) bool {
	_, ok := tb.finished[id]
	return ok
}

// sawEnd records a job that ended before this term (a replayed result's).
func (tb *jobTable) sawEnd(id string, state jobs.State) {
	if len(tb.finished) >= finishedMax {
		clear(tb.finished)
	}
	tb.finished[id] = state
}

// count is how many jobs are active, counting those intake is handing to the loop. A job in
// between may count twice for a moment, never zero times.
func (tb *jobTable) count() int { return int(tb.nActive.Load() + tb.handing.Load()) }

// handOver counts a job intake is about to hand to the loop; handBack uncounts one it did not.
func (tb *jobTable) handOver() { tb.handing.Add(1) }
func (tb *jobTable) handBack() { tb.handing.Add(-1) }

func (tb *jobTable) setWaiting(id string, on bool) { tb.set(tb.waiting, id, on) }
func (tb *jobTable) isWaiting(id string) bool      { return tb.is(tb.waiting, id) }

func (tb *jobTable) setCleaning(id string, on bool) { tb.set(tb.cleaning, id, on) }
func (tb *jobTable) isCleaning(id string) bool      { return tb.is(tb.cleaning, id) }

// cleaned is the sweeper's news: the active markers of ids are deleted.
func (tb *jobTable) Cleaned(ids []string) {
	tb.mu.Lock()
	defer tb.mu.Unlock()
	for _, id := range ids {
		delete(tb.cleaning, id)
	}
}

func (tb *jobTable) set(m map[string]bool, id string, on bool) {
	tb.mu.Lock()
	defer tb.mu.Unlock()
	if on {
		m[id] = true
	} else {
		delete(m, id)
	}
}

func (tb *jobTable) is(m map[string]bool, id string) bool {
	tb.mu.Lock()
	defer tb.mu.Unlock()
	return m[id]
}

// requeueDue reports whether a marked job without a checkpoint, first seen so by this term at
// least wait ago, should be queued again now: once a term.
func (tb *jobTable) requeueDue(id string, now time.Time, wait time.Duration) bool {
	tb.mu.Lock()
	defer tb.mu.Unlock()
	first, ok := tb.requeued[id]
	if !ok {
		tb.requeued[id] = now
		return false
	}
	return !first.IsZero() && now.Sub(first) >= wait
}

// requeuedNow records that job id was queued again.
func (tb *jobTable) requeuedNow(id string) {
	tb.mu.Lock()
	defer tb.mu.Unlock()
	tb.requeued[id] = time.Time{}
}
