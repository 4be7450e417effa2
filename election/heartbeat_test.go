package election

import (
	"context"
	"errors"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mapagg/mapagg/internal/harness/testenv"
)

// hbCluster is a cluster whose electors share an in-memory heartbeat hub, each recording its
// events.
type hbCluster struct {
	*cluster
	hub   *hub
	ports []*port
	evs   []*events
}

const (
	testBeat      = 100 * time.Millisecond
	testSuspicion = 500 * time.Millisecond
)

// newHBCluster adds n electors over api(i) (nil: the plain Azurite adapter) with heartbeats.
func newHBCluster(t *testing.T, prefix string, n int, api func(i int) BlobAPI, edit func(*Config)) *hbCluster {
	c := &hbCluster{cluster: newCluster(t, testenv.Name(t, prefix)), hub: &hub{}}
	for i := range n {
		p := c.hub.port()
		r := &events{}
		c.ports, c.evs = append(c.ports, p), append(c.evs, r)
		var a BlobAPI
		if api != nil {
			a = api(i)
		}
		c.add(a, func(cfg *Config) {
			cfg.Heartbeats, cfg.HeartbeatInterval, cfg.SuspicionTimeout = p, testBeat, testSuspicion
			cfg.OnEvent = r.add
			if edit != nil {
				edit(cfg)
			}
		})
	}
	c.pokeOthersOnRelease()
	return c
}

// followersHeard waits until every node but leader has heard a beat of epoch.
func (c *hbCluster) followersHeard(leader int, epoch uint64) {
	c.t.Helper()
	testenv.Eventually(c.t, 5*time.Second, 5*time.Millisecond, func() bool {
		for _, n := range c.nodes {
			if n.i == leader {
				continue
			}
			n.e.watch.mu.Lock()
			ok := n.e.watch.heard && n.e.watch.epoch == epoch
			n.e.watch.mu.Unlock()
			if !ok {
				return false
			}
		}
		return true
	}, "followers did not hear epoch %d", epoch)
}

func (c *hbCluster) totalStats() (s Stats) {
	for _, n := range c.nodes {
		x := n.e.Stats()
		s.Suspicions += x.Suspicions
		s.Breaks += x.Breaks
		s.Terms += x.Terms
	}
	return s
}

// A crashed leader (silent, storage calls hang, never releases) is replaced in about
// SuspicionTimeout plus a few round trips, not LeaseDuration; the followers report suspected and
// broke_lease for its epoch; exactly one of the three suspicious followers becomes leader; the
// crashed term's lease ID can no longer write.
func TestElector_CrashedLeaderReplacedAfterSuspicion(t *testing.T) {
	t.Parallel()
	crashed := make([]*atomic.Bool, 4)
	c := newHBCluster(t, "hbcrash", 4, crashable(t, crashed), nil)
	c.startAll()
	first := c.waitTerms(1, 10*time.Second)[0]
	c.followersHeard(first.node, first.term.Epoch)
	defer crashed[first.node].Store(false)

	crashAt := time.Now()
	crashed[first.node].Store(true)
	c.ports[first.node].cut.Store(true) // a dead process neither sends nor hears
	evs := c.waitTerms(2, 5*time.Second)
	next := evs[1]
	took := next.start.Sub(crashAt)
	t.Logf("crash takeover after %v (suspicion %v, lease %v)", took, testSuspicion, c.nodes[0].e.Config().LeaseDuration)
	if next.node == first.node || next.term.Epoch != first.term.Epoch+1 {
		t.Fatalf("next term %+v, want another node in epoch %d", next, first.term.Epoch+1)
	}
	// The bound is the behaviour: silence noticed after SuspicionTimeout (+ a poll tick), then a
	// read, a break, an acquire, a read and a stamp.
	if bound := testSuspicion + testBeat + time.Second; took > bound {
		t.Errorf("takeover took %v, want <= %v", took, bound)
	}
	time.Sleep(2 * testSuspicion) // the losers must not break the new term
	if got := len(c.snapshot()); got != 2 {
		t.Errorf("%d terms, want 2: a second break deposed the new leader", got)
	}
	var suspected, broke int
	for i, r := range c.evs {
		if i == first.node {
			continue
		}
		for _, ev := range r.of(EventSuspected) {
			suspected++
			if ev.Term.Epoch != first.term.Epoch || ev.Term.Identity != first.term.Identity {
				t.Errorf("node %d suspected %+v, want epoch %d of %s", i, ev.Term, first.term.Epoch, first.term.Identity)
			}
		}
		for _, ev := range r.of(EventBrokeLease) {
			broke++
			if ev.Term.Epoch != first.term.Epoch || ev.Term.Identity != first.term.Identity {
				t.Errorf("node %d broke %+v, want epoch %d of %s", i, ev.Term, first.term.Epoch, first.term.Identity)
			}
		}
	}
	t.Logf("%d suspicions, %d breaks among 3 followers", suspected, broke)
	if suspected == 0 || broke == 0 {
		t.Errorf("%d suspected and %d broke_lease events, want both", suspected, broke)
	}
	err := NewAzureAPI(testClient(t)).SetMetadata(context.Background(), c.container, "lease", first.term.LeaseID, map[string]string{"x": "1"})
	if !errors.Is(err, ErrLeaseNotHeld) {
		t.Errorf("write with the crashed leader's lease ID: %v, want ErrLeaseNotHeld", err)
	}
	crashed[first.node].Store(false)
	testenv.Eventually(t, 20*time.Second, 10*time.Millisecond, func() bool { return !c.snapshot()[0].end.IsZero() },
		"crashed leader's context never ended")
	if cause := c.snapshot()[0].cause; !errors.Is(cause, ErrLeadershipLost) {
		t.Errorf("crashed leader's cause %v, want ErrLeadershipLost", cause)
	}
}

// A leader alive on storage whose heartbeats stop reaching the others is deposed by a break,
// and learns it at once from the new leader's heartbeats (before its next renew, 5s away):
// its context ends with a definitive cause and its lease ID can no longer write.
func TestElector_DeposedByBreakLearnsFromNewerHeartbeat(t *testing.T) {
	t.Parallel()
	c := newHBCluster(t, "hbdepose", 3, nil, func(cfg *Config) { cfg.RenewInterval = 5 * time.Second })
	c.startAll()
	first := c.waitTerms(1, 10*time.Second)[0]
	c.followersHeard(first.node, first.term.Epoch)
	time.Sleep(200 * time.Millisecond) // out of step with the renewals
	c.ports[first.node].mute.Store(true)
	evs := c.waitTerms(2, 5*time.Second)
	testenv.Eventually(t, 2*time.Second, 5*time.Millisecond, func() bool { return !c.snapshot()[0].end.IsZero() },
		"deposed leader's context did not end")
	old := c.snapshot()[0]
	t.Logf("deposed leader's context ended %v after the new term began", old.end.Sub(evs[1].start))
	if !errors.Is(old.cause, ErrLeadershipLost) || !errors.Is(old.cause, ErrLeaseNotHeld) || !IsDefinitive(old.cause) {
		t.Errorf("cause %v, want a definitive ErrLeadershipLost+ErrLeaseNotHeld", old.cause)
	}
	if d := old.end.Sub(evs[1].start); d > time.Second {
		t.Errorf("deposed leader kept its context %v after the new term began", d)
	}
	err := NewAzureAPI(testClient(t)).SetMetadata(context.Background(), c.container, "lease", first.term.LeaseID, termMetadata(first.term))
	if !errors.Is(err, ErrLeaseNotHeld) {
		t.Errorf("write with the deposed lease ID: %v, want ErrLeaseNotHeld", err)
	}
	if got := c.nodes[first.node].e.Stats(); got.Losses != 1 || got.Releases != 0 {
		t.Errorf("deposed stats %+v, want one loss and no release", got)
	}
	lost := c.evs[first.node].of(EventLost)
	if len(lost) != 1 || !errors.Is(lost[0].Err, ErrLeaseNotHeld) {
		t.Errorf("deposed leader's lost events %+v", lost)
	}
}

// Followers cut off from the transport never break a lease, however long the leader is silent;
// when everyone is cut off (a NATS outage) and comes back, the leader stays.
func TestElector_CutOffFollowersNeverBreak(t *testing.T) {
	t.Parallel()
	c := newHBCluster(t, "hbcut", 3, nil, nil)
	c.startAll()
	first := c.waitTerms(1, 10*time.Second)[0]
	c.followersHeard(first.node, first.term.Epoch)

	for _, p := range c.ports { // the outage: nobody is connected
		p.cut.Store(true)
	}
	time.Sleep(6 * testSuspicion)
	for _, p := range c.ports {
		p.cut.Store(false)
	}
	time.Sleep(3 * testSuspicion)
	// Only the followers cut off, the leader's beats lost.
	for i, p := range c.ports {
		p.cut.Store(i != first.node)
	}
	c.ports[first.node].mute.Store(true)
	time.Sleep(6 * testSuspicion)

	if n := len(c.snapshot()); n != 1 {
		t.Errorf("%d terms, want the first leader throughout", n)
	}
	if s := c.totalStats(); s.Suspicions != 0 || s.Breaks != 0 {
		t.Errorf("stats %+v: a cut-off follower suspected the leader", s)
	}
}

// A follower that has heard no leader since it started never breaks a lease (the leader's beats
// never arrive, e.g. a wrong NATS prefix), while the same followers break it once they did hear.
func TestElector_NeverHeardALeaderNeverBreaks(t *testing.T) {
	t.Parallel()
	c := newHBCluster(t, "hbnever", 3, nil, nil)
	for _, p := range c.ports {
		p.mute.Store(true)
	}
	c.startAll()
	first := c.waitTerms(1, 10*time.Second)[0]
	time.Sleep(6 * testSuspicion)
	if n := len(c.snapshot()); n != 1 {
		t.Errorf("%d terms, want 1", n)
	}
	if s := c.totalStats(); s.Suspicions != 0 || s.Breaks != 0 {
		t.Errorf("stats %+v: a follower that never heard a leader suspected one", s)
	}
	_ = first
}

// A slow leader (beats delayed and 2 of 3 dropped, gaps still below SuspicionTimeout) is not
// deposed.
func TestElector_LateHeartbeatsDoNotDepose(t *testing.T) {
	t.Parallel()
	c := newHBCluster(t, "hbslow", 3, nil, nil)
	c.startAll()
	first := c.waitTerms(1, 10*time.Second)[0]
	c.followersHeard(first.node, first.term.Epoch)
	p := c.ports[first.node]
	p.delay.Store(int64(testSuspicion / 2))
	p.every.Store(3) // two beats in three lost: gaps of 3 intervals (300ms) behind a 250ms delay
	time.Sleep(10 * testSuspicion)
	p.every.Store(0)
	if n := len(c.snapshot()); n != 1 {
		t.Errorf("%d terms, want the slow leader throughout", n)
	}
	if s := c.totalStats(); s.Breaks != 0 {
		t.Errorf("stats %+v: a late leader was deposed", s)
	}
}

// A follower that hears a live leader sleeps from beat to beat: each beat moves its check to
// the term's next deadline, so it looks at the term (asking its transport's health) only when a
// beat is late, not once an interval; and its campaign loop does not look again every retry
// interval (200ms here) while the term lives.
func TestElector_FollowerSleepsWhileBeatsArrive(t *testing.T) {
	t.Parallel()
	c := newHBCluster(t, "hbsleep", 2, nil, nil)
	c.startAll()
	first := c.waitTerms(1, 10*time.Second)[0]
	c.followersHeard(first.node, first.term.Epoch)
	f := c.ports[1-first.node]
	sent, asked := c.ports[first.node].sent.Load(), f.asked.Load()
	time.Sleep(2 * time.Second)
	beats, looks := c.ports[first.node].sent.Load()-sent, f.asked.Load()-asked
	t.Logf("%d beats, %d looks", beats, looks)
	if beats < 10 {
		t.Fatalf("only %d beats in 2s at %v: the leader did not beat", beats, testBeat)
	}
	if looks > beats/3 {
		t.Errorf("the follower looked %d times during %d beats of a live leader, want at most %d", looks, beats, beats/3)
	}
	if n := len(c.snapshot()); n != 1 {
		t.Errorf("%d terms, want one", n)
	}
}

// With a transport that reaches the named successors alone (SuccessorHeartbeats), a leader sends
// every other beat to them only: they hear every beat, the other followers half, and nobody
// suspects the live leader. Only the named followers subscribe to the successors' beats. After a
// crash the first successor takes over, with one break.
func TestElector_UnnamedFollowersHearEveryOtherBeat(t *testing.T) {
	t.Parallel()
	ids := []string{"node-0", "node-1", "node-2", "node-3", "node-4"}
	crashed := make([]*atomic.Bool, len(ids))
	c := newHBCluster(t, "hbtier", len(ids), crashable(t, crashed), func(cfg *Config) {
		cfg.Heartbeats = tiered{cfg.Heartbeats.(*port)}
		cfg.Successors = func() []string { return ids }
	})
	c.startAll()
	first := c.waitTerms(1, 10*time.Second)[0]
	c.followersHeard(first.node, first.term.Epoch)
	defer crashed[first.node].Store(false)
	var named []int // the followers the leader names, in its order
	for i := range ids {
		if i != first.node && len(named) < MaxSuccessors {
			named = append(named, i)
		}
	}
	isNamed := func(i int) bool { return slices.Contains(named, i) }
	testenv.Eventually(t, 5*time.Second, 5*time.Millisecond, func() bool {
		for i := range ids {
			if i != first.node && c.ports[i].namedNow() != isNamed(i) {
				return false
			}
		}
		return true
	}, "the named followers (%v) do not alone hear the successors' beats", named)

	lp := c.ports[first.node]
	sent, heard := lp.sent.Load(), make([]uint64, len(ids))
	for i := range ids {
		heard[i] = c.ports[i].heard.Load()
	}
	time.Sleep(20 * testBeat)
	sent = lp.sent.Load() - sent
	for i := range ids {
		if i == first.node {
			continue
		}
		got := c.ports[i].heard.Load() - heard[i]
		t.Logf("node %d (named %v): heard %d of %d beats", i, isNamed(i), got, sent)
		if isNamed(i) && got+2 < sent {
			t.Errorf("named node %d heard %d of %d beats, want every one", i, got, sent)
		}
		if !isNamed(i) && (got*3 < sent || got*3 > 2*sent) {
			t.Errorf("node %d, not named, heard %d of %d beats, want about half", i, got, sent)
		}
	}
	if s := c.totalStats(); s.Suspicions != 0 || len(c.snapshot()) != 1 {
		t.Fatalf("stats %+v, %d terms: a live leader was suspected", s, len(c.snapshot()))
	}

	crashed[first.node].Store(true)
	lp.cut.Store(true)
	next := c.waitTerms(2, 5*time.Second)[1]
	if next.node != named[0] {
		t.Errorf("node %d took over, want the first successor %d", next.node, named[0])
	}
	time.Sleep(2 * testSuspicion)
	if s := c.totalStats(); s.Breaks != 1 || len(c.snapshot()) != 2 {
		t.Errorf("stats %+v, %d terms: want one break and two terms", s, len(c.snapshot()))
	}
}

// Graceful stop reports elected, stepped_down, released in that order.
func TestElector_EventsOnGracefulStop(t *testing.T) {
	t.Parallel()
	c := newHBCluster(t, "hbevents", 1, nil, nil)
	n := c.nodes[0]
	c.start(n, nil)
	first := c.waitTerms(1, 10*time.Second)[0]
	n.stop(t)
	got := c.evs[0].kinds()
	want := []EventKind{EventElected, EventSteppedDown, EventReleased}
	if len(got) != len(want) {
		t.Fatalf("events %v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("events %v, want %v", got, want)
		}
	}
	for _, ev := range c.evs[0].evs {
		if ev.Term.Epoch != first.term.Epoch || ev.Term.LeaseID != "" || ev.At.IsZero() {
			t.Errorf("event %+v: want epoch %d, no lease ID, a time", ev, first.term.Epoch)
		}
	}
	if !errors.Is(c.evs[0].of(EventSteppedDown)[0].Err, ErrSteppedDown) {
		t.Errorf("stepped_down err %v, want ErrSteppedDown", c.evs[0].of(EventSteppedDown)[0].Err)
	}
	if p := c.ports[0].sent.Load(); p == 0 {
		t.Error("the leader published no heartbeat")
	}
}

// The leader's heartbeats stop the moment its leader context ends, and carry its term.
func TestElector_HeartbeatsStopWithLeaderContext(t *testing.T) {
	t.Parallel()
	c := newHBCluster(t, "hbstop", 1, nil, nil)
	var beats []Beat
	var mu = &c.mu
	stopSub, _ := c.hub.port().Subscribe(func(b Beat) { mu.Lock(); beats = append(beats, b); mu.Unlock() })
	defer stopSub()
	gate := make(chan struct{})
	var ended atomic.Pointer[time.Time]
	c.start(c.nodes[0], func(ctx context.Context) error {
		<-ctx.Done()
		now := time.Now()
		ended.Store(&now)
		<-gate // a lead that takes long to finish: the lease is still held, beats must not flow
		return nil
	})
	testenv.Eventually(t, 10*time.Second, 5*time.Millisecond, c.nodes[0].e.IsLeader, "never led")
	time.Sleep(5 * testBeat)
	c.nodes[0].cancel()
	testenv.Eventually(t, time.Second, time.Millisecond, func() bool { return ended.Load() != nil }, "lead not told")
	mu.Lock()
	atEnd := len(beats)
	mu.Unlock()
	time.Sleep(3 * testBeat)
	close(gate)
	mu.Lock()
	defer mu.Unlock()
	if atEnd < 3 {
		t.Errorf("%d beats in 5 intervals", atEnd)
	}
	if len(beats) > atEnd+1 { // one may have been in flight
		t.Errorf("%d beats after the leader context ended", len(beats)-atEnd)
	}
	for i, b := range beats {
		if b.Epoch != 1 || b.Identity != "node-0" || b.Seq != uint64(i+1) || b.Sent.IsZero() {
			t.Errorf("beat %d = %+v", i, b)
		}
	}
}
