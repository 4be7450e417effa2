package election

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob"
)

// Elector campaigns for leadership on one blob lease. Create it with New or NewAzure and call
// Run once; Run may be called again after it returned.
type Elector struct {
	api BlobAPI
	cfg Config
	log *slog.Logger

	poke    chan struct{} // buffered(1): a follower should try to acquire now
	running atomic.Bool
	leading atomic.Bool
	watch   *watch                // heartbeats heard while following
	cur     atomic.Pointer[guard] // the term being led, for heartbeats of a newer epoch
	floor   atomic.Uint64         // the next term's epoch is above it (RaiseEpochFloor)
	heard   atomic.Uint64         // the highest epoch heard in a beat: the floor of a blob that lost its epoch

	terms, renewals, renewFailures, losses, releases atomic.Uint64
	suspicions, breaks, beatFailures                 atomic.Uint64
	unconfirmed, cutOff                              atomic.Uint64
	probes, probeAnswers, probeConfirmed             atomic.Uint64
	beatPauses                                       atomic.Uint64
	leaseRebuilds, coldStarts                        atomic.Uint64

	prb          prober        // the fast path's confirmation, off the wait loop
	probeTimeout time.Duration // bounds one probe (tests lengthen it)

	succMu     sync.Mutex
	succStop   func() // the subscription to the successors' beats while this follower is named
	succFailed bool   // the last attempt to subscribe failed (logged once until one works)

	// chk is the waiting follower's check timer while wait runs (else nil). Each beat heard
	// moves it to the term's next deadline (nextCheck), so a follower that hears a live leader
	// is not woken between beats.
	chk atomic.Pointer[time.Timer]
}

// Stats are counters since the Elector was created.
type Stats struct {
	Terms         uint64 // leaderships won (lead was called)
	Renewals      uint64 // successful renewals
	RenewFailures uint64 // failed renew calls (transient and definitive)
	Losses        uint64 // terms ended by loss: lease refused, deadline passed, or unhealthy
	Releases      uint64 // successful releases of the lease
	Suspicions    uint64 // times this follower found the leader silent and checked its lease
	Breaks        uint64 // leases of silent leaders this follower broke
	BeatFailures  uint64 // heartbeats this leader could not publish
	Unconfirmed   uint64 // beats of a newer epoch that the lease blob did not confirm (ignored)
	CutOff        uint64 // times this follower stopped campaigning because its transport was unhealthy
	Probes        uint64 // probes sent (Config.Prober): the watcher's, and those of a silent term
	ProbeAnswers  uint64 // probes a silent term answered (a late beat, not a crash)
	NoResponders  uint64 // silent terms confirmed gone by no responders (fast-path takeovers)
	BeatPauses    uint64 // times this leader paused its beats because renewals stalled (RenewStall)
	LeaseRebuilds uint64 // times this leader found its lease blob missing and kept its term (EventLeaseRebuilt)
	ColdStarts    uint64 // times this process started watching a held lease's term it had not heard (EventColdStart)
}

// New returns an Elector over api. Zero fields of cfg take their defaults; the result must
// pass Config.Validate.
func New(api BlobAPI, cfg Config) (*Elector, error) {
	if api == nil {
		return nil, errors.New("election: New needs a BlobAPI (use NewAzure for the azblob SDK)")
	}
	cfg = cfg.withDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Elector{
		api:   api,
		cfg:   cfg,
		log:   cfg.Logger.With("component", "election", "identity", cfg.Identity),
		poke:  make(chan struct{}, 1),
		watch: &watch{self: cfg.Identity, quiet: quietFor(cfg)},
		prb:   prober{verdict: make(chan suspicion, 1), ended: make(chan struct{}, 1)},

		probeTimeout: defaultProbeTimeout,
	}, nil
}

// NewAzure returns an Elector over an azblob client.
func NewAzure(client *azblob.Client, cfg Config) (*Elector, error) {
	if client == nil {
		return nil, errors.New("election: NewAzure needs an azblob client")
	}
	return New(NewAzureAPI(client), cfg)
}

// Config returns the configuration in use, defaults applied.
func (e *Elector) Config() Config { return e.cfg }

// IsLeader reports whether this Elector leads now: true from just before lead is called until
// the leader context is cancelled.
func (e *Elector) IsLeader() bool { return e.leading.Load() }

// Poke makes a following Elector try to acquire the lease at once instead of at its next
// retry. It never blocks; it is ignored while leading. Call it when the leader announces a
// release.
func (e *Elector) Poke() {
	e.watch.poke(time.Now())
	select {
	case e.poke <- struct{}{}:
	default:
	}
}

// Stats returns the counters.
func (e *Elector) Stats() Stats {
	return Stats{
		Terms:         e.terms.Load(),
		Renewals:      e.renewals.Load(),
		RenewFailures: e.renewFailures.Load(),
		Losses:        e.losses.Load(),
		Releases:      e.releases.Load(),
		Suspicions:    e.suspicions.Load(),
		Breaks:        e.breaks.Load(),
		BeatFailures:  e.beatFailures.Load(),
		Unconfirmed:   e.unconfirmed.Load(),
		CutOff:        e.cutOff.Load(),
		Probes:        e.probes.Load(),
		ProbeAnswers:  e.probeAnswers.Load(),
		NoResponders:  e.probeConfirmed.Load(),
		BeatPauses:    e.beatPauses.Load(),
		LeaseRebuilds: e.leaseRebuilds.Load(),
		ColdStarts:    e.coldStarts.Load(),
	}
}

// Run campaigns until ctx ends. Whenever it wins the lease it calls lead with a leader context
// that carries the Term and is cancelled when the right to lead ends: the lease is refused,
// the safety deadline passes, Healthy fails, or ctx ends. Run then waits for lead to return and
// campaigns again; losing leadership never ends Run, and a panic in lead is recovered and
// logged. lead must return promptly once its context is done.
//
// When ctx ends while leading, Run cancels the leader context, waits for lead to return (the
// lease is still renewed meanwhile), releases the lease, calls OnRelease and returns nil. Run
// returns a non-nil error only when misused (nil lead, Run already running).
func (e *Elector) Run(ctx context.Context, lead func(leaderCtx context.Context) error) error {
	if lead == nil {
		return errors.New("election: Run needs a lead function")
	}
	if !e.running.CompareAndSwap(false, true) {
		return ErrAlreadyRunning
	}
	defer e.running.Store(false)

	e.log.Info("campaign started", "container", e.cfg.Container, "blob", e.cfg.Blob,
		"lease", e.cfg.LeaseDuration, "renew", e.cfg.RenewInterval, "retry", e.cfg.RetryInterval)
	var stopBeats func()
	defer func() {
		e.stopProbe()
		if stopBeats != nil {
			stopBeats()
		}
		e.followSuccessorBeats(false)
	}()
	leaseID := newLeaseID()
	ensured := false
	var ambiguous bool      // the last acquire may have succeeded without our knowing
	cut := false            // not campaigning: cut off from the heartbeat transport
	ineligible := false     // not campaigning: Config.Eligible refused
	now := false            // campaign at once: a silent term was checked, or a release announced
	var listening time.Time // when the subscription to heartbeats started
	cold := false           // the held lease's term was looked up at start (coldStart)
	for ctx.Err() == nil {
		e.subscribe(&stopBeats)
		if stopBeats != nil && listening.IsZero() {
			listening = time.Now()
		}
		if err := e.eligible(); err != nil {
			if !ineligible {
				e.log.Warn("not campaigning", "reason", err)
			}
			ineligible = true
			e.wait(ctx)
			continue
		} else if ineligible {
			ineligible = false
			e.log.Info("eligible again; campaigning")
		}
		if hb := e.cfg.Heartbeats; hb != nil {
			// A process cut off from the transport cannot hear a leader, and its own beats
			// would not be heard: it would take the lease from a live leader and lead unheard.
			if healthy := hb.Healthy(); !healthy {
				if !cut {
					e.cutOff.Add(1)
					e.log.Warn("cut off from the heartbeat transport; not campaigning until it is back")
				}
				cut = true
				e.wait(ctx)
				continue
			} else if cut {
				cut = false
				e.log.Info("heartbeat transport healthy again; campaigning")
			}
		}
		if !ensured {
			if err := e.api.EnsureBlob(ctx, e.cfg.Container, e.cfg.Blob); err != nil {
				if ctx.Err() != nil {
					break
				}
				e.log.Warn("cannot create lease blob; retrying", "err", err)
				e.wait(ctx)
				continue
			}
			ensured = true
		}
		if !now && e.cfg.Heartbeats != nil && e.watch.alive(time.Now(), e.cfg.SuspicionTimeout) {
			// A live leader's beats are heard: the lease blob is left alone until they stop
			// or a release is announced. Nothing here needs a look before then, but for this
			// process's own link: the wait ends when it turns unhealthy.
			now = e.waitFollowing(ctx)
			continue
		}
		now = false

		term, sent, err := e.acquire(ctx, leaseID)
		if err != nil {
			ambiguous = !errors.Is(err, ErrLeaseHeld) && !errors.Is(err, ErrNotFound)
			switch {
			case ctx.Err() != nil:
			case errors.Is(err, ErrLeaseHeld):
				e.log.Debug("lease held by another; following")
				if !cold && !listening.IsZero() {
					cold = e.coldStart(ctx)
				}
			case errors.Is(err, ErrNotFound):
				e.log.Warn("lease blob missing; recreating it", "err", err)
				ensured = false
			default:
				e.log.Warn("acquire failed; retrying", "err", err)
			}
			now = e.wait(ctx)
			continue
		}
		ambiguous = false

		e.stopProbe() // a confirmation of the previous term is moot
		e.runTerm(ctx, term, sent, lead)
		leaseID = newLeaseID()
		e.cooldown(ctx)
	}
	if ambiguous {
		// An acquire whose answer we never saw may have won the lease: hand it back rather than
		// leave it to expire. Refused harmlessly when we do not hold it.
		e.releaseQuietly(ctx, leaseID)
	}
	e.log.Info("campaign stopped")
	return nil
}

// coldStart runs once a starting follower finds the lease held and has heard no beat since it
// started listening: it reads the lease blob and watches the term stamped there as if its last beat
// had come as it read it. A live leader's next beat (within a heartbeat
// interval) refreshes it. A dead one, after every worker was killed, is confirmed gone by probes
// ("no responders": nothing answers for the term) and its lease broken, fenced on the stamp's
// ETag, as any follower does: the first worker back leads within about 2 s, not after the dead
// lease runs out. Silence alone does not count before a beat was heard (a follower whose beats
// never arrive breaks nothing), so it needs Config.Prober. It reports whether the lookup is done
// (false: try again at the next refusal).
func (e *Elector) coldStart(ctx context.Context) bool {
	if e.cfg.Heartbeats == nil || e.cfg.Prober == nil || e.watch.hasHeard() {
		return true
	}
	cctx, cancel := context.WithTimeout(ctx, e.opTimeout())
	defer cancel()
	p, err := e.api.GetProperties(cctx, e.cfg.Container, e.cfg.Blob)
	if err != nil {
		return false
	}
	epoch, err := parseEpoch(p.Metadata)
	if err != nil || epoch == 0 || !p.Held() || p.Metadata[MetaReleased] != "" {
		return true
	}
	// The silence counts from now, not from when this process started listening: the term may
	// have been stamped a moment ago, its leader not yet answering probes nor beating. Seeded at
	// the start of listening (seconds ago on a loaded machine), it was probed at once: a
	// follower announced a probe of a live term, and a leader slower than the probes' 100 ms to
	// put its answer up would have had its lease broken. From now, a live leader has ProbeAfter
	// to beat; a dead one is found ProbeAfter later.
	if !e.watch.seed(time.Now(), epoch, p.Metadata[MetaLeader], e.session()) {
		return true
	}
	e.coldStarts.Add(1)
	e.log.Info("the lease is held by a term not heard since start; watching it", "epoch", epoch, "leader", p.Metadata[MetaLeader])
	e.emit(EventColdStart, Term{Epoch: epoch, Identity: p.Metadata[MetaLeader]}, nil)
	return true
}

// acquire tries once to win the lease and stamp a new term into the blob's metadata. sent is
// when the acquire request was sent (monotonic clock): the lease lasts at least until
// sent+LeaseDuration on the server.
func (e *Elector) acquire(ctx context.Context, leaseID string) (term Term, sent time.Time, err error) {
	cctx, cancel := context.WithTimeout(ctx, e.opTimeout())
	defer cancel()
	sent = time.Now()
	if err := e.api.AcquireLease(cctx, e.cfg.Container, e.cfg.Blob, leaseID, e.cfg.LeaseDuration); err != nil {
		return Term{}, sent, err
	}
	term, err = e.stamp(cctx, leaseID)
	if err != nil {
		// Give up the term: without its epoch written, it has no fencing token.
		e.log.Warn("acquired the lease but could not write the new epoch; giving it up", "err", err)
		if !IsDefinitive(err) {
			e.releaseQuietly(ctx, leaseID)
		}
		return Term{}, sent, fmt.Errorf("start term: %w", err)
	}
	return term, sent, nil
}

// stamp reads the epoch under the lease and writes epoch+1, the identity and the start time,
// conditional on holding the lease.
func (e *Elector) stamp(ctx context.Context, leaseID string) (Term, error) {
	p, err := e.api.GetProperties(ctx, e.cfg.Container, e.cfg.Blob)
	if err != nil {
		return Term{}, err
	}
	old, err := parseEpoch(p.Metadata)
	if err != nil {
		return Term{}, err
	}
	next := old + 1
	if h := e.heard.Load(); old == 0 && h >= next && h < math.MaxUint64 {
		// The blob holds no epoch (storage lost it), but a live leader's beats named h: stay
		// above it. A beat never moves an epoch the blob records (it may be forged).
		e.log.Warn("the lease blob holds no epoch; starting above the highest epoch heard", "heard", h)
		next = h + 1
	}
	if f := e.floor.Load(); f >= next {
		// The lease blob's epoch is behind one the leader's work has seen: its metadata went
		// back in time (storage lost acknowledged writes). Jump above it, so no two terms
		// share an epoch.
		e.log.Warn("the lease blob's epoch is behind an epoch already used; jumping above it", "lease_epoch", old, "highest_seen", f)
		next = f + 1
	}
	t := Term{Epoch: next, Identity: e.cfg.Identity, Since: time.Now(), LeaseID: leaseID}
	md := termMetadata(t)
	for k, v := range e.cfg.Stamp {
		md[k] = v
	}
	if err := e.api.SetMetadata(ctx, e.cfg.Container, e.cfg.Blob, leaseID, md); err != nil {
		return Term{}, err
	}
	return t, nil
}

// RaiseEpochFloor makes every later term of this elector take an epoch above n, whatever the lease
// blob's metadata says. The leader's work calls it with the highest epoch it has seen written (a
// checkpoint's writer epoch). If storage loses recent writes, the blob's epoch can go back in time;
// without a floor the next term would reuse an epoch already used. The floor only rises; it lives
// as long as the Elector.
func (e *Elector) RaiseEpochFloor(n uint64) {
	for {
		f := e.floor.Load()
		if n <= f || e.floor.CompareAndSwap(f, n) {
			return
		}
	}
}

// eligible runs Config.Eligible, treating a panic as a refusal.
func (e *Elector) eligible() (err error) {
	if e.cfg.Eligible == nil {
		return nil
	}
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("Eligible panicked: %v", r)
		}
	}()
	return e.cfg.Eligible()
}

// opTimeout bounds a single acquire, stamp or renew call.
func (e *Elector) opTimeout() time.Duration { return min(e.cfg.RenewInterval, 10*time.Second) }

// wait pauses a follower for RetryInterval*(1-Jitter*rand), or until Poke or ctx ends. It also ends
// when the leader has been silent for SuspicionTimeout or its term is confirmed gone by probes.
// Then, in its turn, it checks and maybe breaks the silent term's lease before returning, so that
// the caller campaigns at once. The probes run in a goroutine of their own (startProbe), so the
// suspicion timeout is checked on time while they are out. It reports whether the caller should
// campaign now, though the watched term beat recently.
func (e *Elector) wait(ctx context.Context) bool { return e.waitFor(ctx, e.cfg.RetryInterval, false) }

// followRetries is how long a follower of a live leader waits before the campaign loop looks
// again (waitFollowing): the wait itself ends on a silence, a release or a cut, so the loop has
// nothing to do sooner; a wake-up a second was a tenth of an idle follower's.
const followRetries = 5

// waitFollowing is wait for a follower that hears a live leader: it ends after followRetries
// retry intervals, or as soon as the transport turns unhealthy (the loop then notes the cut).
func (e *Elector) waitFollowing(ctx context.Context) bool {
	return e.waitFor(ctx, followRetries*e.cfg.RetryInterval, true)
}

// waitFor is wait for retry (less jitter); untilCut ends it when the transport turns unhealthy.
func (e *Elector) waitFor(ctx context.Context, retry time.Duration, untilCut bool) bool {
	d := time.Duration(float64(retry) * (1 - e.cfg.Jitter*rand.Float64()))
	t := time.NewTimer(d)
	defer t.Stop()
	var tick <-chan time.Time
	var chk *time.Timer
	every := e.checkEvery() // the finest check period; the timer waits for the next deadline
	if e.cfg.Heartbeats != nil {
		chk = time.NewTimer(e.nextCheck(time.Now(), every))
		defer chk.Stop()
		e.chk.Store(chk)
		defer e.chk.Store(nil) // before Stop: a beat after it moves no timer of a later wait
		tick = chk.C
	}
	for {
		select {
		case <-ctx.Done():
			return false
		case <-e.poke:
			if e.cfg.Heartbeats == nil {
				return true
			}
			e.stopProbe()                             // the term was released: its answer is gone on purpose
			return e.waitTurn(ctx, e.watch.current()) // the released term's first successor acquires first
		case <-t.C:
			return false
		case s := <-e.prb.verdict:
			if e.confirmed(ctx, s) {
				return true
			}
			chk.Reset(e.nextCheck(time.Now(), every))
		case <-e.prb.ended:
			if chk == nil {
				continue
			}
			// The next probe is planned from now: the check planned while this one was out
			// left probes aside.
			if !chk.Stop() {
				select {
				case <-chk.C:
				default:
				}
			}
			chk.Reset(e.nextCheck(time.Now(), every))
		case now := <-tick:
			healthy := e.cfg.Heartbeats.Healthy()
			if s, ok := e.watch.poll(now, healthy, e.cfg.SuspicionTimeout); ok {
				e.stopProbe() // the suspicion checks the lease now; a confirmation would only repeat it
				if !e.waitTurn(ctx, s) {
					e.watch.restart(time.Now(), 0, "")
					return false
				}
				e.check(ctx, s, false)
				return true
			}
			if !healthy {
				if untilCut {
					return false
				}
				chk.Reset(every) // the silence clock is held at zero until the transport is back
				continue
			}
			if e.cfg.Prober != nil && !e.prb.running() {
				if s, first, ok := e.watch.probeDue(now, healthy, e.cfg.Prober.Session(), e.cfg.ProbeAfter, e.cfg.WatchEvery); ok {
					e.startProbe(ctx, s, first)
				}
			}
			chk.Reset(e.nextCheck(time.Now(), every))
		}
	}
}

// checkEvery is the finest period of a waiting follower's checks (0 without heartbeats).
func (e *Elector) checkEvery() time.Duration {
	if e.cfg.Heartbeats == nil {
		return 0
	}
	every := max(e.cfg.HeartbeatInterval/4, 5*time.Millisecond)
	if e.cfg.Prober != nil {
		every = min(every, max(e.cfg.ProbeAfter/10, 5*time.Millisecond))
	}
	return every
}

// nextCheck is when a follower should next look at the watched term: when it may turn silent
// for SuspicionTimeout or (no probe in flight) ProbeAfter. It wakes right at a deadline ahead (a
// check every period would add up to a period to every takeover), and after every when one is
// already past but could not be acted on. Once the term is a heartbeat interval late it looks at
// least every interval (its own link's health holds the silence clock); while beats arrive, each
// of them moves the timer (onBeat), so a follower of a live leader sleeps from beat to beat.
func (e *Elector) nextCheck(now time.Time, every time.Duration) time.Duration {
	probe := time.Duration(0)
	if e.cfg.Prober != nil && !e.prb.running() {
		probe = e.cfg.ProbeAfter
	}
	d := e.watch.untilDue(now, e.cfg.SuspicionTimeout, probe, e.cfg.WatchEvery)
	if d <= 0 {
		d = every
	}
	step := max(e.cfg.HeartbeatInterval, every)
	late := max(0, e.watch.lastBeatAt().Add(e.cfg.HeartbeatInterval).Sub(now)) // until the term is a beat late
	return min(d+time.Millisecond, late+step)
}

// cooldown pauses RetryInterval after a term ended, so that a released lease goes to another
// process (which OnRelease poked) and a failing lead does not spin. Pokes are ignored: the
// announcement of our own release may come back to us.
func (e *Elector) cooldown(ctx context.Context) {
	e.drainPoke()
	t := time.NewTimer(e.cfg.RetryInterval)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

func (e *Elector) drainPoke() {
	select {
	case <-e.poke:
	default:
	}
}
