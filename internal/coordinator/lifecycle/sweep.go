package lifecycle

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/mapagg/mapagg/internal/coordinator/core"
	"github.com/mapagg/mapagg/internal/protocol"
	"github.com/mapagg/mapagg/store"
)

// The active markers of the jobs a term ended are deleted by its Sweeper, in batches, when intake
// is quiet: not one by one on each job's clean-up.
//
// A marker only tells the next leader which jobs to resume, so its delete is never urgent, and a
// delete is the dearest request a tiny job makes. On Azure a batch of up to 256 deletes is one
// request instead of 256. The emulator's delete costs CPU in proportion to every blob it holds
// (8–17 ms each at 4,000–8,000 blobs, against 1–2 ms for a write; issue 24). So one delete a job
// took a third of its single-threaded blob process in a burst of tiny jobs. Deferred, the deletes
// run after the burst.
//
// A marker waiting here is the same to a next leader as one whose clean-up was cut short: its
// rescan claims the job, finds it ended and deletes the marker (cleanup). This term's rescan
// leaves it (the job table marks it being cleaned until the marker is gone).
type Sweeper struct {
	log   *slog.Logger
	quiet intakeClock
	tab   cleanedSet
	del   func(ctx context.Context, names []string) error
	// keep says a job's final checkpoint was lost in a rollback of the store (and writes its
	// marker again): Lifecycle.KeepIfRolledBack. nil: never.
	keep  func(ctx context.Context, id string, here Ended) bool
	mu    sync.Mutex
	items []sweepItem
	from  time.Time // when the oldest of items was added
}

// sweepItem is an ended job whose marker waits, with what its clean-up knew of its end.
type sweepItem struct {
	id   string
	here Ended
}

const (
	sweepEvery  = 250 * time.Millisecond // how often the Sweeper looks
	sweepQuiet  = 500 * time.Millisecond // intake received nothing for this long: sweep
	sweepMaxAge = 30 * time.Second       // sweep anyway once the oldest waited this long
	sweepMax    = 2048                   // or once this many wait (a rescan lists them all)
	sweepBatch  = 64                     // deletes a round; quiet is checked again between rounds
	sweepFlush  = time.Second            // what a term ending gives the rest (its release waits)
)

// batchDeleter is a core.Store that deletes many blobs a request (store.Container).
type batchDeleter interface {
	DeleteBatch(ctx context.Context, names []string) error
}

// intakeClock says when intake last received messages (intake).
type intakeClock interface {
	LastIntake() time.Time
}

// cleanedSet hears which ended jobs' markers are gone (jobTable).
type cleanedSet interface {
	Cleaned(ids []string)
}

// deleter deletes a blob (core.Store).
type deleter interface {
	Delete(ctx context.Context, name string) error
}

var (
	_ deleter = core.Store(nil)
)

// NewSweeper returns the sweeper of a term's ended jobs' markers. keep is the lifecycle's
// KeepIfRolledBack (nil: no job's checkpoint is ever taken for lost).
func NewSweeper(log *slog.Logger, st deleter, quiet intakeClock, tab cleanedSet, keep func(ctx context.Context, id string, here Ended) bool) *Sweeper {
	s := &Sweeper{log: log, quiet: quiet, tab: tab, keep: keep}
	if bd, ok := st.(batchDeleter); ok {
		s.del = bd.DeleteBatch
	} else {
		s.del = func(ctx context.Context, names []string) error {
			for _, n := range names {
				if err := st.Delete(ctx, n); err != nil {
					return err
				}
			}
			return nil
		}
	}
	return s
}

// Add queues the active marker of ended job id (it stays being cleaned until it is deleted).
// here is what its clean-up knew of its end: a marker whose job's final checkpoint the store
// lost meanwhile is kept (keep).
func (s *Sweeper) Add(id string, here Ended) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.items) == 0 {
		s.from = time.Now()
	}
	s.items = append(s.items, sweepItem{id, here})
}

// run sweeps until ctx ends.
func (s *Sweeper) Run(ctx context.Context) {
	tick := time.NewTicker(sweepEvery)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		for ctx.Err() == nil && s.due(time.Now()) {
			if !s.round(ctx, sweepBatch) {
				break // a storage error: the next look tries again
			}
		}
	}
}

// due reports whether markers wait and intake is quiet, or they have waited too long or too many.
func (s *Sweeper) due(now time.Time) bool {
	s.mu.Lock()
	n, from := len(s.items), s.from
	s.mu.Unlock()
	switch {
	case n == 0:
		return false
	case n >= sweepMax || now.Sub(from) >= sweepMaxAge:
		return true
	}
	return now.Sub(s.quiet.LastIntake()) >= sweepQuiet
}

// round deletes up to limit waiting markers; false when it could not (they wait on). A marker
// whose job's final checkpoint the store lost since the job ended (a rollback: keep) stays,
// checked before the delete and, when the store was in trouble during it, after.
func (s *Sweeper) round(ctx context.Context, limit int) bool {
	s.mu.Lock()
	n := min(len(s.items), limit)
	items := append([]sweepItem(nil), s.items[:n]...)
	s.mu.Unlock()
	if n == 0 {
		return true
	}
	keep := s.keep
	if keep == nil {
		keep = func(context.Context, string, Ended) bool { return false }
	}
	before := store.TransientFailures()
	ids := make([]string, 0, n)
	var names []string
	var deleted []sweepItem
	for _, it := range items {
		ids = append(ids, it.id)
		if keep(ctx, it.id, it.here) {
			continue
		}
		names = append(names, protocol.ActiveBlob(it.id))
		deleted = append(deleted, it)
	}
	if len(names) > 0 {
		if err := s.del(ctx, names); err != nil {
			if ctx.Err() == nil {
				s.log.Warn("delete active markers of ended jobs", "markers", len(names), "err", err)
			}
			return false
		}
	}
	if store.TransientFailures() != before {
		for _, it := range deleted {
			keep(ctx, it.id, it.here)
		}
	}
	s.mu.Lock()
	s.items = s.items[n:]
	s.from = time.Now() // the rest were added later; close enough for a bound
	s.mu.Unlock()
	s.tab.Cleaned(ids)
	return true
}

// flush deletes what waits, within sweepFlush, as the term ends: the lease is released after it,
// so a handover waits for it, and a term ended by a storage cut must not hang here. What is left
// the next leader deletes (its rescan finds the markers).
func (s *Sweeper) Flush(ctx context.Context) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), sweepFlush)
	defer cancel()
	for {
		s.mu.Lock()
		n := len(s.items)
		s.mu.Unlock()
		if n == 0 || !s.round(ctx, sweepMax) {
			return
		}
	}
}
