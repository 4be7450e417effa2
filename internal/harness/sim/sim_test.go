package sim_test

import (
	"crypto/rand"
	"encoding/base64"
	"testing"
	"time"

	"github.com/mapagg/mapagg/internal/harness/storecount"

	"github.com/nats-io/nats.go"

	"github.com/mapagg/mapagg/election"
	"github.com/mapagg/mapagg/internal/harness/sim"
	"github.com/mapagg/mapagg/internal/harness/testenv"
	"github.com/mapagg/mapagg/internal/membership"
	"github.com/mapagg/mapagg/internal/protocol"
	"github.com/mapagg/mapagg/node"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// Members of one host elect one leader; a crashed leader is replaced by another member with one
// lease break, as a killed process is; the crashed member comes back under its id.
func TestHost_CrashedLeaderIsReplaced(t *testing.T) {
	ns := testenv.Name(t, "sim")
	natsURL := testenv.NATS(t)
	var secret [32]byte
	_, _ = rand.Read(secret[:])
	keys, err := node.ParseClusterKeys(base64.StdEncoding.EncodeToString(secret[:]))
	if err != nil {
		t.Fatal(err)
	}
	h, err := sim.NewHost(sim.MemberConfig{ConnStr: testenv.Azurite(t), NATSURL: natsURL, Names: sim.NamesFor(ns), Keys: keys})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	nc, err := nats.Connect(natsURL)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	events := make(chan membership.Event, 1000)
	if _, err := nc.Subscribe(protocol.NewNames(sim.NamesFor(ns).StreamPrefix).Events(), func(m *nats.Msg) {
		if e, err := membership.DecodeEvent(m.Data); err == nil {
			events <- *e
		}
	}); err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		if err := h.Start(sim.MemberID(i)); err != nil {
			t.Fatal(err)
		}
	}
	elected := func(after uint64, within time.Duration) membership.Event {
		t.Helper()
		deadline := time.After(within)
		for {
			select {
			case e := <-events:
				if e.Kind == string(election.EventElected) && e.Epoch > after {
					return e
				}
			case <-deadline:
				t.Fatalf("no leader of an epoch above %d within %v", after, within)
			}
		}
	}
	first := elected(0, 30*time.Second)
	time.Sleep(3 * time.Second) // the leader names its successors from their announcements
	if err := h.Start(first.Worker); err == nil {
		t.Fatalf("a second start of running member %s was accepted", first.Worker)
	}
	before := h.Counts()
	at, err := h.Crash(first.Worker)
	if err != nil {
		t.Fatal(err)
	}
	breaks := 0
	var next membership.Event
	deadline := time.After(10 * time.Second)
	for next.Worker == "" {
		select {
		case e := <-events:
			if e.Kind == string(election.EventBrokeLease) {
				breaks++
			}
			if e.Kind == string(election.EventElected) && e.Epoch > first.Epoch {
				next = e
			}
		case <-deadline:
			t.Fatalf("no leader after the crash of %s within 10s", first.Worker)
		}
	}
	if next.Worker == first.Worker {
		t.Fatalf("the crashed member %s was elected again", first.Worker)
	}
	if took := next.At.Sub(at); took > 2*time.Second {
		t.Errorf("takeover took %v, want under 2s (the crash must look like a dead process: no responders)", took)
	}
	if breaks != 1 {
		t.Errorf("%d lease breaks, want 1", breaks)
	}
	lease := h.Counts().Sub(before).Total(func(r storecount.Request) bool { return r.Container == sim.NamesFor(ns).LeaseContainer })
	if lease < 3 || lease > 20 {
		t.Errorf("%d lease-container requests across the takeover, want a handful (break, acquire, stamp)", lease)
	}
	if err := h.Start(first.Worker); err != nil {
		t.Fatalf("restart after the crash: %v", err)
	}
}
