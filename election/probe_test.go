package election

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mapagg/mapagg/internal/harness/testenv"
)

// The probe path runs only on a silence of the heard term, only while healthy, only on the
// session the last beat arrived on, and at most once per ProbeAfter.
func TestWatch_ProbeDue(t *testing.T) {
	const after = 300 * time.Millisecond
	w := &watch{self: "me"}
	t0 := time.Now()
	if _, _, ok := w.probeDue(t0.Add(time.Hour), true, 0, after, 0); ok {
		t.Fatal("probed before any beat was heard")
	}
	w.observe(Beat{Epoch: 3, Identity: "l", Seq: 1, Answers: true}, t0, 7)
	if _, _, ok := w.probeDue(t0.Add(after-time.Millisecond), true, 7, after, 0); ok {
		t.Error("probed before ProbeAfter of silence")
	}
	if _, _, ok := w.probeDue(t0.Add(after), false, 7, after, 0); ok {
		t.Error("probed while unhealthy")
	}
	if _, _, ok := w.probeDue(t0.Add(after), true, 8, after, 0); ok {
		t.Error("probed on a new session (this process reconnected since the beat)")
	}
	s, first, ok := w.probeDue(t0.Add(after), true, 7, after, 0)
	if !ok || !first || s.epoch != 3 || s.leader != "l" || s.beats != 1 {
		t.Fatalf("probeDue = %+v, %v; want epoch 3 of l", s, ok)
	}
	if _, _, ok := w.probeDue(t0.Add(after+after/2), true, 7, after, 0); ok {
		t.Error("probed again within ProbeAfter")
	}
	if _, first, ok := w.probeDue(t0.Add(2*after), true, 7, after, 0); !ok || first {
		t.Errorf("probeDue again after ProbeAfter = first %v, %v; want a repeat of the same silence", first, ok)
	}
	// A beat on the new session makes the probe path count again.
	w.observe(Beat{Epoch: 3, Identity: "l", Seq: 2, Answers: true}, t0.Add(3*after), 8)
	if _, first, ok := w.probeDue(t0.Add(4*after), true, 8, after, 0); !ok || !first {
		t.Errorf("probeDue on the session of the last beat = first %v, %v; want the first probe of a new silence", first, ok)
	}
	// A term whose beats do not say it answers (an older version's) is not probed.
	w.observe(Beat{Epoch: 3, Identity: "l", Seq: 3}, t0.Add(4*after), 8)
	if _, _, ok := w.probeDue(t0.Add(6*after), true, 8, after, 0); ok {
		t.Error("probed a term that does not answer probes")
	}
	// A term adopted from the blob, never heard, is not probed: no beat says it answers.
	w.adopt(t0.Add(5*after), 9, "m")
	if _, _, ok := w.probeDue(t0.Add(7*after), true, 8, after, 0); ok {
		t.Error("probed a term never heard")
	}
}

// The term's first successor (the watcher) probes the live term every watchEvery, without a
// silence; the others wait for ProbeAfter of silence.
func TestWatch_WatcherProbesWithoutSilence(t *testing.T) {
	const after, every = 300 * time.Millisecond, 100 * time.Millisecond
	t0 := time.Now()
	w := &watch{self: "me"}
	w.observe(Beat{Epoch: 3, Identity: "l", Seq: 1, Answers: true, Successors: []string{"me", "other"}}, t0, 7)
	s, _, ok := w.probeDue(t0, true, 7, after, every)
	if !ok || !s.watching {
		t.Fatalf("watcher: probeDue right after a beat = %+v, %v; want a watch probe", s, ok)
	}
	if _, _, ok := w.probeDue(t0.Add(every/2), true, 7, after, every); ok {
		t.Error("watcher probed again within watchEvery")
	}
	if d := w.untilDue(t0.Add(every/2), time.Hour, after, every); d != every/2 {
		t.Errorf("watcher: next check in %v, want %v", d, every/2)
	}
	if s, _, ok := w.probeDue(t0.Add(every), true, 7, after, every); !ok || !s.watching {
		t.Errorf("watcher: no watch probe after watchEvery (%+v, %v)", s, ok)
	}
	if s, _, ok := w.probeDue(t0.Add(after), true, 7, after, every); !ok || s.watching {
		t.Errorf("watcher after ProbeAfter of silence: %+v, %v; want a silence probe", s, ok)
	}
	off := &watch{self: "me"}
	off.observe(Beat{Epoch: 3, Identity: "l", Seq: 1, Answers: true, Successors: []string{"me"}}, t0, 7)
	if _, _, ok := off.probeDue(t0.Add(every), true, 7, after, -1); ok {
		t.Error("watcher probed within ProbeAfter of silence with watching off")
	}
	if _, _, ok := w.probeDue(t0.Add(20*after), true, 8, after, every); ok {
		t.Error("watcher probed on a new session (it reconnected since the beat)")
	}

	o := &watch{self: "other"} // second successor: probes only after a silence
	o.observe(Beat{Epoch: 3, Identity: "l", Seq: 1, Answers: true, Successors: []string{"me", "other"}}, t0, 7)
	if _, _, ok := o.probeDue(t0.Add(every), true, 7, after, every); ok {
		t.Error("a follower that is not the first successor probed before ProbeAfter of silence")
	}
}

// After a crash the first successor probes alone: each other follower probes only after
// ProbeAfter plus its turn (TurnStep a place; the unnamed after every named one), so a
// crash does not set every follower of a large cluster probing at once.
func TestWatch_OthersProbeInTheirTurn(t *testing.T) {
	const after = 300 * time.Millisecond
	t0 := time.Now()
	next := []string{"a", "b", "c"}
	for _, c := range []struct {
		self string
		need time.Duration
	}{{"a", after}, {"b", after + TurnStep}, {"c", after + 2*TurnStep}, {"z", after + 3*TurnStep}} {
		w := &watch{self: c.self}
		w.observe(Beat{Epoch: 3, Identity: "l", Seq: 1, Answers: true, Successors: next}, t0, 7)
		if d := w.untilDue(t0, time.Hour, after, -1); d != c.need {
			t.Errorf("%s: first check due in %v, want %v", c.self, d, c.need)
		}
		if _, _, ok := w.probeDue(t0.Add(c.need-time.Millisecond), true, 7, after, -1); ok {
			t.Errorf("%s probed after %v of silence, before its turn (%v)", c.self, c.need-time.Millisecond, c.need)
		}
		if _, first, ok := w.probeDue(t0.Add(c.need), true, 7, after, -1); !ok || !first {
			t.Errorf("%s did not probe after %v of silence (its turn)", c.self, c.need)
		}
	}
}

func TestConfig_ProbeSettings(t *testing.T) {
	base := testConfig("probecfg", "a")
	base.Heartbeats, base.Prober = (*port)(nil), nilProber{}
	c := base.withDefaults()
	if err := c.Validate(); err != nil {
		t.Fatalf("defaults: %v", err)
	}
	if c.ProbeAfter != c.HeartbeatInterval*6/5 || c.ProbeConfirm != 100*time.Millisecond || c.WatchEvery != 50*time.Millisecond {
		t.Errorf("defaults ProbeAfter %v, ProbeConfirm %v, WatchEvery %v", c.ProbeAfter, c.ProbeConfirm, c.WatchEvery)
	}
	for _, tc := range []struct {
		edit func(*Config)
		want string
	}{
		{func(c *Config) { c.ProbeAfter = c.HeartbeatInterval }, "ProbeAfter"},
		{func(c *Config) { c.ProbeAfter = c.SuspicionTimeout }, "ProbeAfter"},
		{func(c *Config) { c.ProbeConfirm = 5 * time.Millisecond }, "ProbeConfirm"},
		{func(c *Config) { c.ProbeConfirm = c.SuspicionTimeout }, "ProbeConfirm"},
		{func(c *Config) { c.WatchEvery = time.Millisecond }, "WatchEvery"},
	} {
		c := base.withDefaults()
		tc.edit(&c)
		if err := c.Validate(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Validate = %v, want an error about %s", err, tc.want)
		}
	}
}

// nilProber is a Prober for configuration checks.
type nilProber struct{}

func (nilProber) Answer(Term) (func(), error)         { return func() {}, nil }
func (nilProber) Probe(context.Context, uint64) error { return ErrNoResponders }
func (nilProber) Session() uint64                     { return 0 }

// gatedProber finds no responders on every probe, each after gate is closed.
type gatedProber struct {
	nilProber
	gate chan struct{}
}

func (g gatedProber) Probe(ctx context.Context, _ uint64) error {
	select {
	case <-g.gate:
		return ErrNoResponders
	case <-ctx.Done():
		return ctx.Err()
	}
}

// The confirmation runs on a goroutine of its own: one at a time, its verdict sent on a
// channel, and a stopped one (the suspicion got there first) leaves no verdict behind.
func TestProber_VerdictAndStop(t *testing.T) {
	gate := make(chan struct{})
	cfg := testConfig("prober", "me")
	cfg.Heartbeats, cfg.Prober, cfg.ProbeConfirm = (&hub{}).port(), gatedProber{gate: gate}, 10*time.Millisecond
	e, err := New(nilAPI{}, cfg)
	if err != nil {
		t.Fatal(err)
	}
	e.watch.observe(Beat{Epoch: 4, Identity: "l", Seq: 1, Answers: true}, time.Now(), 0)
	s := e.watch.current()
	ctx := context.Background()

	e.startProbe(ctx, s, true)
	if !e.prb.running() {
		t.Fatal("no confirmation in flight after startProbe")
	}
	e.startProbe(ctx, s, false) // a second start while one runs does nothing
	e.stopProbe()
	if e.prb.running() || len(e.prb.verdict) != 0 {
		t.Fatalf("after stopProbe: running %v, %d verdicts; want neither", e.prb.running(), len(e.prb.verdict))
	}

	close(gate)
	e.startProbe(ctx, s, false)
	select {
	case v := <-e.prb.verdict:
		if v.epoch != 4 || v.leader != "l" {
			t.Fatalf("verdict %+v, want epoch 4 of l", v)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no verdict from a confirmation that found no responders")
	}
	if got := e.Stats().Probes; got < probeCount {
		t.Errorf("%d probes, want at least %d", got, probeCount)
	}
}

// A silence probe that runs out its time unanswered is remembered for that silence, so the
// lease check does not probe once more (a paused or cut-off leader's takeover lost a second
// probe timeout, 250 ms, to it); a beat starts a new silence, and an answer in the silence
// counts as alive.
func TestWatch_UnansweredSilence(t *testing.T) {
	cfg := testConfig("prober", "me")
	cfg.Heartbeats, cfg.Prober = (&hub{}).port(), gatedProber{gate: make(chan struct{})} // never answers
	e, err := New(nilAPI{}, cfg)
	if err != nil {
		t.Fatal(err)
	}
	e.watch.observe(Beat{Epoch: 4, Identity: "l", Seq: 1, Answers: true}, time.Now(), 0)
	s := e.watch.current()
	if e.watch.unanswered(s) {
		t.Fatal("unanswered before any probe")
	}
	watching := s
	watching.watching = true
	if e.confirmGone(context.Background(), watching) || e.watch.unanswered(s) {
		t.Fatal("a watch probe's short timeout taken as unanswered (it proves nothing)")
	}
	if e.confirmGone(context.Background(), s) {
		t.Fatal("a probe that timed out confirmed the term gone")
	}
	if !e.watch.unanswered(s) {
		t.Fatal("a silence probe that ran out its timeout not remembered")
	}
	ctx, cancel := context.WithCancel(context.Background())
	e.watch.observe(Beat{Epoch: 4, Identity: "l", Seq: 2, Answers: true}, time.Now(), 0)
	s2 := e.watch.current()
	if e.watch.unanswered(s2) || e.watch.unanswered(s) {
		t.Fatal("a beat did not start a new silence")
	}
	cancel()
	if e.confirmGone(ctx, s2); e.watch.unanswered(s2) {
		t.Fatal("a probe cut short by its caller taken as unanswered")
	}
	e.watch.probeOutcome(s2, false, time.Now())
	e.watch.probeOutcome(s2, true, time.Now())
	if e.watch.unanswered(s2) {
		t.Fatal("a silence with an answered probe taken as unanswered")
	}
}

// nilAPI is a BlobAPI for tests that never reach storage.
type nilAPI struct{ BlobAPI }

// A renewal in flight or failing for RenewStall stalls the term; a success ends the stall.
func TestGuard_Stalled(t *testing.T) {
	g := &guard{e: &Elector{}, window: time.Minute, cancel: func(error) {}, lostCh: make(chan struct{})}
	t0 := time.Now()
	g.start(t0)
	defer g.finish()
	if _, ok := g.stalled(t0.Add(time.Hour)); ok {
		t.Fatal("stalled before any renewal was sent")
	}
	g.renewing(t0)
	if _, ok := g.stalled(t0.Add(RenewStall - time.Millisecond)); ok {
		t.Error("stalled before RenewStall")
	}
	g.renewing(t0.Add(RenewStall)) // a retry does not restart the stall
	if d, ok := g.stalled(t0.Add(RenewStall)); !ok || d != RenewStall {
		t.Errorf("stalled = %v, %v after RenewStall; want true, %v", d, ok, RenewStall)
	}
	if !g.extend(t0.Add(RenewStall)) {
		t.Fatal("extend refused")
	}
	if _, ok := g.stalled(t0.Add(time.Hour)); ok {
		t.Error("still stalled after a successful renewal")
	}
}

// A renewal that succeeded slowly (storage under load) raises the stall to twice its time, up to
// MaxRenewStall, and lets the next renewal take four times as long; a minute later both are back.
func TestGuard_SlowRenewalsRaiseTheStall(t *testing.T) {
	g := &guard{e: &Elector{}, window: time.Minute, cancel: func(error) {}, lostCh: make(chan struct{})}
	g.start(time.Now())
	defer g.finish()
	if got := g.tryFor(time.Now(), time.Second, 4*time.Second); got != time.Second {
		t.Errorf("tryFor before any renewal = %v, want 1s", got)
	}
	sent := time.Now().Add(-900 * time.Millisecond)
	g.renewing(sent)
	if !g.extend(sent) { // took about 900ms
		t.Fatal("extend refused")
	}
	t0 := time.Now()
	g.renewing(t0)
	if _, ok := g.stalled(t0.Add(1500 * time.Millisecond)); ok {
		t.Error("stalled at 1.5s after a 0.9s renewal")
	}
	if _, ok := g.stalled(t0.Add(1900 * time.Millisecond)); !ok {
		t.Error("not stalled at 1.9s after a 0.9s renewal")
	}
	if got := g.tryFor(t0, time.Second, 4*time.Second); got < 3500*time.Millisecond || got > 4*time.Second {
		t.Errorf("tryFor after a 0.9s renewal = %v, want about 3.6s", got)
	}
	later := t0.Add(stallMemory + time.Second)
	if _, ok := g.stalled(later); !ok || g.tryFor(later, time.Second, 4*time.Second) != time.Second {
		t.Error("a slow renewal still counted after stallMemory")
	}
	sent = time.Now().Add(-10 * time.Second)
	if !g.extend(sent) {
		t.Fatal("extend refused")
	}
	g.renewing(time.Now())
	if _, ok := g.stalled(time.Now().Add(MaxRenewStall)); !ok {
		t.Error("not stalled at MaxRenewStall")
	}
}

// flakyProber times out its first probes (a probe that reached the leader's connection as it
// died is never answered; on a loaded machine the watcher's 50 ms probes time out), then finds
// no responders.
type flakyProber struct {
	nilProber
	timeouts *atomic.Int32
}

func (f flakyProber) Probe(ctx context.Context, _ uint64) error {
	if f.timeouts.Add(-1) >= 0 {
		return context.DeadlineExceeded
	}
	return ErrNoResponders
}

// Every confirmation is announced: the watcher whose watch probes of a crash all timed out
// confirms it by its silence probe, and that probe emits EventProbing. (Its watch probes had
// marked the silence as probed, so the silence probe counted as a repeat and emitted nothing: a
// takeover by "no responders" with no EventProbing, seen under load.) One event a silence.
func TestProber_WatcherSilenceProbeAnnounced(t *testing.T) {
	const after, every = 300 * time.Millisecond, 50 * time.Millisecond
	var rec events
	timeouts := &atomic.Int32{}
	timeouts.Store(1)
	cfg := testConfig("prober", "me")
	cfg.Heartbeats, cfg.Prober, cfg.ProbeConfirm = (&hub{}).port(), flakyProber{timeouts: timeouts}, 10*time.Millisecond
	cfg.ProbeAfter, cfg.WatchEvery, cfg.OnEvent = after, every, rec.add
	e, err := New(nilAPI{}, cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	t0 := time.Now()
	e.watch.observe(Beat{Epoch: 4, Identity: "l", Seq: 1, Answers: true, Successors: []string{"me"}}, t0, 0)
	run := func(now time.Time, watching bool) {
		t.Helper()
		s, first, ok := e.watch.probeDue(now, true, 0, after, every)
		if !ok || s.watching != watching {
			t.Fatalf("probeDue at %v = %+v, %v; want watching %v", now.Sub(t0), s, ok, watching)
		}
		e.startProbe(ctx, s, first)
		testenv.Eventually(t, 10*time.Second, time.Millisecond, func() bool { return !e.prb.running() }, "the confirmation did not end")
	}
	run(t0.Add(every), true) // times out: unknown, nothing to announce
	if got := rec.of(EventProbing); len(got) != 0 {
		t.Fatalf("a watch probe that timed out announced %v", got)
	}
	run(t0.Add(after), false)
	select {
	case <-e.prb.verdict:
	default:
		t.Fatal("the silence probe found no responders but gave no verdict")
	}
	if got := rec.of(EventProbing); len(got) != 1 || got[0].Term.Epoch != 4 {
		t.Fatalf("EventProbing %v; want one for epoch 4 before the verdict", got)
	}

	// A watch probe that announced the silence and then failed: the silence probe that confirms
	// it announces nothing more.
	e.watch.observe(Beat{Epoch: 4, Identity: "l", Seq: 2, Answers: true, Successors: []string{"me"}}, t0.Add(2*after), 0)
	flaky := &failSecond{}
	e.cfg.Prober = flaky
	run(t0.Add(2*after+every), true)
	if got := rec.of(EventProbing); len(got) != 2 {
		t.Fatalf("%d EventProbing after a watch probe found no responders; want 2", len(got))
	}
	run(t0.Add(3*after), false)
	if got := rec.of(EventProbing); len(got) != 2 {
		t.Errorf("%d EventProbing; want the silence announced once", len(got))
	}
}

// failSecond finds no responders but on its second probe, which times out.
type failSecond struct {
	nilProber
	n atomic.Int32
}

func (f *failSecond) Probe(context.Context, uint64) error {
	if f.n.Add(1) == 2 {
		return context.DeadlineExceeded
	}
	return ErrNoResponders
}
