package lifecycle

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/mapagg/mapagg/internal/coordinator/core"
	"github.com/mapagg/mapagg/internal/protocol"
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
	mu    sync.Mutex
	ids   []string
	from  time.Time // when the oldest of ids was added
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

func NewSweeper(log *slog.Logger, st deleter, quiet intakeClock, tab cleanedSet) *Sweeper {
	s := &Sweeper{log: log, quiet: quiet, tab: tab}
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

// add queues the active marker of ended job id (it stays being cleaned until it is deleted).
func (s *Sweeper) Add(id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.ids) == 0 {
		s.from = time.Now()
	}
	s.ids = append(s.ids, id)
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
	n, from := len(s.ids), s.from
	s.mu.Unlock()
	switch {
	case n == 0:
		return false
	case n >= sweepMax || now.Sub(from) >= sweepMaxAge:
		return true
	}
	return now.Sub(s.quiet.LastIntake()) >= sweepQuiet
}

// round deletes up to limit waiting markers; false when it could not (they wait on).
func (s *Sweeper) round(ctx context.Context, limit int) bool {
	s.mu.Lock()
	n := min(len(s.ids), limit)
	ids := append([]string(nil), s.ids[:n]...)
	s.mu.Unlock()
	if n == 0 {
		return true
	}
	names := make([]string, n)
	for i, id := range ids {
		names[i] = protocol.ActiveBlob(id)
	}
	if err := s.del(ctx, names); err != nil {
		if ctx.Err() == nil {
			s.log.Warn("delete active markers of ended jobs", "markers", n, "err", err)
		}
		return false
	}
	s.mu.Lock()
	s.ids = s.ids[n:]
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
		n := len(s.ids)
		s.mu.Unlock()
		if n == 0 || !s.round(ctx, sweepMax) {
			return
		}
	}
}
