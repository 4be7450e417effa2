package election

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mapagg/mapagg/internal/harness/testenv"
)

// The lease blob's container deleted under a live leader (a wiped storage account): the leader
// creates the blob again, holds it with its term's lease ID and stamps its own epoch. Leadership
// stays put (no term ends), followers keep following, and the next term's epoch is above it.
func TestElector_LeaseBlobLostKeepsTheTerm(t *testing.T) {
	c := newHBCluster(t, "hblost", 3, nil, nil)
	c.startAll()
	first := c.waitTerms(1, 10*time.Second)[0]
	c.followersHeard(first.node, first.term.Epoch)

	ctx := context.Background()
	if _, err := testClient(t).DeleteContainer(ctx, c.container, nil); err != nil {
		t.Fatal(err)
	}
	leader := c.nodes[first.node]
	testenv.Eventually(t, 10*time.Second, 10*time.Millisecond, func() bool { return leader.e.Stats().LeaseRebuilds == 1 },
		"the leader did not rebuild its lease blob")
	time.Sleep(2 * testSuspicion) // a follower that misread the outage would have broken the lease by now
	if evs := c.snapshot(); len(evs) != 1 || !evs[0].end.IsZero() {
		t.Fatalf("terms %+v: want the first term alone, still running", evs)
	}
	if got := c.evs[first.node].of(EventLeaseRebuilt); len(got) != 1 || got[0].Term.Epoch != first.term.Epoch || got[0].Err == nil {
		t.Fatalf("lease_rebuilt events %+v", got)
	}
	p, err := leader.api.GetProperties(ctx, c.container, "lease")
	if err != nil {
		t.Fatal(err)
	}
	if e, _ := parseEpoch(p.Metadata); e != first.term.Epoch || !p.Held() {
		t.Fatalf("rebuilt blob: epoch %d held %v, want epoch %d held", e, p.Held(), first.term.Epoch)
	}
	// The lease goes on being renewed, and the next term is above the kept one.
	leader.stop(t)
	next := c.waitTerms(2, 10*time.Second)[1]
	if next.term.Epoch <= first.term.Epoch {
		t.Fatalf("next epoch %d, not above %d", next.term.Epoch, first.term.Epoch)
	}
}

// A follower that heard beats of epoch N never starts a term at or below N, even when the lease
// blob was recreated with no epoch at all (storage lost with every stamp).
func TestElector_EpochNeverBelowBeatsHeard(t *testing.T) {
	c := newHBCluster(t, "hbfloor", 2, nil, nil)
	c.startAll()
	first := c.waitTerms(1, 10*time.Second)[0]
	c.followersHeard(first.node, first.term.Epoch)
	follower := c.nodes[1-first.node]
	// Beats of a term far ahead reach the follower (a member that saw more than the blob keeps).
	c.ports[first.node].Publish(context.Background(), Beat{Epoch: first.term.Epoch + 40, Identity: "elsewhere", Seq: 1})
	if h := follower.e.heard.Load(); h != first.term.Epoch+40 {
		t.Fatalf("heard %d after a beat of epoch %d", h, first.term.Epoch+40)
	}
	ctx := context.Background()
	c.nodes[first.node].stop(t)
	if _, err := testClient(t).DeleteContainer(ctx, c.container, nil); err != nil {
		t.Fatal(err)
	}
	next := c.waitTerms(2, 20*time.Second)[1]
	if next.term.Epoch <= first.term.Epoch+40 {
		t.Fatalf("epoch after storage loss %d, want above %d", next.term.Epoch, first.term.Epoch+40)
	}
}

// Every worker killed at once: the first one started again finds the lease held by a term it
// never heard, confirms it gone ("no responders"), breaks the lease fenced on its stamp and
// leads well before the dead lease (15 s) runs out. (Without a prober silence alone breaks
// nothing before a beat was heard: TestElector_NeverHeardALeaderNeverBreaks.)
func TestElector_ColdStartBreaksDeadLease(t *testing.T) {
	crashed := make([]*atomic.Bool, 2)
	pr := &deadProber{}
	c := newHBCluster(t, "hbcold", 2, crashable(t, crashed), func(cfg *Config) { cfg.Prober = pr })
	dead := c.nodes[0]
	c.start(dead, nil)
	first := c.waitTerms(1, 10*time.Second)[0]
	// The whole cluster dies: the leader's beats, answers and storage calls stop; its lease stays.
	c.ports[0].cut.Store(true)
	crashed[0].Store(true)
	defer crashed[0].Store(false)
	pr.gone.Store(true)

	back := time.Now()
	c.start(c.nodes[1], nil)
	next := c.waitTerms(2, 20*time.Second)[1]
	took := next.start.Sub(back)
	t.Logf("first worker back leads after %v (lease %v)", took, dead.e.Config().LeaseDuration)
	if took > 2*time.Second {
		t.Errorf("took %v to lead after a cold start, want <= 2s", took)
	}
	if next.term.Epoch != first.term.Epoch+1 {
		t.Errorf("epoch %d, want %d", next.term.Epoch, first.term.Epoch+1)
	}
	if got := c.evs[1].of(EventColdStart); len(got) != 1 || got[0].Term.Epoch != first.term.Epoch {
		t.Errorf("cold_start events %+v", got)
	}
	if c.nodes[1].e.Stats().Breaks != 1 {
		t.Errorf("breaks %d, want 1", c.nodes[1].e.Stats().Breaks)
	}
}

// A live leader is left alone by a process that starts beside it: its beats refresh the term the
// newcomer seeded from the blob.
func TestElector_ColdStartLeavesLiveLeader(t *testing.T) {
	c := newHBCluster(t, "hbwarm", 2, nil, func(cfg *Config) { cfg.Prober = &deadProber{} })
	c.start(c.nodes[0], nil)
	c.waitTerms(1, 10*time.Second)
	c.start(c.nodes[1], nil)
	time.Sleep(4 * testSuspicion)
	if evs := c.snapshot(); len(evs) != 1 {
		t.Fatalf("%d terms, want 1: a newcomer deposed a live leader", len(evs))
	}
	if s := c.nodes[1].e.Stats(); s.Breaks != 0 {
		t.Fatalf("newcomer broke %d leases", s.Breaks)
	}
}

// deadProber answers probes while gone is false, and "no responders" after.
type deadProber struct{ gone atomic.Bool }

func (p *deadProber) Answer(Term) (func(), error) { return func() {}, nil }
func (p *deadProber) Probe(ctx context.Context, epoch uint64) error {
	if p.gone.Load() {
		return ErrNoResponders
	}
	return nil
}
func (p *deadProber) Session() uint64 { return 1 }
