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
	"github.com/mapagg/mapagg/internal/harness/testenv"
	"github.com/mapagg/mapagg/internal/protocol"
	"github.com/mapagg/mapagg/internal/worker"
	"github.com/mapagg/mapagg/jobs"
	"github.com/mapagg/mapagg/store"
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

// A leader that cannot store the active marker does not plan the job (a checkpoint without its
// marker could be lost to no leader) and keeps its queue message: once markers can be stored,
// the next intake of the message plans the job, which runs once.
func TestIntake_MarkerFailureKeepsTheQueueMessage(t *testing.T) {
	r := newRig(t)
	st := &noMarkers{Store: r.st}
	st.on.Store(true)
	r.leadOn(1, st, func(c *Config) { c.RescanInterval, c.QueueVisibility = time.Hour, 2*time.Second })
	r.work(worker.Config{Concurrency: 2})
	id := r.submit("primes", `{"from":0,"to":100000,"shards":4}`)
	time.Sleep(3 * time.Second) // at least one intake of the message
	if ok, err := r.st.Exists(context.Background(), protocol.CheckpointBlob(id)); err != nil || ok {
		t.Fatalf("checkpoint exists=%v (%v) while its marker cannot be stored", ok, err)
	}
	if n, err := r.q.Depth(context.Background()); err != nil || n != 1 {
		t.Fatalf("queue depth %d (%v) while the marker cannot be stored; want the message kept", n, err)
	}
	st.on.Store(false)
	s := r.wait(id, 30*time.Second)
	if s.State != jobs.StateSucceeded || s.Duplicates != 0 {
		t.Fatalf("after the marker was stored: %s, %d duplicates (%s)", s.State, s.Duplicates, s.Error)
	}
	sameJSON(t, s.Result, json.RawMessage(`{"count":9592}`))
	testenv.Eventually(t, 10*time.Second, 50*time.Millisecond, func() bool {
		ok, err := r.st.Exists(context.Background(), protocol.ActiveBlob(id))
		return err == nil && !ok
	}, "the active marker stays after the job ended") // deleted by its clean-up
}

// A storage rollback (the emulator's kill -9) can keep a job's active marker and lose its first
// checkpoint after the queue message was deleted. The leader's rescan finds the marker without a
// checkpoint, queues the job again, and the job runs once.
func TestIntake_MarkedJobWithoutCheckpointQueuedAgain(t *testing.T) {
	r := newRig(t)
	ctx := context.Background()
	id := protocol.NewID(time.Now())
	spec, _ := (&protocol.Spec{ID: id, Type: "primes", Params: json.RawMessage(`{"from":0,"to":100000,"shards":4}`)}).Encode()
	for name, data := range map[string][]byte{protocol.SpecBlob(id): spec, protocol.ActiveBlob(id): nil} {
		if _, err := r.st.Put(ctx, name, data, store.Cond{}); err != nil {
			t.Fatal(err)
		}
	}
	r.leadWith(1, func(c *Config) { c.RescanInterval = 200 * time.Millisecond })
	r.work(worker.Config{Concurrency: 2})
	s := r.wait(id, 30*time.Second)
	if s.State != jobs.StateSucceeded || s.Duplicates != 0 {
		t.Fatalf("a marked job without a checkpoint: %s, %d duplicates (%s)", s.State, s.Duplicates, s.Error)
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

// A term that ends (a graceful handover) while a new job's marker is being written plans
// nothing and leaves the message on the queue: the next leader plans the job, which runs once.
func TestIntake_MarkerInFlightWhenTheTermEnds(t *testing.T) {
	r := newRig(t)
	st := &heldMarkers{Store: r.st, release: make(chan struct{})}
	l := r.leadOn(1, st, func(c *Config) { c.QueueVisibility = 2 * time.Second })
	id := r.submit("sleep", `{"shards":10,"duration":"1ms"}`)
	time.Sleep(time.Second) // the marker write is in flight
	l.cancel()
	time.Sleep(100 * time.Millisecond)
	close(st.release)
	<-l.done
	if ok, err := r.st.Exists(context.Background(), protocol.CheckpointBlob(id)); err != nil || ok {
		t.Fatalf("checkpoint exists=%v (%v) after a term that ended during the marker write", ok, err)
	}
	r.lead(2)
	r.work(worker.Config{Concurrency: 2})
	if s := r.wait(id, 30*time.Second); s.State != jobs.StateSucceeded || s.Duplicates != 0 {
		t.Fatalf("after the next leader: %s, %d duplicates (%s)", s.State, s.Duplicates, s.Error)
	}
	if n, err := r.q.Depth(context.Background()); err != nil || n != 0 {
		t.Fatalf("queue depth %d (%v) after the job ran; want the message taken off", n, err)
	}
}
