package election

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"slices"
	"sync"
	"time"
)

// Beat is one heartbeat of a leader: "epoch Epoch, led by Identity, was alive at Sent".
type Beat struct {
	Epoch    uint64
	Identity string
	Seq      uint64    // 1, 2, … within the term
	Sent     time.Time // wall clock of the sender; for lateness figures only, never for decisions
	// Answers says the term answers probes (Config.Prober): only then may a follower take "no
	// responders" for the process gone (a leader of an older version never answers).
	Answers bool
	// Successors are the followers, in order, that act first when the term falls silent or is
	// released (Config.Successors, at most MaxSuccessors). The others wait their turn.
	Successors []string
}

// MaxSuccessors bounds Beat.Successors.
const MaxSuccessors = 3

// TurnStep is how long each follower waits after the one named before it before it breaks a
// silent term's lease or acquires a released one. It covers a break, an acquire, a stamp and the
// new term's first beat, so that one follower, not all, reaches the lease blob.
const TurnStep = 250 * time.Millisecond

// Heartbeats is the transport of leader heartbeats (package bus implements it over core NATS).
// Delivery is best effort: a lost or late beat can only make a follower suspect a live leader,
// and the lease break that may follow is fenced (see the package documentation).
type Heartbeats interface {
	// Publish sends b to every subscriber. It must not block past ctx.
	Publish(ctx context.Context, b Beat) error
	// Subscribe calls fn with every beat published by any process (this one included) until
	// stop is called. fn must return quickly.
	Subscribe(fn func(Beat)) (stop func(), err error)
	// Healthy reports whether this process is connected to the transport now. A follower that
	// is not never suspects anyone: it cannot tell a dead leader from its own cut-off link.
	Healthy() bool
}

// SuccessorHeartbeats is a Heartbeats transport that can also reach only the followers that
// asked for it (package bus implements it with a second subject). With it, a leader whose beats
// name successors sends every other beat to them alone: the successors, which detect and take
// over a silent term first, hear every beat, and every other follower hears half of them. The
// others allow one interval more of silence (watch.quiet), which their turn, after the named
// ones, already gives them. The first beat of a term and every beat whose successors changed go
// to every follower, so each learns at once whether it is named.
type SuccessorHeartbeats interface {
	Heartbeats
	// PublishSuccessors sends b to the processes subscribed with SubscribeSuccessors only.
	PublishSuccessors(ctx context.Context, b Beat) error
	// SubscribeSuccessors calls fn with every beat sent with PublishSuccessors until stop is
	// called. fn must return quickly.
	SubscribeSuccessors(fn func(Beat)) (stop func(), err error)
}

// quietFor is the silence a follower not named as a successor allows beyond the named ones':
// one heartbeat interval when the leader sends it only every other beat (SuccessorHeartbeats).
func quietFor(cfg Config) time.Duration {
	if _, ok := cfg.Heartbeats.(SuccessorHeartbeats); ok {
		return cfg.HeartbeatInterval
	}
	return 0
}

// watch is a follower's view of the current term's heartbeats.
type watch struct {
	self  string
	quiet time.Duration // extra silence allowed while this follower is not named (quietFor)

	mu     sync.Mutex
	heard  bool      // some other process's beat arrived since Run started
	seeded bool      // the term was read from the lease blob at start, no beat of it heard yet (coldStart)
	epoch  uint64    // the newest epoch heard of (by beat or from the blob)
	leader string    // its identity
	last   time.Time // last beat of epoch, or when the silence clock was restarted (monotonic)
	beats  uint64    // beats of epoch accepted, so a check can tell whether one came meanwhile
	seq    uint64    // highest Seq of epoch heard: a replayed beat does not refresh the term

	lastBeat time.Time // last beat of epoch (monotonic); the silence the probe path measures
	session  uint64    // Prober.Session when that beat arrived
	probed   time.Time // when the probe path last ran
	silenced time.Time // when it last ran on a silence (not a watch probe): first of a silence
	told     time.Time // lastBeat of the silence EventProbing was emitted for (announce)
	answers  bool      // the last beat said the term answers probes
	// timedOut and answered: when a silence probe (not a watch probe) of epoch last ran out its
	// whole timeout, and was last answered. Both before lastBeat: not of this silence.
	timedOut, answered time.Time
	next               []string  // the last beat's successors
	poked              time.Time // when a release was announced (monotonic)
}

// alive reports whether the watched term beat within timeout and since the last release
// announcement: a follower then leaves the lease blob alone.
func (w *watch) alive(now time.Time, timeout time.Duration) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.heard && w.beats > 0 && now.Sub(w.lastBeat) < timeout+w.quietLocked() && w.lastBeat.After(w.poked)
}

// quietLocked is the extra silence this follower allows the term: watch.quiet while the term
// names successors and not this follower (it hears every other beat), else 0.
func (w *watch) quietLocked() time.Duration {
	if w.quiet > 0 && len(w.next) > 0 && !slices.Contains(w.next, w.self) {
		return w.quiet
	}
	return 0
}

// named reports whether the last beat heard named this follower a successor.
func (w *watch) named() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Contains(w.next, w.self)
}

// untilDue is how long until the next check of the watched term is due. That is when it has been
// silent for timeout, or (probe > 0) for probe since its last beat (plus this follower's turn,
// probeAfterLocked), or (watchEvery > 0, this
// follower the watcher) the next watch probe. It is negative when overdue, large when nothing is
// watched.
func (w *watch) untilDue(now time.Time, timeout, probe, watchEvery time.Duration) time.Duration {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.heard {
		return time.Hour
	}
	d := w.last.Add(timeout + w.quietLocked()).Sub(now)
	if probe > 0 && w.beats > 0 && w.answers {
		next := max(w.lastBeat.Add(w.probeAfterLocked(probe)).Sub(now), w.probed.Add(probe).Sub(now))
		if watchEvery > 0 && w.watcherLocked() {
			next = w.probed.Add(min(probe, watchEvery)).Sub(now)
		}
		d = min(d, next)
	}
	return d
}

// poke notes a release announcement; the term counts as alive again only when it beats after it
// (an announcement is a hint: a live leader's next beat outweighs it).
func (w *watch) poke(now time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.poked = now
}

// current is the watched term as a suspicion, to tell later whether anything was heard since.
func (w *watch) current() suspicion {
	w.mu.Lock()
	defer w.mu.Unlock()
	return suspicion{epoch: w.epoch, leader: w.leader, beats: w.beats}
}

// turn is how long this follower waits before acting on a silent or released term: its place
// among the term's successors times step, or after all of them (jittered) when not named. Every
// follower acts at once when the term named none (a leader of an older version).
func (w *watch) turn(step time.Duration) time.Duration {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.next) == 0 {
		return 0
	}
	if i := slices.Index(w.next, w.self); i >= 0 {
		return time.Duration(i) * step
	}
	return time.Duration(len(w.next))*step + rand.N(step)
}

// lastBeatAt is when the last beat of the watched term arrived.
func (w *watch) lastBeatAt() time.Time {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.lastBeat
}

// suspicion is a silent term a follower is about to check.
type suspicion struct {
	epoch  uint64
	leader string
	silent time.Duration
	beats  uint64
	// watching: a probe of the watcher (the first successor) before any silence (probeDue).
	watching bool
}

// observe takes a beat from another process. Beats of an older epoch (a deposed leader that has
// not noticed yet) are ignored, and so are beats of the current epoch whose Seq was heard
// already (a replayed capture must not keep a dead leader's term alive).
func (w *watch) observe(b Beat, now time.Time, session uint64) {
	if b.Identity == w.self {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	switch {
	case b.Epoch < w.epoch:
		return
	case b.Epoch > w.epoch:
		w.beats, w.seq = 0, 0
	case b.Seq != 0 && b.Seq <= w.seq:
		return
	}
	w.heard, w.seeded, w.epoch, w.leader, w.last = true, false, b.Epoch, b.Identity, now
	w.lastBeat, w.session, w.answers, w.next = now, session, b.Answers, b.Successors
	w.seq = max(w.seq, b.Seq)
	w.beats++
}

// poll reports a suspicion when the transport is healthy and the current term has been silent
// for timeout. While the transport is unhealthy the silence clock is held at zero, so a
// follower whose own link was down gives the leader a full timeout after it comes back.
func (w *watch) poll(now time.Time, healthy bool, timeout time.Duration) (suspicion, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.heard {
		return suspicion{}, false
	}
	if !healthy {
		w.last = now
		return suspicion{}, false
	}
	if w.seeded {
		return suspicion{}, false // a term read from the blob at start: probes only
	}
	silent := now.Sub(w.last)
	if silent < timeout+w.quietLocked() {
		return suspicion{}, false
	}
	return suspicion{epoch: w.epoch, leader: w.leader, silent: silent, beats: w.beats}, true
}

// unchanged reports whether no beat of a newer or the same term arrived since s was taken.
func (w *watch) unchanged(s suspicion) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.epoch == s.epoch && w.beats == s.beats
}

// probeOutcome records a silence probe of s that was answered, or that ran out its whole
// timeout, at at. A probe of a term or silence no longer current is not recorded.
func (w *watch) probeOutcome(s suspicion, answered bool, at time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.epoch != s.epoch || w.beats != s.beats {
		return
	}
	if answered {
		w.answered = at
	} else {
		w.timedOut = at
	}
}

// unanswered reports whether s is still the current silence and its probes went unanswered: one
// ran out its whole timeout, and none was answered. The leader's process is there (no "no
// responders") but does not answer: paused, or cut off.
func (w *watch) unanswered(s suspicion) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.epoch == s.epoch && w.beats == s.beats && w.timedOut.After(w.lastBeat) && !w.answered.After(w.lastBeat)
}

// announce reports whether EventProbing is still to be emitted for the silence of s: true once
// per silence (the beat it follows), when s is still the current term. The watcher's watch probe
// and its later silence probe of the same silence then emit it once between them.
func (w *watch) announce(s suspicion) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.epoch != s.epoch || w.beats != s.beats || w.told.Equal(w.lastBeat) {
		return false
	}
	w.told = w.lastBeat
	return true
}

// inherited is the successors named by the last term heard, without this process: the ones a
// term this process starts names until its own view of the members has some.
func (w *watch) inherited() (out []string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, id := range w.next {
		if id != w.self && id != w.leader && len(out) < MaxSuccessors {
			out = append(out, id)
		}
	}
	return out
}

// heardEpoch records the highest epoch heard in a beat.
func (e *Elector) heardEpoch(n uint64) {
	for {
		h := e.heard.Load()
		if n <= h || e.heard.CompareAndSwap(h, n) {
			return
		}
	}
}

// hasHeard reports whether any other process's beat (or a seeded term) was taken since Run started.
func (w *watch) hasHeard() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.heard
}

// seed watches the term epoch, read from the lease blob, as if its last beat came at since: a
// starting follower that hears nothing from it probes it as any silent term (coldStart). Until a
// beat is heard, silence alone never makes a suspicion of it (poll): only "no responders" does,
// so a follower whose beats never arrive (a wrong prefix) still breaks nothing. It reports false
// when a beat was heard meanwhile.
func (w *watch) seed(since time.Time, epoch uint64, leader string, session uint64) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.heard {
		return false
	}
	w.heard, w.seeded, w.epoch, w.leader, w.last, w.lastBeat = true, true, epoch, leader, since, since
	w.beats, w.seq, w.session, w.answers, w.next = 1, 0, session, true, nil
	return true
}

// restart gives the current term a fresh timeout, adopting epoch (found in the lease blob or
// led by this process) when it is newer.
func (w *watch) restart(now time.Time, epoch uint64, leader string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if epoch > w.epoch {
		w.epoch, w.leader, w.beats, w.seq = epoch, leader, 0, 0
	}
	w.last = now
}

// adopt makes the lease blob's epoch the watched term, even when it is older than the epoch
// heard: the blob is the record, and a beat above it cannot be a real term's.
func (w *watch) adopt(now time.Time, epoch uint64, leader string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.epoch, w.leader, w.beats, w.seq, w.last = epoch, leader, 0, 0, now
}

// onBeat is the subscription callback: followers watch the beat; a leader that hears a newer
// epoch reads the lease blob and ends its term when the blob confirms a newer one.
func (e *Elector) onBeat(b Beat) {
	if b.Epoch == 0 || b.Identity == "" {
		return
	}
	now := time.Now()
	if b.Identity != e.cfg.Identity {
		// Should the lease blob be lost and recreated without an epoch, the next term this
		// process stamps is above every epoch a live member announced (stamp).
		e.heardEpoch(b.Epoch)
	}
	e.watch.observe(b, now, e.session())
	if t := e.chk.Load(); t != nil {
		t.Reset(e.nextCheck(now, e.checkEvery()))
	}
	if b.Identity != e.cfg.Identity {
		e.followSuccessorBeats(e.watch.named())
	}
	if g := e.cur.Load(); g != nil && b.Epoch > g.epoch && b.Identity != e.cfg.Identity {
		e.confirmSuperseded(g, b)
	}
}

// followSuccessorBeats subscribes to the successors' beats while this follower is named a
// successor (on), and ends that subscription when it is not (SuccessorHeartbeats).
func (e *Elector) followSuccessorBeats(on bool) {
	sh, ok := e.cfg.Heartbeats.(SuccessorHeartbeats)
	if !ok {
		return
	}
	e.succMu.Lock()
	defer e.succMu.Unlock()
	switch {
	case on && e.succStop == nil:
		stop, err := sh.SubscribeSuccessors(e.onBeat)
		if err != nil {
			// It hears every other beat; the named follower's tighter timeouts then make it
			// probe a live term between beats (answered), never break it. Tried again at
			// the next beat.
			if !e.succFailed {
				e.log.Warn("named a successor, but cannot subscribe to the successors' heartbeats; retrying at each beat", "err", err)
			}
			e.succFailed = true
			return
		}
		e.succStop, e.succFailed = stop, false
	case !on && e.succStop != nil:
		e.succStop()
		e.succStop = nil
	}
}

// confirmSuperseded ends g's term when the lease blob records a newer epoch than g's, as the beat
// b claims. A beat the blob does not confirm is counted (Stats.Unconfirmed) and ignored: a leader
// steps down on the record, never on a message alone. One check runs at a time per term.
func (e *Elector) confirmSuperseded(g *guard, b Beat) {
	if !g.confirming.CompareAndSwap(false, true) {
		return
	}
	go func() {
		defer g.confirming.Store(false)
		ctx, cancel := context.WithTimeout(context.Background(), e.opTimeout())
		defer cancel()
		p, err := e.api.GetProperties(ctx, e.cfg.Container, e.cfg.Blob)
		if err != nil {
			e.log.Warn("heard a heartbeat of a newer term but cannot read the lease blob; renewal decides", "beat_epoch", b.Epoch, "err", err)
			return
		}
		epoch, err := parseEpoch(p.Metadata)
		if err == nil && epoch > g.epoch {
			g.lose(fmt.Errorf("%w: %w: %w: heard a heartbeat of epoch %d from %s, and the lease blob records epoch %d",
				ErrLeadershipLost, ErrLeaseNotHeld, ErrSuperseded, b.Epoch, b.Identity, epoch))
			return
		}
		e.unconfirmed.Add(1)
		e.log.Warn("a heartbeat claims a newer term than the lease blob records; ignored",
			"epoch", g.epoch, "beat_epoch", b.Epoch, "beat_leader", b.Identity, "blob_epoch", epoch)
	}()
}

// subscribe starts listening to heartbeats once; it is retried by the follower loop until it
// works. The returned stop is nil until then.
func (e *Elector) subscribe(stop *func()) {
	if e.cfg.Heartbeats == nil || *stop != nil {
		return
	}
	s, err := e.cfg.Heartbeats.Subscribe(e.onBeat)
	if err != nil {
		e.log.Warn("cannot subscribe to leader heartbeats; retrying (a crashed leader is replaced only when its lease expires meanwhile)", "err", err)
		return
	}
	*stop = s
}

// session is the prober's transport session, 0 without a prober.
func (e *Elector) session() uint64 {
	if e.cfg.Prober == nil {
		return 0
	}
	return e.cfg.Prober.Session()
}

// beat publishes this leader's heartbeats until its leader context ends. With a Prober the term
// answers probes first: a beat is published only once the answer is in place, so a follower
// that heard the term can count "no responders" as the process gone.
//
// While no renewal has succeeded for RenewStall (the leader may be cut off from storage; more
// after slow renewals, MaxRenewStall), beats pause: a follower that reaches storage then breaks the lease after SuspicionTimeout, fenced,
// instead of waiting for this term's safety deadline. They resume when a renewal succeeds.
func (e *Elector) beat(ctx context.Context, t Term, g *guard, ans *answering, log *slog.Logger) {
	hb := e.cfg.Heartbeats
	sh, _ := hb.(SuccessorHeartbeats)
	inherited := e.watch.inherited()
	tick := time.NewTicker(e.cfg.HeartbeatInterval)
	defer tick.Stop()
	failing, paused := false, false
	var toAll []string // the successors named in the last beat sent to every follower
	for seq := uint64(1); ; seq++ {
		var err error
		stall, stalled := g.stalled(time.Now())
		switch {
		case stalled && !paused:
			paused = true
			e.beatPauses.Add(1)
			log.Warn("cannot renew the lease; heartbeats paused, so a follower that reaches storage takes over", "renewing_for", stall.Round(time.Millisecond))
			e.emit(EventBeatsPaused, t, nil)
		case !stalled && paused:
			paused = false
			log.Info("renewed again; heartbeats resume")
		}
		if paused {
			err = nil // silent on purpose
		} else if ans.ensure(e.cfg.Prober, t) {
			pctx, cancel := context.WithTimeout(ctx, e.cfg.HeartbeatInterval)
			b := Beat{Epoch: t.Epoch, Identity: t.Identity, Seq: seq, Sent: time.Now(), Answers: e.cfg.Prober != nil, Successors: e.successorsOr(inherited)}
			if sh != nil && seq%2 == 0 && len(b.Successors) > 0 && slices.Equal(b.Successors, toAll) {
				err = sh.PublishSuccessors(pctx, b) // every other beat, to the named followers alone
			} else if err = hb.Publish(pctx, b); err == nil {
				toAll = b.Successors
			}
			cancel()
		} else {
			err = errors.New("cannot answer probes of the term yet; not beating")
		}
		switch {
		case err != nil && ctx.Err() == nil:
			e.beatFailures.Add(1)
			if !failing {
				log.Warn("cannot publish heartbeats; followers may break the lease", "err", err)
			}
			failing = true
		case err == nil && failing:
			log.Info("heartbeats published again")
			failing = false
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// successors is Config.Successors, without this process, clipped to MaxSuccessors; nil when it
// is unset or panics.
func (e *Elector) successors() (out []string) {
	if e.cfg.Successors == nil {
		return nil
	}
	defer func() {
		if r := recover(); r != nil {
			out = nil
		}
	}()
	for _, id := range e.cfg.Successors() {
		if id != e.cfg.Identity && id != "" && len(out) < MaxSuccessors {
			out = append(out, id)
		}
	}
	return out
}

// successorsOr is successors, or else the ones this term inherited (watch.inherited): a new
// leader's view of the members can be empty for a while, and a term without successors has no
// watcher, so its crash would be seen only after a silence.
func (e *Elector) successorsOr(inherited []string) []string {
	if out := e.successors(); len(out) > 0 {
		return out
	}
	return inherited
}

// waitTurn waits this follower's turn (watch.turn) to act on the term of s. It reports false when
// a beat of that term or a newer one arrives meanwhile (someone else took over, or the term
// lives), or ctx ends.
func (e *Elector) waitTurn(ctx context.Context, s suspicion) bool {
	d := e.watch.turn(TurnStep)
	if d <= 0 {
		return true
	}
	t := time.NewTimer(d)
	defer t.Stop()
	tk := time.NewTicker(10 * time.Millisecond)
	defer tk.Stop()
	for {
		select {
		case <-ctx.Done():
			return false
		case <-t.C:
			return e.watch.unchanged(s)
		case <-tk.C:
			if !e.watch.unchanged(s) {
				return false
			}
		}
	}
}

// answers reports whether the leader of s answers a probe now (alive, its transport working).
func (e *Elector) answers(ctx context.Context, s suspicion) bool {
	if e.cfg.Prober == nil {
		return false
	}
	pctx, cancel := context.WithTimeout(ctx, min(e.probeTimeout, defaultProbeTimeout)) // a hanging probe says nothing
	defer cancel()
	return e.cfg.Prober.Probe(pctx, s.epoch) == nil
}

// aliveWait is how long a follower that read the lease blob waits for the beats of a silent
// leader that still answers probes (it paused them: its renewals stall) before it breaks.
const aliveWait = time.Second

// check runs when a follower suspects the leader of s.epoch is dead. It reads the lease blob
// and, when the lease is still held under that term's stamp, breaks it on condition of the
// stamp's ETag (break period 0). The caller campaigns right after. gone says probes confirmed the
// leader's process gone; otherwise a leader that still answers a probe paused its beats because
// its renewals stalled, and it gets aliveWait after this follower's read to beat again: storage
// that paused for everyone (an emulator saving its metadata, a throttled account) answers its
// queued renewal as it answered this read, and a leader cut off from storage alone stays silent.
func (e *Elector) check(ctx context.Context, s suspicion, gone bool) {
	log := e.log.With("suspected_epoch", s.epoch, "suspected_leader", s.leader)
	e.suspicions.Add(1)
	log.Info("no heartbeat from the leader; checking its lease", "silent_for", s.silent.Round(time.Millisecond))
	e.emit(EventSuspected, Term{Epoch: s.epoch, Identity: s.leader}, nil)
	defer func() { e.watch.restart(time.Now(), 0, "") }() // next suspicion no sooner than a timeout from now

	cctx, cancel := context.WithTimeout(ctx, e.opTimeout())
	defer cancel()
	p, err := e.api.GetProperties(cctx, e.cfg.Container, e.cfg.Blob)
	if err != nil {
		log.Warn("cannot read the lease blob; not breaking", "err", err)
		return
	}
	if !p.Held() {
		log.Info("the lease is free; campaigning", "lease_state", p.LeaseState)
		return
	}
	epoch, err := parseEpoch(p.Metadata)
	switch {
	case err != nil:
		log.Warn("not breaking", "err", err)
		return
	case epoch > s.epoch:
		log.Info("a newer term holds the lease; watching it", "epoch", epoch, "leader", p.Metadata[MetaLeader])
		e.watch.restart(time.Now(), epoch, p.Metadata[MetaLeader])
		return
	case epoch < s.epoch:
		// Beats are sent only after the stamp, so the blob was reset (storage lost writes) or
		// the beat was not a real term's. Watch the blob's term: its leader's beats count again.
		log.Info("the lease blob's epoch is older than the silent term; not breaking, watching the blob's term", "blob_epoch", epoch)
		e.watch.adopt(time.Now(), epoch, p.Metadata[MetaLeader])
		return
	}
	if p.Metadata[MetaReleased] != "" {
		// The term was released and its successor holds the lease without having stamped it
		// yet: breaking now would only end that successor's term before it began.
		log.Info("the silent term released its lease; its successor is starting; not breaking")
		return
	}
	switch {
	case gone:
	case e.watch.unanswered(s):
		// This silence's probes already ran out their time unanswered: probing once more would
		// only add a probe timeout (250 ms) to the takeover of a paused or cut-off leader.
		log.Info("the silent leader did not answer this silence's probes")
	case e.answers(ctx, s):
		for end := time.Now().Add(aliveWait); time.Now().Before(end) && e.watch.unchanged(s); {
			select {
			case <-ctx.Done():
				return
			case <-time.After(25 * time.Millisecond):
			}
		}
		if !e.watch.unchanged(s) {
			log.Info("the silent leader answers probes and beats again now that storage answers; not breaking")
			return
		}
		log.Info("the silent leader answers probes but cannot renew while this follower reaches storage; breaking")
	}
	if !e.watch.unchanged(s) {
		log.Info("a heartbeat arrived while checking; not breaking")
		return
	}
	bctx, bcancel := context.WithTimeout(ctx, e.opTimeout())
	defer bcancel()
	if err := e.api.BreakLease(bctx, e.cfg.Container, e.cfg.Blob, p.ETag); err != nil {
		switch {
		case errors.Is(err, ErrConditionNotMet):
			log.Info("the lease blob changed since it was read (a new term); not broken")
		case errors.Is(err, ErrLeaseNotHeld):
			log.Info("the lease was already free or broken")
		default:
			log.Warn("break failed", "err", err)
		}
		return
	}
	e.breaks.Add(1)
	log.Info("broke the lease of a silent leader; campaigning", "etag", p.ETag)
	e.emit(EventBrokeLease, Term{Epoch: s.epoch, Identity: p.Metadata[MetaLeader]}, nil)
}
