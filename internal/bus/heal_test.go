package bus_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/mapagg/mapagg/internal/bus"
	"github.com/mapagg/mapagg/internal/harness/testenv"
	"github.com/mapagg/mapagg/internal/harness/testkeys"
)

// rebuilds collects the Rebuilt events of a bus.
type rebuilds struct {
	mu sync.Mutex
	rs []bus.Rebuilt
}

func (r *rebuilds) add(x bus.Rebuilt) { r.mu.Lock(); r.rs = append(r.rs, x); r.mu.Unlock() }

func (r *rebuilds) names() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for _, x := range r.rs {
		out = append(out, x.Kind+" "+x.Name)
	}
	return out
}

// Every stream removed under live feeds (an operator's `nats stream rm`): the member that finds
// one missing creates it again and says so, the shards feed and the leader's results feed go on,
// and publishes made after the removal arrive.
func TestBus_StreamsRemovedAreRecreated(t *testing.T) {
	ctx := context.Background()
	url := testenv.NATS(t)
	var rb rebuilds
	b, err := bus.Connect(url, t.Name(), bus.Config{ResultsAckWait: time.Minute, Keys: testkeys.Keys(), OnRebuilt: rb.add})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if err := b.Ensure(ctx); err != nil {
		t.Fatal(err)
	}
	shards, err := b.Shards(ctx, shardOpts(8, "t"))
	if err != nil {
		t.Fatal(err)
	}
	defer shards.Stop()
	results, err := b.OpenResults(ctx, 7, 16)
	if err != nil {
		t.Fatal(err)
	}
	defer results.Stop()

	publish := func(round int) {
		t.Helper()
		msgs := []bus.Outgoing{
			{Subject: b.ShardTypeSubject("t", "j"), MsgID: fmt.Sprintf("j/%d", round), Data: []byte{byte(round)}},
			{Subject: b.ResultSubject("j"), MsgID: fmt.Sprintf("j/r/%d", round), Data: []byte{byte(round)}},
		}
		if err := b.PublishAll(ctx, msgs); err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
	}
	publish(0)
	for _, d := range append(recv(t, shards.C, 1), recv(t, results.C, 1)...) {
		if err := d.Ack(); err != nil {
			t.Fatal(err)
		}
	}

	// An operator removes every stream.
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"MAPAGG_SHARDS", "MAPAGG_RESULTS", "MAPAGG_DEAD"} {
		if err := js.DeleteStream(ctx, s); err != nil {
			t.Fatalf("delete %s: %v", s, err)
		}
	}

	publish(1) // finds the streams missing, recreates them, publishes again
	for _, d := range append(recv(t, shards.C, 1), recv(t, results.C, 1)...) {
		if d.Data()[0] != 1 {
			t.Fatalf("got round %d, want 1", d.Data()[0])
		}
		if err := d.Ack(); err != nil {
			t.Fatal(err)
		}
	}
	got := rb.names()
	for _, want := range []string{"stream MAPAGG_SHARDS", "stream MAPAGG_RESULTS", "stream MAPAGG_DEAD",
		"consumer workers-t", "consumer leader-7"} {
		if !slices.Contains(got, want) {
			t.Errorf("rebuilt %q not reported; got %q", want, got)
		}
	}
	if b.Rebuilds() != uint64(len(got)) {
		t.Errorf("Rebuilds() = %d, events %d", b.Rebuilds(), len(got))
	}
	// Only the consumer: the feed recreates it (the stream stays).
	before := len(rb.names())
	if err := js.DeleteConsumer(ctx, "MAPAGG_SHARDS", "workers-t"); err != nil {
		t.Fatal(err)
	}
	publish(2)
	// A pull that reaches the consumer as it is deleted is never answered (no "consumer deleted"
	// status): the feed then learns of it from the idle poll's missed heartbeats, 10 s after.
	recvWithin(t, shards.C, 1, 20*time.Second)[0].Ack()
	recv(t, results.C, 1)[0].Ack()
	if n := len(rb.names()); n != before+1 {
		t.Errorf("after removing the shards consumer: %d rebuilds, want %d (%q)", n, before+1, rb.names())
	}
}

// A results feed whose consumer a newer leader replaced ends; it does not take the stream back.
func TestBus_DeposedResultsFeedEnds(t *testing.T) {
	ctx := context.Background()
	url := testenv.NATS(t)
	old := connect(t, url)
	nu := connect(t, url)
	f, err := old.OpenResults(ctx, 1, 4)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Stop()
	g, err := nu.OpenResults(ctx, 2, 4)
	if err != nil {
		t.Fatal(err)
	}
	defer g.Stop()
	select {
	case _, ok := <-f.C:
		if ok {
			t.Fatal("the deposed feed delivered")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the deposed leader's feed did not end")
	}
	if err := nu.PublishAll(ctx, []bus.Outgoing{{Subject: nu.ResultSubject("j"), MsgID: "j/x", Data: []byte("x")}}); err != nil {
		t.Fatal(err)
	}
	recv(t, g.C, 1)
}
