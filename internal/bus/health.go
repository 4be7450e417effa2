package bus

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// ErrCutOff: the connection reports connected, but round trips to the server do not come back
// (a silent partition).
var ErrCutOff = errors.New("cut off from nats")

// Health tells whether this process can reach the NATS server now, from its own round trips.
// The client's status alone is not enough: behind a silent partition (no FIN, packets dropped)
// it stays "connected" until its own ping notices, minutes later. A prober flushes (PING/PONG)
// every ProbeInterval with a timeout of CutOffAfter; the process is cut off when no round trip
// sent within the last CutOffAfter came back.
//
// A heartbeat heard counts as a round trip that came back (Heard): the server delivered it. A
// follower hears the leader's four beats a second, so its prober skips its probes while they
// arrive: it looks again when the last proof is half CutOffAfter old and flushes then if no newer
// proof came; each beat moves that look to half the window after it, so while the beats arrive
// the prober sleeps. When the beats stop, its health rests on its own round trips long before it
// may suspect the leader. Cut-off detection is unchanged: it is the age of the last proof,
// whichever kind. Idle, this spares each follower four round trips and as many wake-ups a
// second.
type Health struct {
	b *Bus

	once   sync.Once
	cancel context.CancelFunc
	done   chan struct{}

	timer   atomic.Pointer[time.Timer] // the prober's next look, while it runs; Heard moves it
	lastOK  atomic.Int64               // monotonic ns since start of the last round trip that came back
	start   time.Time                  // monotonic base of lastOK
	cuts    atomic.Uint64              // times the process was found cut off
	looks   atomic.Uint64              // times the prober woke (tests)
	wasCut  atomic.Bool
	probeMu sync.Mutex
	lastErr error
}

// Health returns the bus's health monitor, starting its prober on first use. Close stops it.
func (b *Bus) Health() *Health {
	b.health.once.Do(func() {
		h := &b.health
		h.b, h.start, h.done = b, time.Now(), make(chan struct{})
		h.lastOK.Store(-1)
		h.wasCut.Store(true) // not healthy yet is not a cut
		ctx, cancel := context.WithCancel(context.Background())
		h.cancel = cancel
		go h.run(ctx)
	})
	return &b.health
}

func (h *Health) stop() {
	if h.cancel != nil {
		h.cancel()
		<-h.done
	}
}

func (h *Health) run(ctx context.Context) {
	defer close(h.done)
	every, within := h.b.cfg.ProbeInterval, h.b.cfg.CutOffAfter
	t := time.NewTimer(every)
	defer t.Stop()
	h.timer.Store(t)
	defer h.timer.Store(nil)
	for {
		h.looks.Add(1)
		sent := time.Now()
		next := every
		if last := h.lastOK.Load(); last < 0 || sent.Sub(h.start)-time.Duration(last) >= every {
			err := h.b.nc.FlushTimeout(within)
			if err == nil {
				h.proved(sent)
			}
			h.probeMu.Lock()
			h.lastErr = err
			h.probeMu.Unlock()
		} else {
			// A fresh proof (a beat heard): look again when it is half the cut-off window old.
			// Probes resume then if the beats stopped, well within the window.
			next = max(every, time.Duration(last)+within/2-sent.Sub(h.start))
		}
		h.Err() // counts a transition
		t.Reset(next)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// proved records that the server answered something sent, or delivered something, at at.
func (h *Health) proved(at time.Time) {
	v := int64(at.Sub(h.start))
	for {
		old := h.lastOK.Load()
		if v <= old || h.lastOK.CompareAndSwap(old, v) {
			return
		}
	}
}

// Heard records a message the server delivered now (a heartbeat): proof that the connection
// works, as good as a probe's round trip.
func (h *Health) Heard() {
	if h.b != nil {
		h.proved(time.Now())
		if t := h.timer.Load(); t != nil {
			t.Reset(max(h.b.cfg.ProbeInterval, h.b.cfg.CutOffAfter/2))
		}
	}
}

// mark counts a transition to cut off.
func (h *Health) mark(err error) error {
	if err != nil && !h.wasCut.Swap(true) {
		h.cuts.Add(1)
	} else if err == nil {
		h.wasCut.Store(false)
	}
	return err
}

// Healthy reports whether the connection is up and a round trip sent within CutOffAfter came
// back.
func (h *Health) Healthy() bool { return h.Err() == nil }

// Err is nil while healthy, else what is wrong, for /readyz and logs.
func (h *Health) Err() error { return h.mark(h.check()) }

func (h *Health) check() error {
	nc := h.b.nc
	if !nc.IsConnected() {
		return fmt.Errorf("%w (status %v)", ErrNotConnected, nc.Status())
	}
	last := h.lastOK.Load()
	if last < 0 {
		return fmt.Errorf("%w: no round trip to the server yet", ErrCutOff)
	}
	if age := time.Since(h.start) - time.Duration(last); age > h.b.cfg.CutOffAfter {
		h.probeMu.Lock()
		err := h.lastErr
		h.probeMu.Unlock()
		if err == nil {
			err = fmt.Errorf("probe pending")
		}
		return fmt.Errorf("%w: no round trip to the server came back for %v (last probe: %v); the client still reports connected", ErrCutOff, age.Round(time.Millisecond), err)
	}
	return nil
}

// Cuts is how many times the process was found cut off (or disconnected).
func (h *Health) Cuts() uint64 { return h.cuts.Load() }
