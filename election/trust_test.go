package election

import (
	"errors"
	"testing"
	"time"

	"github.com/mapagg/mapagg/internal/harness/testenv"
)

// A beat of an epoch the lease blob does not record (forged past the transport, or replayed from
// a blob that went back) deposes nobody: the leader checks the blob and keeps its term, the
// followers adopt the blob's term and keep hearing its leader, and nothing is broken.
func TestElector_BeatOfUnrecordedEpochDeposesNobody(t *testing.T) {
	t.Parallel()
	c := newHBCluster(t, "hbforge", 3, nil, nil)
	forger := c.hub.port()
	c.startAll()
	first := c.waitTerms(1, 10*time.Second)[0]
	c.followersHeard(first.node, first.term.Epoch)

	b := Beat{Epoch: first.term.Epoch + 1000, Identity: "forger", Seq: 1, Sent: time.Now()}
	if err := forger.Publish(t.Context(), b); err != nil {
		t.Fatal(err)
	}
	leader := c.nodes[first.node].e
	testenv.Eventually(t, 5*time.Second, 5*time.Millisecond, func() bool { return leader.Stats().Unconfirmed == 1 },
		"the leader did not check the beat against the blob")
	time.Sleep(4 * testSuspicion)

	if n := len(c.snapshot()); n != 1 {
		t.Fatalf("%d terms, want the first leader throughout", n)
	}
	if s := c.totalStats(); s.Breaks != 0 {
		t.Errorf("stats %+v: a lease was broken", s)
	}
	// The followers watch the real term again: a crash of its leader is still taken over fast.
	c.followersHeard(first.node, first.term.Epoch)
	c.ports[first.node].mute.Store(true)
	evs := c.waitTerms(2, 5*time.Second)
	if evs[1].term.Epoch != first.term.Epoch+1 {
		t.Errorf("new term of epoch %d, want %d", evs[1].term.Epoch, first.term.Epoch+1)
	}
}

// A replayed beat (a Seq of the current term heard already) does not keep a silent leader's
// term alive.
func TestWatch_ReplayedBeatDoesNotRefresh(t *testing.T) {
	w := &watch{self: "me"}
	t0 := time.Now()
	w.observe(Beat{Epoch: 4, Identity: "l", Seq: 7}, t0, 0)
	w.observe(Beat{Epoch: 4, Identity: "l", Seq: 7}, t0.Add(time.Second), 0)
	w.observe(Beat{Epoch: 4, Identity: "l", Seq: 3}, t0.Add(time.Second), 0)
	if s, ok := w.poll(t0.Add(time.Second), true, time.Second); !ok || s.beats != 1 {
		t.Fatalf("poll = %+v, %v: want a suspicion after one accepted beat", s, ok)
	}
	w.observe(Beat{Epoch: 4, Identity: "l", Seq: 8}, t0.Add(time.Second), 0)
	if _, ok := w.poll(t0.Add(time.Second), true, time.Second); ok {
		t.Fatal("a new beat did not refresh the term")
	}
	w.observe(Beat{Epoch: 5, Identity: "m", Seq: 1}, t0.Add(time.Second), 0)
	if w.epoch != 5 || w.seq != 1 {
		t.Fatalf("watch %d/%d after a newer term's first beat", w.epoch, w.seq)
	}
	w.adopt(t0, 4, "l")
	w.observe(Beat{Epoch: 4, Identity: "l", Seq: 9}, t0.Add(2*time.Second), 0)
	if w.epoch != 4 || w.beats != 1 {
		t.Fatalf("after adopting the blob's term its beats must count: epoch %d beats %d", w.epoch, w.beats)
	}
}

// A follower cut off from the transport does not campaign, even when the lease is free; it
// campaigns again as soon as it is back.
func TestElector_CutOffFollowerDoesNotCampaign(t *testing.T) {
	t.Parallel()
	c := newHBCluster(t, "hbcutcamp", 2, nil, nil)
	c.startAll()
	first := c.waitTerms(1, 10*time.Second)[0]
	other := 1 - first.node
	c.followersHeard(first.node, first.term.Epoch)
	c.ports[other].cut.Store(true)
	testenv.Eventually(t, 5*time.Second, 5*time.Millisecond, func() bool { return c.nodes[other].e.Stats().CutOff == 1 },
		"the cut-off follower did not notice")
	c.nodes[first.node].stop(t)         // releases the lease and pokes the other
	time.Sleep(1500 * time.Millisecond) // several acquire intervals (200ms)
	if n := len(c.snapshot()); n != 1 {
		t.Fatalf("%d terms: the cut-off follower took the free lease", n)
	}
	c.ports[other].cut.Store(false)
	evs := c.waitTerms(2, 5*time.Second)
	if evs[1].node != other {
		t.Errorf("term 2 led by node %d, want %d", evs[1].node, other)
	}
}

// A process that Eligible refuses never campaigns, however free the lease; the winner's Stamp is
// in the lease blob for observers.
func TestElector_IneligibleNeverLeadsAndStampIsRead(t *testing.T) {
	t.Parallel()
	c := newCluster(t, testenv.Name(t, "eligible"))
	refused := errors.New("wrong cluster key")
	c.add(nil, func(cfg *Config) { cfg.Eligible = func() error { return refused } })
	c.add(nil, func(cfg *Config) { cfg.Stamp = map[string]string{"keyid": "abcd1234"} })
	c.start(c.nodes[0], nil)
	time.Sleep(time.Second) // five acquire intervals
	if n := len(c.snapshot()); n != 0 {
		t.Fatalf("%d terms won by an ineligible process", n)
	}
	c.start(c.nodes[1], nil)
	evs := c.waitTerms(1, 10*time.Second)
	if evs[0].node != 1 {
		t.Fatalf("term won by node %d", evs[0].node)
	}
	info, err := ReadLeader(t.Context(), testClient(t), c.container, "lease")
	if err != nil || info == nil || info.Stamp["keyid"] != "abcd1234" {
		t.Fatalf("ReadLeader = %+v, %v: want the stamp keyid=abcd1234", info, err)
	}
}

func TestConfig_Validate_Stamp(t *testing.T) {
	for _, k := range []string{"epoch", "Key", "1a", "a-b", ""} {
		cfg := DefaultConfig()
		cfg.Identity, cfg.Stamp = "x", map[string]string{k: "v"}
		if err := cfg.Validate(); !errors.Is(err, ErrInvalidConfig) {
			t.Errorf("Stamp key %q accepted", k)
		}
	}
}
