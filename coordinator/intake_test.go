package coordinator

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mapagg/mapagg/client"
	"github.com/mapagg/mapagg/internal/protocol"
	"github.com/mapagg/mapagg/jobs"
	"github.com/mapagg/mapagg/store"
	"github.com/mapagg/mapagg/worker"
)

// A submitter that announces nothing on NATS (an older client, or NATS unreachable from it):
// the leader still finds the job on the queue, by polling.
func TestIntake_UnannouncedJobFoundByPolling(t *testing.T) {
	r := newRig(t)
	r.lead(1)
	r.work(worker.Config{Concurrency: 2})
	quiet := &client.Client{Store: r.st, Queue: r.q, Registry: r.cl.Registry}
	id, err := quiet.Submit(context.Background(), "primes", json.RawMessage(`{"from":0,"to":100000,"shards":4}`))
	if err != nil {
		t.Fatal(err)
	}
	st := r.wait(id, 20*time.Second)
	if st.State != jobs.StateSucceeded {
		t.Fatalf("state %s: %s", st.State, st.Error)
	}
	sameJSON(t, st.Result, json.RawMessage(`{"count":9592}`))
}

// An announced id with no queue message behind it (anyone on NATS can publish one) is read
// at most, never planned, and leaves nothing in storage.
func TestIntake_AnnouncementAloneWritesNothing(t *testing.T) {
	r := newRig(t)
	r.lead(1)
	id := protocol.NewID(time.Now())
	spec, _ := (&protocol.Spec{ID: id, Type: "primes", Params: json.RawMessage(`{"from":0,"to":1000,"shards":1}`)}).Encode()
	if _, err := r.st.Put(context.Background(), protocol.SpecBlob(id), spec, store.Cond{}); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if err := r.b.Announce("ctl.submitted", []byte(id)); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(500 * time.Millisecond) // the leader polls the queue every 100 ms here
	for _, name := range []string{protocol.CheckpointBlob(id), protocol.ActiveBlob(id)} {
		if ok, err := r.st.Exists(context.Background(), name); err != nil || ok {
			t.Errorf("%s exists=%v (%v) after an announcement without a queue message", name, ok, err)
		}
	}
}

// noMarkers is storage that refuses to store active markers while on is set: the failure of
// one write the real server cannot be made to refuse on demand.
type noMarkers struct {
	Store
	on atomic.Bool
}

func (s *noMarkers) Put(ctx context.Context, name string, data []byte, cond store.Cond) (store.ETag, error) {
	if s.on.Load() && strings.HasPrefix(name, protocol.ActivePrefix) {
		return "", errors.New("injected: active marker refused")
	}
	return s.Store.Put(ctx, name, data, cond)
}

// A leader that could store the first checkpoint but not the active marker runs the job and
// keeps its queue message: the next intake of the message (after its visibility timeout) stores
// the marker and deletes the message. Nothing is lost and the job runs once.
func TestIntake_MarkerFailureKeepsTheQueueMessage(t *testing.T) {
	r := newRig(t)
	st := &noMarkers{Store: r.st}
	st.on.Store(true)
	r.leadOn(1, st, func(c *Config) { c.RescanInterval, c.QueueVisibility = time.Hour, 5*time.Second })
	r.work(worker.Config{Concurrency: 2})
	id := r.submit("primes", `{"from":0,"to":100000,"shards":4}`)
	if st := r.wait(id, 20*time.Second); st.State != jobs.StateSucceeded {
		t.Fatalf("state %s: %s", st.State, st.Error)
	}
	if n, err := r.q.Depth(context.Background()); err != nil || n != 1 {
		t.Fatalf("queue depth %d (%v) after a run without a marker; want the message kept", n, err)
	}
	st.on.Store(false)
	deadline := time.Now().Add(30 * time.Second)
	for {
		n, err := r.q.Depth(context.Background())
		if err == nil && n == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("queue depth %d (%v): the message was never taken off", n, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	s := r.wait(id, 20*time.Second)
	if s.State != jobs.StateSucceeded || s.Duplicates != 0 {
		t.Fatalf("after the second intake: %s, %d duplicates (%s)", s.State, s.Duplicates, s.Error)
	}
	sameJSON(t, s.Result, json.RawMessage(`{"count":9592}`))
}

// A job cancelled while queued (no leader yet) ends cancelled at intake, with nothing dispatched
// and its queue message gone.
func TestIntake_CancelledWhileQueuedNeverRuns(t *testing.T) {
	r := newRig(t)
	id := r.submit("sleep", `{"shards":50,"duration":"1ms"}`)
	if _, err := r.cl.Cancel(context.Background(), id); err != nil {
		t.Fatal(err)
	}
	r.lead(1)
	st := r.wait(id, 20*time.Second)
	if st.State != jobs.StateCancelled || !strings.Contains(st.Error, "before it started") || st.ShardsTotal != 0 {
		t.Fatalf("cancelled while queued: %s, %d shards, %q", st.State, st.ShardsTotal, st.Error)
	}
	deadline := time.Now().Add(10 * time.Second)
	for n, err := r.q.Depth(context.Background()); err != nil || n != 0; n, err = r.q.Depth(context.Background()) {
		if time.Now().After(deadline) {
			t.Fatalf("queue depth %d (%v) after the cancelled job's intake", n, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if ok, err := r.st.Exists(context.Background(), protocol.ActiveBlob(id)); err != nil || ok {
		t.Errorf("active marker of a job cancelled before it started: %v (%v)", ok, err)
	}
}

// heldMarkers is storage whose active-marker writes wait for release: a write still in flight
// when the term ends.
type heldMarkers struct {
	Store
	release chan struct{}
}

func (s *heldMarkers) Put(ctx context.Context, name string, data []byte, cond store.Cond) (store.ETag, error) {
	if strings.HasPrefix(name, protocol.ActivePrefix) {
		<-s.release
	}
	return s.Store.Put(ctx, name, data, cond)
}

// A term that ends (a graceful handover) while a new job's marker is being written still stores
// the marker and takes the message off the queue: the next leader finds the job at once.
func TestIntake_MarkerStoredWhenTheTermEnds(t *testing.T) {
	r := newRig(t)
	st := &heldMarkers{Store: r.st, release: make(chan struct{})}
	l := r.leadOn(1, st, func(*Config) {})
	id := r.submit("sleep", `{"shards":10,"duration":"1ms"}`)
	deadline := time.Now().Add(20 * time.Second)
	for ok := false; !ok; ok, _ = r.st.Exists(context.Background(), protocol.CheckpointBlob(id)) {
		if time.Now().After(deadline) {
			t.Fatal("the job was never planned")
		}
		time.Sleep(20 * time.Millisecond)
	}
	l.cancel() // the term ends with the marker write in flight
	time.Sleep(100 * time.Millisecond)
	close(st.release)
	<-l.done
	if ok, err := r.st.Exists(context.Background(), protocol.ActiveBlob(id)); err != nil || !ok {
		t.Fatalf("active marker after the term ended: %v (%v)", ok, err)
	}
	if n, err := r.q.Depth(context.Background()); err != nil || n != 0 {
		t.Fatalf("queue depth %d (%v) after the term ended; want the message taken off", n, err)
	}
}
