package bus_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/mapagg/mapagg/internal/bus"
	"github.com/mapagg/mapagg/internal/harness/testenv"
	"github.com/mapagg/mapagg/internal/harness/testkeys"
	"github.com/mapagg/mapagg/internal/protocol"
)

func connect(t *testing.T, url string) *bus.Bus {
	t.Helper()
	b, err := bus.Connect(url, t.Name(), bus.Config{ResultsAckWait: time.Minute, Keys: testkeys.Keys()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	if err := b.Ensure(context.Background()); err != nil {
		t.Fatal(err)
	}
	return b
}

func recv(t *testing.T, c <-chan *bus.Delivery, n int) []*bus.Delivery {
	t.Helper()
	return recvWithin(t, c, n, 10*time.Second)
}

func recvWithin(t *testing.T, c <-chan *bus.Delivery, n int, d time.Duration) []*bus.Delivery {
	t.Helper()
	var out []*bus.Delivery
	timeout := time.After(d)
	for len(out) < n {
		select {
		case d := <-c:
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
		msgs = append(msgs, bus.Outgoing{Subject: b.ShardTypeSubject("t", "job1"), MsgID: fmt.Sprintf("job1/%d", i), Data: []byte{byte(i)}})
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
	if err := b.PublishAll(ctx, []bus.Outgoing{{Subject: b.ShardTypeSubject("t.v2", "job2"), MsgID: "job2/0", Data: []byte("x")}}); err != nil {
		t.Fatal(err)
	}
	if err := b.PurgeJob(ctx, "job1"); err != nil {
		t.Fatal(err)
	}
	f, err := b.Shards(ctx, shardOpts(4, "t", "t.v2"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Stop()
	d := recv(t, f.C, 1)[0]
	if bus.JobOfSubject(d.Subject()) != "job2" || d.Attempt() != 1 {
		t.Fatalf("after purge got %s attempt %d", d.Subject(), d.Attempt())
	}
	if err := d.Nak(0); err != nil {
		t.Fatal(err)
	}
	d = recv(t, f.C, 1)[0]
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
	got := recv(t, old.C, 5)
	_ = got[0].Ack() // the old leader checkpointed only the first result
	_ = got[0]
	start := time.Now()
	b2 := connect(t, url)
	nu, err := b2.OpenResults(ctx, 2, 16)
	if err != nil {
		t.Fatal(err)
	}
	defer nu.Stop()
	again := recv(t, nu.C, 4) // well before the 1-minute AckWait
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
	b, err := bus.Connect(url, t.Name(), bus.Config{ShardTimeout: time.Minute, Keys: testkeys.Keys()})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if err := b.Ensure(ctx); err != nil {
		t.Fatal(err)
	}
	var msgs []bus.Outgoing
	for i := 0; i < 20; i++ {
		msgs = append(msgs, bus.Outgoing{Subject: b.ShardTypeSubject("t", "j"), MsgID: fmt.Sprintf("j/%d", i), Data: []byte{byte(i)}})
	}
	if err := b.PublishAll(ctx, msgs); err != nil {
		t.Fatal(err)
	}
	first, err := b.Shards(ctx, shardOpts(16, "t")) // holds up to 16
	if err != nil {
		t.Fatal(err)
	}
	d := recv(t, first.C, 1)[0]
	testenv.Eventually(t, 10*time.Second, 10*time.Millisecond, func() bool { return first.Held() == 16 }, "first feed does not hold 16")
	_ = d.Ack()
	first.Stop()
	second, err := b.Shards(ctx, shardOpts(32, "t"))
	if err != nil {
		t.Fatal(err)
	}
	defer second.Stop()
	got := recv(t, second.C, 19) // recv fails after 10 s, far below the 1-minute AckWait
	for _, d := range got {
		_ = d.Ack()
	}
}

func shardOpts(limit int, types ...string) bus.ShardOptions {
	return bus.ShardOptions{Types: types, Limit: func() int { return limit }}
}

// A feed pulls only the types it names: a worker that lacks a type (a rolling upgrade) never
// receives its shards, which wait for a worker that has it. PurgeJob reaches every type.
func TestShards_PerTypeRouting(t *testing.T) {
	ctx := context.Background()
	b := connect(t, testenv.NATS(t))
	var msgs []bus.Outgoing
	for i := 0; i < 3; i++ {
		msgs = append(msgs,
			bus.Outgoing{Subject: b.ShardTypeSubject("old", "j1"), MsgID: fmt.Sprintf("j1/%d", i), Data: []byte("old")},
			bus.Outgoing{Subject: b.ShardTypeSubject("new", "j2"), MsgID: fmt.Sprintf("j2/%d", i), Data: []byte("new")},
			bus.Outgoing{Subject: b.ShardTypeSubject("new", "j3"), MsgID: fmt.Sprintf("j3/%d", i), Data: []byte("new")})
	}
	if err := b.PublishAll(ctx, msgs); err != nil {
		t.Fatal(err)
	}
	if err := b.PurgeJob(ctx, "j3"); err != nil {
		t.Fatal(err)
	}
	oldWorker, err := b.Shards(ctx, shardOpts(8, "old"))
	if err != nil {
		t.Fatal(err)
	}
	defer oldWorker.Stop()
	for _, d := range recv(t, oldWorker.C, 3) {
		if string(d.Data()) != "old" {
			t.Fatalf("a worker without type %q got %s", "new", d.Subject())
		}
		_ = d.Ack()
	}
	select {
	case d := <-oldWorker.C:
		t.Fatalf("a worker without type %q got %s", "new", d.Subject())
	case <-time.After(300 * time.Millisecond):
	}
	newWorker, err := b.Shards(ctx, shardOpts(8, "old", "new"))
	if err != nil {
		t.Fatal(err)
	}
	defer newWorker.Stop()
	for _, d := range recv(t, newWorker.C, 3) {
		if bus.JobOfSubject(d.Subject()) != "j2" {
			t.Fatalf("got %s: j3 was purged", d.Subject())
		}
		_ = d.Ack()
	}
	testenv.Eventually(t, 10*time.Second, 10*time.Millisecond, func() bool { n, _ := b.QueuedShards(ctx); return n == 0 }, "shards left queued")
}

// A feed holds at most Limit shards, and keeps every one it holds alive past the shard timeout
// (one ticker for all of them), so another consumer does not get them while the holder lives.
func TestShards_LimitAndKeepAlive(t *testing.T) {
	ctx := context.Background()
	url := testenv.NATS(t)
	b, err := bus.Connect(url, t.Name(), bus.Config{ShardTimeout: time.Second, Keys: testkeys.Keys()})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if err := b.Ensure(ctx); err != nil {
		t.Fatal(err)
	}
	var msgs []bus.Outgoing
	for i := 0; i < 10; i++ {
		msgs = append(msgs, bus.Outgoing{Subject: b.ShardTypeSubject("t", "j"), MsgID: fmt.Sprintf("j/%d", i), Data: []byte{byte(i)}})
	}
	if err := b.PublishAll(ctx, msgs); err != nil {
		t.Fatal(err)
	}
	holder, err := b.Shards(ctx, bus.ShardOptions{Types: []string{"t"}, Limit: func() int { return 3 }, KeepAlive: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Stop()
	held := recv(t, holder.C, 1) // one taken, two waiting in C: all three held
	testenv.Eventually(t, 10*time.Second, 10*time.Millisecond, func() bool { return holder.Held() == 3 }, "holder does not hold 3")
	other, err := b.Shards(ctx, shardOpts(100, "t"))
	if err != nil {
		t.Fatal(err)
	}
	defer other.Stop()
	for _, d := range recv(t, other.C, 7) {
		_ = d.Ack()
	}
	// Three shard timeouts later, the held shards have not been redelivered.
	select {
	case d := <-other.C:
		t.Fatalf("a held shard was redelivered (attempt %d): the keep-alive failed", d.Attempt())
	case <-time.After(3 * time.Second):
	}
	if holder.Held() != 3 {
		t.Fatalf("holder holds %d, want 3", holder.Held())
	}
	_ = held[0].Ack()
	for _, d := range recv(t, holder.C, 2) {
		_ = d.Ack()
	}
	testenv.Eventually(t, 10*time.Second, 10*time.Millisecond, func() bool { n, _ := b.QueuedShards(ctx); return n == 0 }, "shards left queued")
}

func TestConfig_ValidateReportsEveryProblem(t *testing.T) {
	if err := (bus.Config{}).Validate(); err != nil {
		t.Fatalf("zero config (all defaults): %v", err)
	}
	err := bus.Config{Prefix: "a.b", Replicas: 9, ShardTimeout: time.Millisecond, DuplicateWindow: time.Second}.Validate()
	if !errors.Is(err, bus.ErrInvalidConfig) {
		t.Fatalf("err = %v", err)
	}
	for _, want := range []string{"Prefix", "Replicas", "ShardTimeout", "DuplicateWindow"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("%q does not name %s", err, want)
		}
	}
}

// Ensure leaves streams that already have its settings alone and updates those that do not.
func TestBus_EnsureUpdatesOnlyChangedStreams(t *testing.T) {
	url := testenv.NATS(t)
	b := connect(t, url)
	ctx := context.Background()
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	info := func() *jetstream.StreamInfo {
		s, err := js.Stream(ctx, protocol.NewNames(b.Config().Prefix).ShardStream())
		if err != nil {
			t.Fatal(err)
		}
		return s.CachedInfo()
	}
	before := info()
	if err := b.Ensure(ctx); err != nil {
		t.Fatal(err)
	}
	if again := info(); !again.Created.Equal(before.Created) || again.Config.Duplicates != before.Config.Duplicates {
		t.Fatalf("second Ensure changed the stream: %+v -> %+v", before.Config, again.Config)
	}
	b2, err := bus.Connect(url, t.Name()+"-2", bus.Config{ResultsAckWait: time.Minute, DuplicateWindow: 20 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	defer b2.Close()
	if err := b2.Ensure(ctx); err != nil {
		t.Fatal(err)
	}
	if got := info().Config.Duplicates; got != 20*time.Minute {
		t.Fatalf("duplicate window %v after Ensure with 20m", got)
	}
}
