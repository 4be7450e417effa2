package membership

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/mapagg/mapagg/internal/harness/testenv"
)

func TestAnnouncementRoundTrip(t *testing.T) {
	a := Announcement{ID: "w1", Version: "v1", JobTypes: []string{"primes"}, Concurrency: 4, InFlight: 2,
		StartedAt: time.Unix(100, 0).UTC(), Leader: true, Epoch: 7, HTTPAddr: "127.0.0.1:9", Problems: []string{"results: stream full"}}
	data, err := a.Encode()
	if err != nil {
		t.Fatal(err)
	}
	b, err := DecodeAnnouncement(data)
	if err != nil {
		t.Fatal(err)
	}
	if b.ID != "w1" || !b.Leader || b.Epoch != 7 || b.InFlight != 2 || b.JobTypes[0] != "primes" || !b.StartedAt.Equal(a.StartedAt) ||
		len(b.Problems) != 1 || b.Problems[0] != "results: stream full" {
		t.Fatalf("round trip changed it: %+v", b)
	}
}

func TestDecodeRefusesBadMessages(t *testing.T) {
	for _, tc := range []struct{ data, want string }{
		{`{`, "decode announcement"},
		{`{"v":1,"id":""}`, "worker id"},
		{`{"v":2,"id":"w"}`, "version 2"},
		{`{"v":1,"id":"w","leader":true}`, "needs its epoch"},
		{`{"v":1,"id":"w","concurrency":-1}`, "negative"},
		{`{"v":1,"id":"w","problems":[""]}`, "a problem of 0 bytes"},
		{`{"v":1,"id":"w","problems":["` + strings.Repeat("a", MaxProblemLen+1) + `"]}`, "a problem of 301 bytes"},
		{`{"v":1,"id":"w","problems":["a","a","a","a","a","a","a","a","a"]}`, "9 problems"},
		{`{"v":1,"id":"w","x":"` + strings.Repeat("a", MaxMessage) + `"}`, "exceeds"},
	} {
		if _, err := DecodeAnnouncement([]byte(tc.data)); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("DecodeAnnouncement(%.40s): err %v, want one containing %q", tc.data, err, tc.want)
		}
	}
	for _, tc := range []struct{ data, want string }{
		{`[]`, "decode event"},
		{`{"v":1,"worker":"w","kind":"elected"}`, "no time"},
		{`{"v":1,"worker":"w","at":"2026-01-01T00:00:00Z"}`, "kind"},
	} {
		if _, err := DecodeEvent([]byte(tc.data)); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("DecodeEvent(%s): err %v, want one containing %q", tc.data, err, tc.want)
		}
	}
}

func FuzzDecodeAnnouncement(f *testing.F) {
	a := Announcement{ID: "w1", Leader: true, Epoch: 3, JobTypes: []string{"pi"}}
	data, _ := a.Encode()
	f.Add(data)
	f.Add([]byte(`{"v":1,"id":"x"}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		a, err := DecodeAnnouncement(data)
		if err != nil {
			return
		}
		again, err := a.Encode()
		if err != nil {
			t.Fatalf("a decoded announcement does not encode: %v", err)
		}
		if _, err := DecodeAnnouncement(again); err != nil {
			t.Fatalf("re-encoded announcement does not decode: %v", err)
		}
	})
}

func FuzzDecodeEvent(f *testing.F) {
	e := Event{Worker: "w1", Kind: "elected", Epoch: 2, At: time.Unix(5, 0).UTC()}
	data, _ := e.Encode()
	f.Add(data)
	f.Fuzz(func(t *testing.T, data []byte) {
		e, err := DecodeEvent(data)
		if err != nil {
			return
		}
		again, err := e.Encode()
		if err != nil {
			t.Fatalf("a decoded event does not encode: %v", err)
		}
		if _, err := DecodeEvent(again); err != nil {
			t.Fatalf("re-encoded event does not decode: %v", err)
		}
	})
}

// TestWatcherSeesAnnouncersAndDropsTheSilent runs two announcers over a real NATS server and
// checks that the watcher lists both, then drops the one that stops within the expiry.
func TestWatcherSeesAnnouncersAndDropsTheSilent(t *testing.T) {
	nc, err := nats.Connect(testenv.NATS(t))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	const subject = "test.members"
	interval, expiry := 50*time.Millisecond, 200*time.Millisecond
	w, err := Watch(nc, subject, expiry, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	// Garbage on the subject is ignored.
	if err := nc.Publish(subject, []byte("not json")); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	ctx1, stop1 := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer func() { cancel(); wg.Wait() }()
	for i, id := range []string{"w1", "w2"} {
		actx := ctx
		if i == 0 {
			actx = ctx1
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			Announce(actx, nc, subject, interval, testLogger(t), func() Announcement {
				return Announcement{ID: id, Leader: id == "w2", Epoch: map[bool]uint64{true: 4}[id == "w2"], Concurrency: 2}
			})
		}()
	}
	testenv.Eventually(t, 5*time.Second, 10*time.Millisecond, func() bool { return len(w.Live()) == 2 }, "both workers listed")
	if l, ok := Leader(w.Live()); !ok || l.ID != "w2" || l.Epoch != 4 {
		t.Fatalf("leader %+v, %v: want w2 epoch 4", l, ok)
	}
	stop1()
	stopped := time.Now()
	testenv.Eventually(t, 5*time.Second, 10*time.Millisecond, func() bool { return len(w.Live()) == 1 }, "w1 dropped")
	if took := time.Since(stopped); took < expiry-interval {
		t.Fatalf("w1 dropped after %v, before the expiry %v", took, expiry)
	}
	if got := w.Live()[0].ID; got != "w2" {
		t.Fatalf("live %q, want w2", got)
	}
}
