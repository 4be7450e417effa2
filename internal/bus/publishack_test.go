package bus_test

import (
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/mapagg/mapagg/internal/bus"
	"github.com/mapagg/mapagg/internal/harness/testenv"
)

// A publish whose acknowledgement never comes (a stream leader that died with its node; here a
// plain subscriber that never answers) fails after PublishAckTimeout, not 30s, so the publisher
// publishes again once the stream has a new leader. The bound is the behaviour.
func TestBus_PublishAckWaitIsBounded(t *testing.T) {
	url := testenv.NATS(t)
	b := connect(t, url)
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	const subject = "mapagg.test.silent"
	sub, err := nc.SubscribeSync(subject) // takes the message, never acknowledges it
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	fut, err := b.Publish(bus.Outgoing{Subject: subject, MsgID: "silent/1", Data: []byte("x")})
	if err != nil {
		t.Fatal(err)
	}
	err = fut.Wait()
	took := time.Since(start)
	if !errors.Is(err, bus.ErrPublish) {
		t.Fatalf("Wait = %v, want ErrPublish", err)
	}
	if took < bus.PublishAckTimeout-time.Second || took > bus.PublishAckTimeout+5*time.Second {
		t.Errorf("the unacknowledged publish failed after %v, want about %v", took.Round(time.Millisecond), bus.PublishAckTimeout)
	}
}
