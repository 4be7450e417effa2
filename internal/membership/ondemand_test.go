package membership

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/mapagg/mapagg/internal/harness/testenv"
)

// An on-demand watcher listens while held, or when read (the first read waits an announce
// interval to hear everyone) and for its idle time after; otherwise it has no subscription, so
// followers cost the announcers nothing.
func TestWatchOnDemand_ListensWhenHeldOrRead(t *testing.T) {
	url := testenv.NATS(t)
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	const subject = "test.ondemand"
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ac, err := nats.Connect(url) // the announcer's own connection: its subscription (asks) is not counted below
	if err != nil {
		t.Fatal(err)
	}
	defer ac.Close()
	go Announce(ctx, ac, subject, 100*time.Millisecond, testLogger(t), func() Announcement { return Announcement{ID: "w1"} })

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

// A watcher that starts listening asks every worker to announce now: it hears them within a
// round trip, however long their announce interval.
func TestWatch_AskedWorkersAnswerAtOnce(t *testing.T) {
	url := testenv.NATS(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	for _, id := range []string{"w1", "w2", "w3"} {
		ac, err := nats.Connect(url)
		if err != nil {
			t.Fatal(err)
		}
		defer ac.Close()
		go Announce(ctx, ac, "test.ask", time.Hour, testLogger(t), func() Announcement { return Announcement{ID: id} })
	}
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	time.Sleep(200 * time.Millisecond) // the announcers' first (hourly) announcements pass unheard
	w := WatchOnDemand(nc, "test.ask", time.Hour, 0, nil)
	defer w.Stop()
	start := time.Now()
	w.Hold(true) // as a new leader does
	testenv.Eventually(t, 5*time.Second, 5*time.Millisecond, func() bool { return len(w.Peek()) == 3 }, "asked workers did not announce (they announce hourly)")
	t.Logf("three workers heard %v after the watcher started", time.Since(start).Round(time.Millisecond))
	// Asks come faster than one every askGap: each worker answers at most once a gap.
	var n atomic.Int32
	sub, err := nc.Subscribe("test.ask", func(*nats.Msg) { n.Add(1) })
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	time.Sleep(2 * askGap)
	begin := time.Now()
	for time.Since(begin) < 5*askGap {
		if err := nc.Publish("test.ask"+AskSuffix, nil); err != nil {
			t.Fatal(err)
		}
		time.Sleep(askGap / 10)
	}
	time.Sleep(askGap / 2)
	if got := n.Load(); got < 3 || got > 3*6 {
		t.Errorf("asks every %v for %v made %d announcements of 3 workers, want 1 to 6 each", askGap/10, 5*askGap, got)
	}
}
