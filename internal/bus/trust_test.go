package bus_test

import (
	"context"
	"net/url"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/mapagg/mapagg/election"
	"github.com/mapagg/mapagg/internal/bus"
	"github.com/mapagg/mapagg/internal/harness/faultproxy"
	"github.com/mapagg/mapagg/internal/harness/testenv"
	"github.com/mapagg/mapagg/internal/harness/testkeys"
)

// A well-formed beat of a high epoch from a plain NATS client (no MAC), and one signed with
// another cluster's key, never reach the elector: both are counted, reported and dead-lettered.
func TestHeartbeats_RefuseUnauthenticated(t *testing.T) {
	u := testenv.NATS(t)
	var reported atomic.Int32
	cfg := bus.Config{Keys: testkeys.Keys(), OnRefused: func(source, _ string, _ error) {
		if source == bus.SourceControl {
			reported.Add(1)
		}
	}}
	member, err := bus.Connect(u, "member", cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer member.Close()
	if err := member.Ensure(context.Background()); err != nil {
		t.Fatal(err)
	}
	hb := member.Heartbeats()
	got := make(chan election.Beat, 4)
	stop, err := hb.Subscribe(func(b election.Beat) { got <- b })
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	if err := member.Conn().Flush(); err != nil {
		t.Fatal(err)
	}

	forged, err := bus.EncodeBeat(election.Beat{Epoch: 1 << 40, Identity: "forger", Seq: 1, Sent: time.Now()})
	if err != nil {
		t.Fatal(err)
	}
	plain, err := nats.Connect(u)
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	if err := plain.Publish("mapagg."+bus.CtlHeartbeat, forged); err != nil {
		t.Fatal(err)
	}
	other, err := bus.GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	ring, err := bus.NewKeyring(other)
	if err != nil {
		t.Fatal(err)
	}
	m := nats.NewMsg("mapagg." + bus.CtlHeartbeat)
	m.Data = forged
	m.Header.Set(bus.MACHeader, ring.Sign(m.Subject, "", forged))
	if err := plain.PublishMsg(m); err != nil {
		t.Fatal(err)
	}

	testenv.Eventually(t, 5*time.Second, time.Millisecond, func() bool { return hb.Unverified() == 2 && reported.Load() == 2 },
		"unverified beats not counted and reported")
	select {
	case b := <-got:
		t.Fatalf("an unauthenticated beat reached the elector: %+v", b)
	case <-time.After(100 * time.Millisecond):
	}
	js, err := jetstream.New(member.Conn())
	if err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 5*time.Second, 5*time.Millisecond, func() bool {
		s, err := js.Stream(context.Background(), "MAPAGG_DEAD")
		if err != nil {
			return false
		}
		info, err := s.Info(context.Background(), jetstream.WithSubjectFilter("mapagg.dead.control"))
		return err == nil && info.State.Subjects["mapagg.dead.control"] == 2
	}, "the refused beats were not dead-lettered")

	// A genuine beat still gets through.
	if err := hb.Publish(context.Background(), election.Beat{Epoch: 3, Identity: "leader", Seq: 1, Sent: time.Now()}); err != nil {
		t.Fatal(err)
	}
	select {
	case b := <-got:
		if b.Epoch != 3 {
			t.Fatalf("got %+v", b)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("a signed beat did not arrive")
	}
}

// A process behind a silent partition (a blackholing proxy: no FIN, no RST, the client still
// "connected") is reported cut off within CutOffAfter plus a probe interval, and healthy again
// soon after the link heals, without reconnecting.
func TestHealth_SeesSilentPartition(t *testing.T) {
	u := testenv.NATS(t)
	pu, _ := url.Parse(u)
	p, err := faultproxy.New(pu.Host)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	cfg := bus.Config{Keys: testkeys.Keys(), ProbeInterval: 100 * time.Millisecond, CutOffAfter: 400 * time.Millisecond}
	b, err := bus.Connect("nats://"+p.Addr(), "cut", cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	h := b.Health()
	testenv.Eventually(t, 5*time.Second, time.Millisecond, h.Healthy, "never healthy")

	p.Blackhole()
	cut := time.Now()
	testenv.Eventually(t, 5*time.Second, time.Millisecond, func() bool { return !h.Healthy() }, "a silent partition went unnoticed")
	took := time.Since(cut)
	t.Logf("cut off noticed after %v (CutOffAfter %v, probe every %v); err: %v", took, cfg.CutOffAfter, cfg.ProbeInterval, h.Err())
	if bound := cfg.CutOffAfter + cfg.ProbeInterval + 300*time.Millisecond; took > bound {
		t.Errorf("noticed after %v, want within %v", took, bound)
	}
	if !b.Conn().IsConnected() {
		t.Fatal("the client noticed by itself: the partition was not silent")
	}
	if h.Cuts() != 1 {
		t.Errorf("cuts %d, want 1", h.Cuts())
	}
	p.Heal()
	testenv.Eventually(t, 5*time.Second, time.Millisecond, h.Healthy, "not healthy after the heal")
	if r := b.Conn().Stats().Reconnects; r != 0 {
		t.Errorf("%d reconnects: the heal should need none", r)
	}
}

// While beats arrive (Heard), the prober sleeps: each beat moves its next look to half the
// cut-off window after it, so an idle follower is not woken between beats. Once they stop, it
// probes again and the process stays healthy.
func TestHealth_BeatsKeepTheProberAsleep(t *testing.T) {
	cfg := bus.Config{Keys: testkeys.Keys(), ProbeInterval: 100 * time.Millisecond, CutOffAfter: 400 * time.Millisecond}
	b, err := bus.Connect(testenv.NATS(t), "asleep", cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	h := b.Health()
	testenv.Eventually(t, 5*time.Second, time.Millisecond, h.Healthy, "never healthy")
	before := bus.HealthLooks(h)
	for range 20 { // a beat every 50ms for a second: the prober's next look is always 200ms away
		h.Heard()
		time.Sleep(50 * time.Millisecond)
	}
	if n := bus.HealthLooks(h) - before; n > 2 {
		t.Errorf("the prober woke %d times in a second of beats, want at most 2 (it would wake about every 150ms)", n)
	}
	time.Sleep(time.Second) // no beats: the prober's own round trips keep the process healthy
	if err := h.Err(); err != nil {
		t.Errorf("unhealthy after the beats stopped: %v", err)
	}
	if n := bus.HealthLooks(h) - before; n < 3 {
		t.Errorf("the prober woke %d times in all, want it probing once the beats stopped", n)
	}
}

// A member whose key is not the cluster's hands the shards it cannot verify back at once (nak),
// for a member that can: they are not dead-lettered.
func TestShards_SignedWithAnUnheldKeyGoBack(t *testing.T) {
	ctx := context.Background()
	u := testenv.NATS(t)
	good := connect(t, u)
	wrongKey, err := bus.GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	ring, err := bus.NewKeyring(wrongKey)
	if err != nil {
		t.Fatal(err)
	}
	var reported atomic.Int32
	wrong, err := bus.Connect(u, "wrong", bus.Config{Keys: ring, OnRefused: func(string, string, error) { reported.Add(1) }})
	if err != nil {
		t.Fatal(err)
	}
	defer wrong.Close()
	subj := good.ShardTypeSubject("t", "job1")
	if err := good.PublishAll(ctx, []bus.Outgoing{{Subject: subj, MsgID: "job1/0", Data: []byte("genuine")}}); err != nil {
		t.Fatal(err)
	}
	f, err := wrong.Shards(ctx, shardOpts(1, "t"))
	if err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 10*time.Second, 5*time.Millisecond, func() bool { return wrong.UnknownKey() >= 1 && reported.Load() >= 1 }, "the shard was not handed back")
	f.Stop()
	if n := wrong.Refused(); n != 0 {
		t.Fatalf("%d shards dead-lettered by the wrong-key member", n)
	}
	gf, err := good.Shards(ctx, shardOpts(1, "t"))
	if err != nil {
		t.Fatal(err)
	}
	defer gf.Stop()
	d := recv(t, gf.C, 1)[0]
	if string(d.Data()) != "genuine" {
		t.Fatalf("got %q", d.Data())
	}
	_ = d.Ack()
}
