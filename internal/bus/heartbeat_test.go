package bus_test

import (
	"bytes"
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/mapagg/mapagg/election"
	"github.com/mapagg/mapagg/internal/bus"
	"github.com/mapagg/mapagg/internal/harness/devserver"
	"github.com/mapagg/mapagg/internal/harness/testenv"
)

// Beats published on one connection reach subscribers on others; an unsigned message on the
// subject is dropped and counted; a connection cut off from NATS is unhealthy and refuses to publish
// (no stale beats buffered for the reconnect).
func TestHeartbeats_OverNATS(t *testing.T) {
	s, err := devserver.StartNATS(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer s.Shutdown()
	leader, follower := connect(t, s.ClientURL()), connect(t, s.ClientURL())
	lh, fh := leader.Heartbeats(), follower.Heartbeats()
	got := make(chan election.Beat, 16)
	stop, err := fh.Subscribe(func(b election.Beat) { got <- b })
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	if err := follower.Conn().Flush(); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 5*time.Second, time.Millisecond, func() bool { return lh.Healthy() && fh.Healthy() },
		"connected transports report unhealthy")
	sent := election.Beat{Epoch: 7, Identity: "host-1", Seq: 3, Sent: time.Now(), Answers: true, Successors: []string{"host-2", "host-3"}}
	if err := leader.Conn().Publish("mapagg."+bus.CtlHeartbeat, []byte(`{"epoch":0}`)); err != nil {
		t.Fatal(err)
	}
	if err := lh.Publish(context.Background(), sent); err != nil {
		t.Fatal(err)
	}
	select {
	case b := <-got:
		if b.Epoch != 7 || b.Identity != "host-1" || b.Seq != 3 || !b.Answers || !b.Sent.Equal(sent.Sent.Round(0)) || !slices.Equal(b.Successors, sent.Successors) {
			t.Errorf("received %+v, want %+v", b, sent)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("beat not received")
	}
	testenv.Eventually(t, time.Second, time.Millisecond, func() bool { return fh.Unverified() == 1 }, "unsigned beat not counted")
	if err := lh.Publish(context.Background(), election.Beat{Identity: "x"}); err == nil {
		t.Error("published a beat of epoch 0")
	}

	s.Shutdown()
	s.WaitForShutdown()
	testenv.Eventually(t, 5*time.Second, time.Millisecond, func() bool { return !fh.Healthy() && !lh.Healthy() },
		"transports healthy with the server down")
	if err := lh.Publish(context.Background(), sent); !errors.Is(err, bus.ErrNotConnected) {
		t.Errorf("publish while disconnected: %v, want ErrNotConnected", err)
	}
}

func TestDecodeBeat_RefusesMalformed(t *testing.T) {
	for _, in := range []string{``, `{}`, `{"epoch":1}`, `{"epoch":0,"leader":"a"}`, `{"epoch":1,"leader":"a\n"}`,
		`{"epoch":-1,"leader":"a"}`, `[1]`, `{"epoch":1,"leader":"` + string(bytes.Repeat([]byte("a"), 300)) + `"}`,
		`{"epoch":1,"leader":"a","next":[""]}`, `{"epoch":1,"leader":"a","next":["b\n"]}`, `{"epoch":1,"leader":"a","next":["b","c","d","e"]}`} {
		if b, err := bus.DecodeBeat([]byte(in)); err == nil {
			t.Errorf("DecodeBeat(%q) = %+v, want an error", in, b)
		}
	}
}

func FuzzDecodeBeat(f *testing.F) {
	good, _ := bus.EncodeBeat(election.Beat{Epoch: 3, Identity: "host-9", Seq: 1, Sent: time.Unix(1, 2)})
	f.Add(good)
	next, _ := bus.EncodeBeat(election.Beat{Epoch: 3, Identity: "host-9", Seq: 1, Successors: []string{"a", "b"}})
	f.Add(next)
	f.Add([]byte(`{"epoch":1,"leader":"a","seq":18446744073709551615,"sent_unix_nano":-1}`))
	f.Add([]byte(`{"epoch":1e30}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		b, err := bus.DecodeBeat(data)
		if err != nil {
			return
		}
		again, err := bus.EncodeBeat(b)
		if err != nil {
			t.Fatalf("decoded beat %+v does not encode: %v", b, err)
		}
		b2, err := bus.DecodeBeat(again)
		if err != nil || b2.Epoch != b.Epoch || b2.Identity != b.Identity || b2.Seq != b.Seq || b2.Answers != b.Answers || !b2.Sent.Equal(b.Sent) || !slices.Equal(b2.Successors, b.Successors) {
			t.Fatalf("round trip %+v → %+v, %v", b, b2, err)
		}
	})
}
