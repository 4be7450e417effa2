package election

import (
	"context"
	"errors"
	"slices"
	"sync"
	"time"
)

// ErrNoResponders is what Prober.Probe returns when nothing subscribes to the term's subject:
// the transport itself says the leader process's connection is gone.
var ErrNoResponders = errors.New("no responders")

// Prober is the transport of the fast path for process crashes (package bus implements it over
// core NATS request/reply). A leader answers on a per-term address while its term lasts; a
// follower that misses beats asks it. Only "no responders" counts as evidence of death; an
// answer (even a forged one), a timeout or any other error counts as alive or unknown, so a
// forger can delay a takeover but never cause one.
type Prober interface {
	// Answer answers probes of term t until stop is called. It must have reached the transport
	// before it returns, so that a beat published afterwards is never heard before the answer
	// is in place.
	Answer(t Term) (stop func(), err error)
	// Probe asks the leader of epoch whether it is there. nil: something answered.
	// ErrNoResponders: nothing subscribes to the term's address. Anything else: unknown.
	Probe(ctx context.Context, epoch uint64) error
	// Session counts this process's (re)connections to the transport and the times it was found
	// cut off. A follower counts "no responders" only while it is unchanged since it last heard
	// the leader: after its own reconnect (a server restart) the leader may be reconnecting too,
	// without its subscriptions for a moment.
	Session() uint64
}

// Probe settings (see Config.Prober).
const (
	// probeEvery spaces the probes of one confirmation.
	probeEvery = 25 * time.Millisecond
	// defaultProbeTimeout bounds one probe; a live leader's transport answers in a round trip.
	defaultProbeTimeout = 250 * time.Millisecond
	// probeCount is the least number of probes, all "no responders", that confirm a death.
	probeCount = 3
)

// probeDue reports a suspicion of the current term, whose beats say it answers probes. It needs
// four things: the term has been silent for after, the follower is healthy, its transport session
// has not changed since the term's last beat, and no probe of this silence ran within after. The
// term's first successor (the watcher) probes it every watchEvery (> 0) without waiting for a
// silence, so that a crash is seen within a probe period, not after a missed beat. It marks the
// probe as run; first says it is the first silence probe (not a watch probe) of this silence.
func (w *watch) probeDue(now time.Time, healthy bool, session uint64, after, watchEvery time.Duration) (s suspicion, first, ok bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.heard || !healthy || w.beats == 0 || !w.answers || session != w.session {
		return suspicion{}, false, false
	}
	silent := now.Sub(w.lastBeat)
	need, every := w.probeAfterLocked(after), after
	if w.watcherLocked() && watchEvery > 0 {
		need, every = 0, min(after, watchEvery)
	}
	if silent < need || now.Sub(w.probed) < every {
		return suspicion{}, false, false
	}
	watching := silent < after
	// The watcher's watch probes of this silence do not make its first silence probe a repeat.
	first = !watching && !w.silenced.After(w.lastBeat)
	w.probed = now
	if !watching {
		w.silenced = now
	}
	return suspicion{epoch: w.epoch, leader: w.leader, silent: silent, beats: w.beats, watching: watching}, first, true
}

// probeAfterLocked is the silence after which this follower probes the term: after for the
// first successor, or for every follower when the term names none; later for the others, by
// their turn (TurnStep a place, the unnamed after every named one). After a crash the watcher
// (or the first successor) then probes alone and takes over; every other follower probing at
// once, up to 59 of them at 60 workers when the crash came just before a beat, loaded the machine
// and NATS in the middle of the takeover. The others act only in their turn anyway (waitTurn),
// so they lose nothing but the probes of a term already replaced.
func (w *watch) probeAfterLocked(after time.Duration) time.Duration {
	if len(w.next) == 0 {
		return after
	}
	if i := slices.Index(w.next, w.self); i >= 0 {
		return after + time.Duration(i)*TurnStep
	}
	return after + time.Duration(len(w.next))*TurnStep + w.quietLocked()
}

// watcherLocked reports whether this follower is the term's first successor.
func (w *watch) watcherLocked() bool { return len(w.next) > 0 && w.next[0] == w.self }

// confirmGone probes the term of s until probeCount answers in a row, spread over at
// least window, were all "no responders", while the follower stayed healthy on the same session
// and no beat of the term came. Any answer, error or change ends it unconfirmed.
func (e *Elector) confirmGone(ctx context.Context, s suspicion) bool {
	p, hb := e.cfg.Prober, e.cfg.Heartbeats
	session := p.Session()
	first := time.Now()
	for n := 1; ; n++ {
		pctx, cancel := context.WithTimeout(ctx, e.probeTimeoutFor(s))
		err := p.Probe(pctx, s.epoch)
		timedOut := err != nil && pctx.Err() != nil && ctx.Err() == nil
		cancel()
		e.probes.Add(1)
		if !s.watching && (err == nil || timedOut) {
			e.watch.probeOutcome(s, err == nil, time.Now()) // check: no probe again after a timeout
		}
		if !errors.Is(err, ErrNoResponders) || !hb.Healthy() || p.Session() != session || !e.watch.unchanged(s) {
			if err == nil && !s.watching {
				e.probeAnswers.Add(1)
			}
			return false
		}
		if n == 1 && s.watching && e.watch.announce(s) {
			e.log.Debug("the watched term has no responders; confirming", "suspected_epoch", s.epoch, "silent_for", time.Since(e.watch.lastBeatAt()).Round(time.Millisecond))
			e.emit(EventProbing, Term{Epoch: s.epoch, Identity: s.leader}, nil)
		}
		if n >= probeCount && time.Since(first) >= e.cfg.ProbeConfirm {
			return true
		}
		select {
		case <-ctx.Done():
			return false
		case <-time.After(probeEvery):
		}
	}
}

// probeTimeoutFor bounds one probe of s. The watcher's probes of a term that still beats wait at
// most WatchEvery: a probe that reached the leader's connection as it died is never answered,
// and a watcher waiting out the whole timeout for it saw the crash 250 ms late (3 kills in 16).
// A timeout proves nothing either way (only "no responders" is acted on), so cutting it short is
// safe; the next probe, a period later, gets the server's "no responders".
func (e *Elector) probeTimeoutFor(s suspicion) time.Duration {
	if s.watching && e.cfg.WatchEvery > 0 {
		return min(e.probeTimeout, max(e.cfg.WatchEvery, 10*time.Millisecond))
	}
	return e.probeTimeout
}

// prober runs the fast path's confirmation off the follower's wait loop, so that a probe that
// times out (a paused or cut-off leader keeps its subscription) never holds up the heartbeat
// timeout. At most one confirmation runs at a time.
type prober struct {
	mu      sync.Mutex
	cancel  context.CancelFunc // of the confirmation in flight; nil when none
	done    chan struct{}      // closed when it ends
	verdict chan suspicion     // buffered(1): a silent term confirmed gone
	ended   chan struct{}      // buffered(1): a confirmation ended; the wait loop plans its next check
}

// running reports whether a confirmation is in flight.
func (p *prober) running() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.cancel != nil
}

// startProbe confirms in a goroutine of its own whether the silent term of s is gone; a
// confirmed term is sent on e.prb.verdict. It does nothing while a confirmation is in flight.
// Every confirmation is announced (EventProbing, once a silence): a silence probe here, a watch
// probe when its first probe finds no responders (confirmGone).
func (e *Elector) startProbe(ctx context.Context, s suspicion, first bool) {
	p := &e.prb
	if first && !s.watching && !p.running() && e.watch.announce(s) {
		e.log.Debug("no heartbeat from the leader; probing its term", "suspected_epoch", s.epoch, "silent_for", s.silent.Round(time.Millisecond))
		e.emit(EventProbing, Term{Epoch: s.epoch, Identity: s.leader}, nil)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cancel != nil {
		return
	}
	pctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	p.cancel, p.done = cancel, done
	go func() {
		defer close(done)
		gone := e.confirmGone(pctx, s)
		p.mu.Lock()
		defer p.mu.Unlock()
		if gone && pctx.Err() == nil { // not stopped meanwhile
			select {
			case p.verdict <- s:
			default:
			}
		}
		if p.done == done {
			p.cancel, p.done = nil, nil
		}
		cancel()
		select {
		case p.ended <- struct{}{}:
		default:
		}
	}()
}

// stopProbe ends the confirmation in flight, waits for it, and drops a verdict not yet acted on
// (the caller has checked the lease, or is about to lead).
func (e *Elector) stopProbe() {
	p := &e.prb
	p.mu.Lock()
	cancel, done := p.cancel, p.done
	p.cancel, p.done = nil, nil
	p.mu.Unlock()
	if cancel != nil {
		cancel()
		<-done
	}
	select {
	case <-p.verdict:
	default:
	}
}

// confirmed acts on a term the probes found gone: in this follower's turn, the lease is
// checked and broken as for a suspicion (check), fenced on the stamp's ETag. It reports whether
// the caller should campaign now.
func (e *Elector) confirmed(ctx context.Context, s suspicion) bool {
	if !e.watch.unchanged(s) || !e.waitTurn(ctx, s) {
		return false
	}
	e.probeConfirmed.Add(1)
	e.log.Info("the leader's term has no responders; its process is gone", "suspected_epoch", s.epoch,
		"suspected_leader", s.leader, "silent_for", time.Since(e.watch.lastBeatAt()).Round(time.Millisecond))
	e.emit(EventNoResponders, Term{Epoch: s.epoch, Identity: s.leader}, nil)
	e.check(ctx, s, true)
	return true
}

// answering is a term's answer to probes. It lasts until the term is over (its lease released or
// lost), not just its leader context. A leader writing its final checkpoint after SIGTERM still
// answers, so the followers wait for its release (or the suspicion timeout) and do not break its
// lease under it.
type answering struct {
	mu    sync.Mutex
	stop  func()
	ended bool
}

// ensure (re)starts the answer until it works; it reports whether the term answers now.
func (a *answering) ensure(p Prober, t Term) bool {
	if p == nil {
		return true
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.ended {
		return false
	}
	if a.stop != nil {
		return true
	}
	s, err := p.Answer(t)
	if err != nil {
		return false
	}
	a.stop = s
	return true
}

// end stops answering for good.
func (a *answering) end() {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.ended = true
	if a.stop != nil {
		a.stop()
		a.stop = nil
	}
}
