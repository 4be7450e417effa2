package membership

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/mapagg/mapagg/internal/harness/testenv"
)

// An on-demand watcher listens while held, or when read (the first read waits an announce
// interval to hear everyone) and for its idle time after; otherwise it has no subscription, so
// followers cost the announcers nothing.
func TestWatchOnDemand_ListensWhenHeldOrRead(t *testing.T) {
	nc, err := nats.Connect(testenv.NATS(t))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	const subject = "test.ondemand"
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go Announce(ctx, nc, subject, 100*time.Millisecond, testLogger(t), func() Announcement { return Announcement{ID: "w1"} })

	w := WatchOnDemand(nc, subject, 0, 2*time.Second, nil)
	defer w.Stop()
	subs := func() int { return nc.NumSubscriptions() }
	if subs() != 0 || len(w.Peek()) != 0 {
		t.Fatalf("%d subscriptions, peek %v before anyone asked", subs(), w.Peek())
	}
	if live := w.Live(); len(live) != 1 || live[0].ID != "w1" {
		t.Fatalf("first Live: %+v, want w1", live)
	}
	// Unread for longer than idle: the next announcement ends the subscription.
	testenv.Eventually(t, 5*time.Second, 20*time.Millisecond, func() bool { return subs() == 0 }, "watcher still listening after its idle time")
	w.Hold(true)
	testenv.Eventually(t, 5*time.Second, 20*time.Millisecond, func() bool { return len(w.Peek()) == 1 }, "held watcher hears nobody")
	time.Sleep(1500 * time.Millisecond)
	if subs() != 1 || len(w.Peek()) != 1 {
		t.Fatalf("held watcher: %d subscriptions, peek %+v", subs(), w.Peek())
	}
	w.Hold(false)
	testenv.Eventually(t, 5*time.Second, 20*time.Millisecond, func() bool { return subs() == 0 }, "released watcher still listening")
}
