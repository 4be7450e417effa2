package coordinator

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mapagg/mapagg/internal/harness/testenv"
	"github.com/mapagg/mapagg/internal/protocol"
	"github.com/mapagg/mapagg/internal/worker"
	"github.com/mapagg/mapagg/jobs"
	"github.com/mapagg/mapagg/store"
)

// writeLog is storage that counts the writes of each blob and, once dead, refuses every write:
// a leader whose process died (nothing it sends lands).
type writeLog struct {
	Store
	dead   atomic.Bool
	mu     sync.Mutex
	writes map[string]int
}

var errDead = errors.New("the leader's process is gone")

func (s *writeLog) wrote(name string) error {
	if s.dead.Load() {
		return errDead
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.writes == nil {
		s.writes = map[string]int{}
	}
	s.writes[name]++
	return nil
}

func (s *writeLog) count(name string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.writes[name]
}

func (s *writeLog) Put(ctx context.Context, name string, data []byte, cond store.Cond) (store.ETag, error) {
	if err := s.wrote(name); err != nil {
		return "", err
	}
	return s.Store.Put(ctx, name, data, cond)
}

func (s *writeLog) PutMeta(ctx context.Context, name string, data []byte, meta map[string]string, cond store.Cond) (store.ETag, error) {
	if err := s.wrote(name); err != nil {
		return "", err
	}
	return s.Store.PutMeta(ctx, name, data, meta, cond)
}

func (s *writeLog) Delete(ctx context.Context, name string) error {
	if err := s.wrote("delete " + name); err != nil {
		return err
	}
	return s.Store.Delete(ctx, name)
}

// smallRig is a rig whose client puts specs in queue messages, and a term (on st, with the
// given checkpoint interval) that listens long enough for new messages to be taken in light.
func smallRig(t *testing.T, st *writeLog, interval time.Duration) (*rig, *leading, chan string) {
	r := newRig(t)
	r.cl.InlineSpec = true
	st.Store = r.st
	planned := make(chan string, 16)
	l := r.leadOn(1, st, func(c *Config) {
		c.CheckpointInterval = interval
		c.OnEvent = func(e Event) {
			if e.Kind == EventJobPlanned {
				planned <- e.Job
			}
		}
	})
	time.Sleep(lightSkew + 1500*time.Millisecond) // messages queued from now on are light (smalljob.go)
	return r, l, planned
}

func waitPlanned(t *testing.T, planned chan string, id string) {
	t.Helper()
	select {
	case got := <-planned:
		if got != id {
			t.Fatalf("planned %s, want %s", got, id)
		}
	case <-time.After(20 * time.Second):
		t.Fatalf("job %s not planned", id)
	}
}

// A small job that ends within a checkpoint interval stores one checkpoint, no active marker,
// and its result; its status says succeeded.
func TestSmallJob_EndsInOneWrite(t *testing.T) {
	st := &writeLog{}
	r, _, planned := smallRig(t, st, time.Second)
	r.work(worker.Config{Concurrency: 2})
	id := r.submit("sleep", `{"shards":3}`)
	waitPlanned(t, planned, id)
	s := r.wait(id, 20*time.Second)
	if s.State != jobs.StateSucceeded {
		t.Fatalf("state %s: %s", s.State, s.Error)
	}
	sameJSON(t, s.Result, []byte(`{"shards":3,"index_sum":3}`))
	testenv.Eventually(t, 10*time.Second, 20*time.Millisecond, func() bool {
		n, err := r.q.Depth(context.Background())
		return err == nil && n == 0
	}, "the job's message was not deleted")
	if n := st.count(protocol.CheckpointBlob(id)); n != 1 {
		t.Errorf("%d checkpoint writes, want 1", n)
	}
	if n := st.count(protocol.ActiveBlob(id)) + st.count("delete "+protocol.ActiveBlob(id)); n != 0 {
		t.Errorf("%d writes of the active marker, want none", n)
	}
}

// A small job whose leader dies before anything of it is stored is taken in again from its
// message by the next leader, and ends exact.
func TestSmallJob_LeaderCrashBeforeItsFirstWrite(t *testing.T) {
	st := &writeLog{}
	r, l1, planned := smallRig(t, st, 5*time.Second)
	id := r.submit("sleep", `{"shards":4,"duration":"1ms"}`)
	waitPlanned(t, planned, id)
	if s, err := r.cl.Status(context.Background(), id); err != nil || s.State != jobs.StateQueued {
		t.Fatalf("status of a small job before its first write: %+v %v", s, err)
	}
	st.dead.Store(true) // the process is gone: its step-down writes go nowhere
	_ = l1.stop()
	if ok, err := r.st.Exists(context.Background(), protocol.CheckpointBlob(id)); err != nil || ok {
		t.Fatalf("checkpoint exists=%v (%v) after the crash", ok, err)
	}
	r.lead(2)
	r.work(worker.Config{Concurrency: 2})
	s := r.wait(id, 30*time.Second)
	if s.State != jobs.StateSucceeded {
		t.Fatalf("after the crash: %s (%s)", s.State, s.Error)
	}
	sameJSON(t, s.Result, []byte(`{"shards":4,"index_sum":6}`))
}

// A graceful handover stores a small job at once (its marker, its checkpoint) and deletes its
// message, so the next leader resumes it from the checkpoint without waiting for the message.
func TestSmallJob_HandoverStoresIt(t *testing.T) {
	st := &writeLog{}
	r, l1, planned := smallRig(t, st, 5*time.Second)
	id := r.submit("sleep", `{"shards":4,"duration":"1ms"}`)
	waitPlanned(t, planned, id)
	// The plan event comes before intake hands the job to the term's loop; the loop holds it
	// once its shards are published. A term that ends between the two has not got the job to
	// hand over (its message brings it back): stop after.
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if n, _, err := r.b.JobBacklog(context.Background(), id); err == nil && n > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no shard of %s published within 20s", id)
		}
	}
	if err := l1.stop(); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{protocol.ActiveBlob(id), protocol.CheckpointBlob(id)} {
		if ok, err := r.st.Exists(context.Background(), name); err != nil || !ok {
			t.Fatalf("%s exists=%v (%v) after the handover", name, ok, err)
		}
	}
	if n, err := r.q.Depth(context.Background()); err != nil || n != 0 {
		t.Fatalf("queue depth %d (%v) after the handover; want the message deleted", n, err)
	}
	r.lead(2)
	r.work(worker.Config{Concurrency: 2})
	s := r.wait(id, 30*time.Second)
	if s.State != jobs.StateSucceeded {
		t.Fatalf("after the handover: %s (%s)", s.State, s.Error)
	}
	sameJSON(t, s.Result, []byte(`{"shards":4,"index_sum":6}`))
}

// A small job cancelled while it runs ends cancelled in its one write.
func TestSmallJob_CancelledWhileRunning(t *testing.T) {
	st := &writeLog{}
	r, _, planned := smallRig(t, st, 5*time.Second)
	id := r.submit("sleep", `{"shards":4}`)
	waitPlanned(t, planned, id)
	if _, err := r.cl.Cancel(context.Background(), id); err != nil {
		t.Fatal(err)
	}
	s := r.wait(id, 20*time.Second)
	if s.State != jobs.StateCancelled || !strings.Contains(s.Error, "cancelled") {
		t.Fatalf("cancelled small job: %s (%s)", s.State, s.Error)
	}
	if n := st.count(protocol.CheckpointBlob(id)); n != 1 {
		t.Errorf("%d checkpoint writes, want 1", n)
	}
}

// Two messages of one small job (a requeue, a resubmit of one id), both light: the job runs to
// one answer, and the second message is taken the full way once it finds the job stored (or
// held), leaving no message and no active marker behind.
func TestSmallJob_SecondMessageOfOneJob(t *testing.T) {
	st := &writeLog{}
	r, _, planned := smallRig(t, st, time.Second)
	r.work(worker.Config{Concurrency: 2})
	id := r.submit("sleep", `{"shards":3}`)
	if err := r.q.Enqueue(context.Background(), id); err != nil {
		t.Fatal(err)
	}
	waitPlanned(t, planned, id)
	s := r.wait(id, 20*time.Second)
	if s.State != jobs.StateSucceeded {
		t.Fatalf("state %s: %s", s.State, s.Error)
	}
	sameJSON(t, s.Result, []byte(`{"shards":3,"index_sum":3}`))
	ctx := context.Background()
	testenv.Eventually(t, 30*time.Second, 50*time.Millisecond, func() bool {
		n, err := r.q.Depth(ctx)
		marks, lerr := r.st.List(ctx, protocol.ActivePrefix)
		return err == nil && n == 0 && lerr == nil && len(marks) == 0
	}, "a message or an active marker of the job was left")
	if s, err := r.cl.Status(ctx, id); err != nil || s.State != jobs.StateSucceeded {
		t.Fatalf("status after the second message: %+v %v", s, err)
	}
	sameJSON(t, s.Result, []byte(`{"shards":3,"index_sum":3}`))
}
