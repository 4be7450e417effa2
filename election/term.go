package election

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"
)

// releaseTimeout bounds the best-effort release at the end of a term, and the wait for a renew
// call that ignores its context.
const releaseTimeout = 5 * time.Second

// RenewStall is how long a renewal may be in flight or failing before the leader pauses its
// heartbeats. A leader cut off from storage then falls silent, and a follower that reaches
// storage breaks its lease after SuspicionTimeout (fenced), instead of waiting for the safety
// deadline. A storage blip shorter than RenewStall + SuspicionTimeout deposes nobody, and
// during an outage of storage itself no follower can break anything.
const RenewStall = 500 * time.Millisecond

// MaxRenewStall bounds the stall a leader allows its renewals when they have been slow: it waits
// twice its slowest renewal of the last stallMemory (at least RenewStall) before it pauses its
// beats. Storage that takes a second a request under load (an emulator saving its metadata, a
// throttled account) answers every member as slowly: pausing then only hands the same storage to
// another leader, and each hand-over costs the jobs' progress. A leader cut off from storage under
// load is then replaced up to MaxRenewStall - RenewStall later.
const MaxRenewStall = 3 * time.Second

// stallMemory is how long a slow renewal keeps raising the stall (MaxRenewStall).
const stallMemory = time.Minute

// guard owns the leader context of one term and the safety deadline. The deadline timer is
// independent of the renew goroutine: a renew call that hangs cannot keep the term alive.
type guard struct {
	e       *Elector
	term    Term
	leaseID string
	epoch   uint64
	window  time.Duration // LeaseDuration - SafetyMargin
	cancel  context.CancelCauseFunc
	lostCh  chan struct{} // closed when renewing must stop

	confirming atomic.Bool // a heartbeat of a newer epoch is being checked against the blob

	mu       sync.Mutex
	deadline time.Time // monotonic
	timer    *time.Timer
	trouble  time.Time     // when the renewal in flight or failing now was first sent; zero after a success
	slow     time.Duration // the slowest successful renewal since slowAt (stallAfter)
	slowAt   time.Time
	ended    bool  // the leader context was cancelled
	reason   error // why it was cancelled
	lost     error // why the lease is lost or unsafe to hold; nil while renewing may go on
}

// start marks the process leader and arms the deadline at sent+window.
func (g *guard) start(sent time.Time) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.e.leading.Store(true)
	g.deadline = sent.Add(g.window)
	g.timer = time.AfterFunc(time.Until(g.deadline), g.expire)
}

// extend moves the deadline to sent+window after a renewal sent at sent succeeded. It reports
// false when the term was already lost (too late: the deadline fired first).
func (g *guard) extend(sent time.Time) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.lost != nil {
		return false
	}
	g.deadline = sent.Add(g.window)
	g.timer.Reset(time.Until(g.deadline))
	g.trouble = time.Time{}
	now := time.Now()
	if took := now.Sub(sent); took >= g.slow || now.Sub(g.slowAt) > stallMemory {
		g.slow, g.slowAt = took, now
	}
	return true
}

// tryFor is how long a renewal sent at now may take: one renew period (short), or four times
// the slowest renewal of the last stallMemory, up to most. A slow success still extends the term
// from when it was sent; cut short, a renewal that storage under load answers in 1.5 s never
// succeeds. Only successes count: a renewal swallowed by a dead connection is retried after one
// period, as before.
func (g *guard) tryFor(now time.Time, short, most time.Duration) time.Duration {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.slowAt.IsZero() || now.Sub(g.slowAt) > stallMemory {
		return short
	}
	return max(short, min(4*g.slow, most))
}

// stallAfterLocked is how long a renewal may be in flight or failing before the term counts as
// stalled: RenewStall, or twice the slowest renewal of the last stallMemory, up to MaxRenewStall.
func (g *guard) stallAfterLocked(now time.Time) time.Duration {
	if g.slowAt.IsZero() || now.Sub(g.slowAt) > stallMemory {
		return RenewStall
	}
	return min(max(RenewStall, 2*g.slow), MaxRenewStall)
}

// renewing notes a renewal sent at sent; the first of a run without success starts the stall.
func (g *guard) renewing(sent time.Time) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.trouble.IsZero() {
		g.trouble = sent
	}
}

// stalled reports whether no renewal has succeeded for RenewStall (more after slow renewals:
// stallAfterLocked) since one was sent: the leader may be cut off from storage.
func (g *guard) stalled(now time.Time) (time.Duration, bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	d := now.Sub(g.trouble)
	return d, !g.trouble.IsZero() && d >= g.stallAfterLocked(now)
}

func (g *guard) remaining() time.Duration {
	g.mu.Lock()
	defer g.mu.Unlock()
	return time.Until(g.deadline)
}

func (g *guard) expire() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.lost != nil || time.Now().Before(g.deadline) {
		return // already over, or extended while this call waited for the lock
	}
	g.loseLocked(fmt.Errorf("%w: %w: no renewal succeeded within %v of the last one sent",
		ErrLeadershipLost, ErrRenewDeadline, g.window))
}

// lose ends the term for good: renewing stops and the leader context is cancelled.
func (g *guard) lose(cause error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.loseLocked(cause)
}

func (g *guard) loseLocked(cause error) {
	if g.lost != nil {
		return
	}
	g.lost = cause
	close(g.lostCh)
	g.endLocked(cause)
}

// end cancels the leader context; renewing goes on until the term is over (graceful stop keeps
// the lease while lead finishes).
func (g *guard) end(cause error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.endLocked(cause)
}

func (g *guard) endLocked(cause error) {
	if g.ended {
		return
	}
	g.ended = true
	g.reason = cause
	g.e.leading.Store(false)
	g.cancel(cause)
}

// finish stops the timer and returns why the leader context ended and why the lease was lost
// (nil when it was not).
func (g *guard) finish() (reason, lost error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.timer.Stop()
	return g.reason, g.lost
}

// runTerm leads one term: it calls lead with the leader context, renews the lease until lead
// returns, then releases the lease unless it is known lost.
func (e *Elector) runTerm(ctx context.Context, t Term, sent time.Time, lead func(context.Context) error) {
	log := e.log.With("epoch", t.Epoch)
	base := context.WithoutCancel(ctx) // keeps ctx's values; the term owns cancellation
	leaderCtx, cancelLeader := context.WithCancelCause(context.WithValue(base, termKey{}, t))
	defer cancelLeader(ErrSteppedDown)

	g := &guard{e: e, term: t, leaseID: t.LeaseID, epoch: t.Epoch, window: e.cfg.LeaseDuration - e.cfg.SafetyMargin, cancel: cancelLeader, lostCh: make(chan struct{})}
	e.drainPoke()
	e.terms.Add(1)
	g.start(sent)
	log.Info("elected", "since", t.Since.UTC(), "deadline_in", g.remaining().Round(time.Millisecond))
	e.emit(EventElected, t, nil)
	e.cur.Store(g)
	ans := &answering{}
	defer ans.end() // after the release below: the term answers probes until it is over
	beatsDone := make(chan struct{})
	go func() {
		defer close(beatsDone)
		if e.cfg.Heartbeats != nil {
			e.beat(leaderCtx, t, g, ans, log)
		}
	}()

	stopOnCtx := context.AfterFunc(ctx, func() { g.end(fmt.Errorf("%w: shutting down", ErrSteppedDown)) })
	renewCtx, stopRenew := context.WithCancel(base)
	renewDone := make(chan struct{})
	go func() {
		defer close(renewDone)
		e.renewLoop(renewCtx, g, sent, log)
	}()

	leadErr := e.callLead(leaderCtx, lead, log)
	g.end(fmt.Errorf("%w: lead returned", ErrSteppedDown))
	stopOnCtx()
	stopRenew()
	select {
	case <-renewDone:
	case <-time.After(releaseTimeout):
		log.Warn("a renew call ignores its context; leaving it behind")
	}
	reason, lost := g.finish()
	e.cur.Store(nil)
	select { // the leader context has ended, so the beats have stopped, unless Publish hangs
	case <-beatsDone:
	case <-time.After(releaseTimeout):
		log.Warn("a heartbeat publish ignores its context; leaving it behind")
	}
	e.watch.restart(time.Now(), t.Epoch, t.Identity)

	switch {
	case lost != nil:
		e.losses.Add(1)
		log.Info("leadership lost", "reason", lost)
		e.emit(EventLost, t, lost)
	case leadErr != nil && leaderCtx.Err() == nil:
		log.Warn("lead returned; stepping down", "err", leadErr)
		e.emit(EventSteppedDown, t, leadErr)
	default:
		log.Info("stepping down", "reason", reason)
		if errors.Is(reason, ErrLeadershipLost) {
			e.emit(EventLost, t, reason)
		} else {
			e.emit(EventSteppedDown, t, reason)
		}
	}
	if lost != nil && IsDefinitive(lost) {
		return // the service said the lease is not ours: nothing to release
	}
	if lost == nil {
		e.markReleased(ctx, t, log)
	}
	e.release(ctx, t, log)
}

// callLead runs lead, turning a panic into an error.
func (e *Elector) callLead(ctx context.Context, lead func(context.Context) error, log *slog.Logger) (err error) {
	done := make(chan struct{})
	defer close(done)
	// Complain when lead outlives its context: Run cannot campaign again until it returns.
	context.AfterFunc(ctx, func() {
		t := time.NewTimer(e.cfg.LeaseDuration)
		defer t.Stop()
		select {
		case <-done:
		case <-t.C:
			log.Warn("lead has not returned although its context ended", "after", e.cfg.LeaseDuration)
		}
	})
	defer func() {
		if r := recover(); r != nil {
			log.Error("lead panicked; ending the term", "panic", r, "stack", string(debug.Stack()))
			err = fmt.Errorf("lead panicked: %v", r)
		}
	}()
	return lead(ctx)
}

// renewLoop renews every RenewInterval after the last successful renewal was sent, retrying
// transient failures with a short backoff until the deadline, and ends the term at once when
// the lease is definitively lost or Healthy fails.
func (e *Elector) renewLoop(ctx context.Context, g *guard, lastSent time.Time, log *slog.Logger) {
	timer := time.NewTimer(time.Until(lastSent.Add(e.cfg.RenewInterval)))
	defer timer.Stop()
	backoff := time.Duration(0)
	for {
		select {
		case <-ctx.Done():
			return
		case <-g.lostCh:
			return
		case <-timer.C:
		}
		if h := e.cfg.Healthy; h != nil {
			if err := h(); err != nil {
				g.lose(fmt.Errorf("%w: %w: %w", ErrLeadershipLost, ErrUnhealthy, err))
				return
			}
		}
		left := g.remaining()
		if left <= 0 {
			return // the deadline timer ends the term
		}
		sent := time.Now()
		g.renewing(sent)
		cctx, cancel := context.WithTimeout(ctx, min(g.tryFor(sent, e.opTimeout(), e.cfg.LeaseDuration/4), left))
		err := e.api.RenewLease(cctx, e.cfg.Container, e.cfg.Blob, g.leaseID)
		cancel()
		if err == nil {
			if !g.extend(sent) {
				return
			}
			e.renewals.Add(1)
			backoff = 0
			log.Debug("renewed", "took", time.Since(sent).Round(time.Millisecond))
			timer.Reset(time.Until(sent.Add(e.cfg.RenewInterval)))
			continue
		}
		if ctx.Err() != nil {
			return // the term is over; the failure is ours
		}
		e.renewFailures.Add(1)
		if errors.Is(err, ErrNotFound) && e.rebuildLease(ctx, g, err, log) {
			backoff = 0
			timer.Reset(e.cfg.RenewInterval)
			continue
		}
		if IsDefinitive(err) {
			g.lose(fmt.Errorf("%w: %w", ErrLeadershipLost, err))
			return
		}
		// A short, steady retry: once storage answers again the next renewal goes at once, and
		// beats resume within a follower's aliveWait (heartbeat.go).
		backoff = 250 * time.Millisecond
		log.Warn("renew failed; retrying", "err", err, "retry_in", backoff,
			"deadline_in", g.remaining().Round(time.Millisecond))
		timer.Reset(backoff)
	}
}

// rebuildLease keeps the term when its lease blob (or container) vanished under it: the storage
// account was wiped, or the blob deleted. It creates the blob again, acquires its lease with the
// term's lease ID and stamps the term's own epoch, all before the safety deadline; then the term
// goes on. Nobody else can have led meanwhile: a newer term would hold the lease (acquire
// refused) or have stamped a newer epoch (checked). The epoch never goes back: the stamp is this
// term's, and every later term's is above it (and above every epoch heard, RaiseEpochFloor). It
// reports whether the term was kept.
func (e *Elector) rebuildLease(ctx context.Context, g *guard, cause error, log *slog.Logger) bool {
	left := g.remaining()
	if left <= 0 {
		return false
	}
	cctx, cancel := context.WithTimeout(ctx, min(e.opTimeout(), left))
	defer cancel()
	fail := func(step string, err error) bool {
		log.Warn("the lease blob is missing and the term cannot hold a new one", "step", step, "err", err, "missing", cause)
		return false
	}
	if err := e.api.EnsureBlob(cctx, e.cfg.Container, e.cfg.Blob); err != nil {
		return fail("create", err)
	}
	sent := time.Now()
	if err := e.api.AcquireLease(cctx, e.cfg.Container, e.cfg.Blob, g.leaseID, e.cfg.LeaseDuration); err != nil {
		return fail("acquire", err)
	}
	p, err := e.api.GetProperties(cctx, e.cfg.Container, e.cfg.Blob)
	if err != nil {
		return fail("read", err)
	}
	if epoch, perr := parseEpoch(p.Metadata); perr != nil || epoch > g.epoch {
		e.releaseQuietly(ctx, g.leaseID)
		return fail("check", fmt.Errorf("the new blob records epoch %d (%v), above this term's %d", epoch, perr, g.epoch))
	}
	md := termMetadata(g.term)
	for k, v := range e.cfg.Stamp {
		md[k] = v
	}
	if err := e.api.SetMetadata(cctx, e.cfg.Container, e.cfg.Blob, g.leaseID, md); err != nil {
		return fail("stamp", err)
	}
	if !g.extend(sent) {
		return false
	}
	e.leaseRebuilds.Add(1)
	log.Warn("the lease blob was missing (storage lost or deleted); created it again and kept the term", "missing", cause)
	e.emit(EventLeaseRebuilt, g.term, cause)
	return true
}

// release gives the lease back (best effort, a few seconds at most, even while ctx is
// cancelled) and calls OnRelease when it worked.
func (e *Elector) release(ctx context.Context, t Term, log *slog.Logger) {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), releaseTimeout)
	defer cancel()
	if err := e.api.ReleaseLease(rctx, e.cfg.Container, e.cfg.Blob, t.LeaseID); err != nil {
		log.Warn("release failed; the lease will expire by itself", "err", err)
		return
	}
	e.releases.Add(1)
	log.Info("released")
	e.emit(EventReleased, t, nil)
	if e.cfg.OnRelease == nil {
		return
	}
	defer func() {
		if r := recover(); r != nil {
			log.Error("OnRelease panicked", "panic", r, "stack", string(debug.Stack()))
		}
	}()
	e.cfg.OnRelease(t)
}

// markReleased stamps the term released before its lease is: a follower that finds a held lease
// under a released stamp knows the holder is a successor that has not stamped yet, and does not
// break it. Best effort; the next term's stamp removes the mark.
func (e *Elector) markReleased(ctx context.Context, t Term, log *slog.Logger) {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), e.opTimeout())
	defer cancel()
	md := termMetadata(t)
	for k, v := range e.cfg.Stamp {
		md[k] = v
	}
	md[MetaReleased] = "true"
	if err := e.api.SetMetadata(rctx, e.cfg.Container, e.cfg.Blob, t.LeaseID, md); err != nil {
		log.Warn("cannot mark the term released; a late follower may break its successor's lease (fenced)", "err", err)
	}
}

// releaseQuietly releases leaseID when it may hold the lease; refusals are expected.
func (e *Elector) releaseQuietly(ctx context.Context, leaseID string) {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), releaseTimeout)
	defer cancel()
	if err := e.api.ReleaseLease(rctx, e.cfg.Container, e.cfg.Blob, leaseID); err == nil {
		e.releases.Add(1)
		e.log.Info("released a lease won by an unfinished acquisition")
	}
}
