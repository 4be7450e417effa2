package bus_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/mapagg/mapagg/bus"
	"github.com/mapagg/mapagg/internal/testenv"
)

func connect(t *testing.T, url string) *bus.Bus {
	t.Helper()
	b, err := bus.Connect(url, t.Name(), bus.Config{ResultsAckWait: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	if err := b.Ensure(context.Background()); err != nil {
		t.Fatal(err)
	}
	return b
}

func recv(t *testing.T, f *bus.Feed, n int) []*bus.Delivery {
	t.Helper()
	var out []*bus.Delivery
	timeout := time.After(10 * time.Second)
	for len(out) < n {
		select {
		case d := <-f.C:
			out = append(out, d)
		case <-timeout:
			t.Fatalf("got %d deliveries, want %d", len(out), n)
		}
	}
	return out
}

func TestBus_ShardsDedupAndPurge(t *testing.T) {
	ctx := context.Background()
	b := connect(t, testenv.NATS(t))
	var msgs []bus.Outgoing
	for i := 0; i < 10; i++ {
		msgs = append(msgs, bus.Outgoing{Subject: b.ShardSubject("job1"), MsgID: fmt.Sprintf("job1/%d", i), Data: []byte{byte(i)}})
	}
	if err := b.PublishAll(ctx, msgs); err != nil {
		t.Fatal(err)
	}
	if err := b.PublishAll(ctx, msgs[:5]); err != nil { // a new leader re-dispatching
		t.Fatal(err)
	}
	if n, _ := b.QueuedShards(ctx); n != 10 {
		t.Fatalf("queued %d shards after a duplicate publish, want 10", n)
	}
	if err := b.PublishAll(ctx, []bus.Outgoing{{Subject: b.ShardSubject("job2"), MsgID: "job2/0", Data: []byte("x")}}); err != nil {
		t.Fatal(err)
	}
	if err := b.PurgeJob(ctx, "job1"); err != nil {
		t.Fatal(err)
	}
	f, err := b.Shards(ctx, 4)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Stop()
	d := recv(t, f, 1)[0]
	if bus.JobOfSubject(d.Subject()) != "job2" || d.Attempt() != 1 {
		t.Fatalf("after purge got %s attempt %d", d.Subject(), d.Attempt())
	}
	if err := d.Nak(0); err != nil {
		t.Fatal(err)
	}
	d = recv(t, f, 1)[0]
	if d.Attempt() != 2 {
		t.Fatalf("redelivery attempt = %d, want 2", d.Attempt())
	}
	_ = d.Ack()
}

func TestBus_NewLeaderGetsUnackedResultsAtOnce(t *testing.T) {
	ctx := context.Background()
	url := testenv.NATS(t)
	b := connect(t, url)
	for i := 0; i < 5; i++ {
		if err := <-b.PublishAsync(bus.Outgoing{Subject: b.ResultSubject("j"), MsgID: fmt.Sprintf("j/%d/1", i), Data: []byte{byte(i)}}); err != nil {
			t.Fatal(err)
		}
	}
	old, err := b.OpenResults(ctx, 1, 16)
	if err != nil {
		t.Fatal(err)
	}
	got := recv(t, old, 5)
	_ = got[0].Ack() // the old leader checkpointed only the first result
	_ = got[0]
	start := time.Now()
	b2 := connect(t, url)
	nu, err := b2.OpenResults(ctx, 2, 16)
	if err != nil {
		t.Fatal(err)
	}
	defer nu.Stop()
	again := recv(t, nu, 4) // well before the 1-minute AckWait
	if time.Since(start) > 30*time.Second {
		t.Fatalf("new leader waited %v for unacked results", time.Since(start))
	}
	for i, d := range again {
		if d.Data()[0] != byte(i+1) {
			t.Fatalf("redelivered result %d = %v", i, d.Data())
		}
	}
	// The deposed leader's feed ends: its consumer was deleted.
	testenv.Eventually(t, 10*time.Second, 50*time.Millisecond, func() bool {
		select {
		case _, ok := <-old.C:
			return !ok
		default:
			return false
		}
	}, "old leader's feed still open")
	old.Stop()
}

// A feed that stops hands the messages it pulled but did not deliver back at once, so another
// consumer gets them without waiting out AckWait (a rolling restart must not stall jobs).
func TestFeed_StopHandsBackPrefetchedAtOnce(t *testing.T) {
	ctx := context.Background()
	url := testenv.NATS(t)
	b, err := bus.Connect(url, t.Name(), bus.Config{ShardTimeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if err := b.Ensure(ctx); err != nil {
		t.Fatal(err)
	}
	var msgs []bus.Outgoing
	for i := 0; i < 20; i++ {
		msgs = append(msgs, bus.Outgoing{Subject: b.ShardSubject("j"), MsgID: fmt.Sprintf("j/%d", i), Data: []byte{byte(i)}})
	}
	if err := b.PublishAll(ctx, msgs); err != nil {
		t.Fatal(err)
	}
	first, err := b.Shards(ctx, 16) // pulls up to 16 ahead
	if err != nil {
		t.Fatal(err)
	}
	d := recv(t, first, 1)[0]
	_ = d.Ack()
	first.Stop()
	second, err := b.Shards(ctx, 32)
	if err != nil {
		t.Fatal(err)
	}
	defer second.Stop()
	got := recv(t, second, 19) // recv fails after 10 s, far below the 1-minute AckWait
	for _, d := range got {
		_ = d.Ack()
	}
}
