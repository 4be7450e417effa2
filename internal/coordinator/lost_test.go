package coordinator

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mapagg/mapagg/internal/harness/testenv"
	"github.com/mapagg/mapagg/internal/protocol"
	"github.com/mapagg/mapagg/jobs"
	"github.com/mapagg/mapagg/store"
)

// A job whose checkpoint and spec vanished with the storage (the jobs container deleted
// mid-job) fails with the cause at its next checkpoint write; the term goes on, and runs the
// next job to an exact result.
func TestCheckpoint_LostStateFailsTheJobAndKeepsTheTerm(t *testing.T) {
	r := newRig(t)
	ctx := context.Background()
	var (
		mu       sync.Mutex
		finished []Event
	)
	a := r.leadObserved(1, func(ev Event) {
		if ev.Kind == EventJobFinished {
			mu.Lock()
			finished = append(finished, ev)
			mu.Unlock()
		}
	})
	id, shards := r.firstCheckpointed()

	// The storage loses the jobs container; the next result makes a checkpoint write that
	// finds it missing (the container is created again) and the job's checkpoint gone.
	if _, err := r.blob.DeleteContainer(ctx, r.st.Name(), nil); err != nil {
		t.Fatal(err)
	}
	r.result(shards[1], 1, 1, nil)
	testenv.Eventually(t, 15*time.Second, 50*time.Millisecond, func() bool {
		st, err := r.cl.Status(ctx, id)
		return err == nil && st.State == jobs.StateFailed
	}, "the lost job's failed status not stored")
	st, err := r.cl.Status(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if st.Error != LostStateError {
		t.Fatalf("lost job's error %q, want %q", st.Error, LostStateError)
	}
	testenv.Eventually(t, 5*time.Second, 20*time.Millisecond, func() bool {
		mu.Lock()
		defer mu.Unlock()
		for _, ev := range finished {
			if ev.Job == id && ev.State == string(jobs.StateFailed) && ev.Err != nil && strings.Contains(ev.Err.Error(), LostStateError) {
				return true
			}
		}
		return false
	}, "no job-finished event naming the loss")

	// The term is still the leader: it runs a new job.
	select {
	case <-a.done:
		t.Fatalf("the term ended after a job's state was lost: %v", a.err)
	default:
	}
	id2 := r.submit("sleep", `{"shards":2}`)
	for _, m := range r.shardsOf(2) {
		if m.Job != id2 {
			t.Fatalf("shard of job %s, want %s", m.Job, id2)
		}
		r.result(m, 1, 1, nil)
	}
	st2 := r.wait(id2, 30*time.Second)
	sameJSON(t, st2.Result, json.RawMessage(`{"shards":2,"index_sum":1}`))
	if err := a.stop(); err != nil {
		t.Fatalf("Lead: %v", err)
	}
}

// A job whose recent blobs the store lost while its container stayed (Azurite killed: it loses
// the writes of its last few seconds) is not failed: the term writes back the spec, the active
// marker and the checkpoint it holds, and the job finishes exact, under the same term.
func TestCheckpoint_RolledBackStateIsWrittenBack(t *testing.T) {
	r := newRig(t)
	ctx := context.Background()
	a := r.lead(1)
	id, shards := r.firstCheckpointed()

	// The rollback: the storage is unreachable for a moment (as an emulator killed and
	// started again), and the job's spec, active marker and checkpoint are gone, the container
	// stays.
	storageTrouble(t)
	r.dropJobBlobs(id)
	r.result(shards[1], 1, 1, nil)
	testenv.Eventually(t, 15*time.Second, 50*time.Millisecond, func() bool {
		st, err := r.cl.Status(ctx, id)
		return err == nil && st.ShardsDone == 2
	}, "the lost checkpoint not written back")
	for _, name := range []string{protocol.SpecBlob(id), protocol.ActiveBlob(id)} {
		if ok, err := r.st.Exists(ctx, name); err != nil || !ok {
			t.Fatalf("%s not written back (exists %v, err %v)", name, ok, err)
		}
	}
	for _, m := range shards[2:] {
		r.result(m, 1, 1, nil)
	}
	st := r.wait(id, 30*time.Second)
	if st.State != jobs.StateSucceeded {
		t.Fatalf("job %s %s (%s), want succeeded", id, st.State, st.Error)
	}
	sameJSON(t, st.Result, json.RawMessage(`{"shards":4,"index_sum":6}`))
	select {
	case <-a.done:
		t.Fatalf("the term ended after the store lost a job's writes: %v", a.err)
	default:
	}
	if err := a.stop(); err != nil {
		t.Fatalf("Lead: %v", err)
	}
}

// The same blobs deleted without any storage trouble since the job's last checkpoint (an
// operator, or a deposed term's successor deleting an ended job) are no rollback: nothing is
// written back, and the job fails with the cause as a wiped one does.
func TestCheckpoint_DeletedWithoutTroubleIsNotWrittenBack(t *testing.T) {
	r := newRig(t)
	ctx := context.Background()
	r.lead(1)
	id, shards := r.firstCheckpointed()
	r.dropJobBlobs(id)
	r.result(shards[1], 1, 1, nil)
	testenv.Eventually(t, 15*time.Second, 50*time.Millisecond, func() bool {
		st, err := r.cl.Status(ctx, id)
		return err == nil && st.State == jobs.StateFailed && st.Error == LostStateError
	}, "the job whose blobs were deleted not failed with the cause")
	if ok, err := r.st.Exists(ctx, protocol.SpecBlob(id)); err != nil || ok {
		t.Fatalf("the deleted spec was written back (exists %v, err %v)", ok, err)
	}
}

// firstCheckpointed submits a sleep job of 4 shards, sends the first one's result and waits
// until its checkpoint counts it. It returns the job and its 4 shards.
func (r *rig) firstCheckpointed() (string, []*protocol.ShardMsg) {
	r.t.Helper()
	id := r.submit("sleep", `{"shards":4}`)
	shards := r.shardsOf(4)
	r.result(shards[0], 1, 1, nil)
	testenv.Eventually(r.t, 10*time.Second, 20*time.Millisecond, func() bool {
		st, err := r.cl.Status(context.Background(), id)
		return err == nil && st.ShardsDone == 1
	}, "first result not checkpointed")
	return id, shards
}

// dropJobBlobs deletes job id's checkpoint, spec and active marker, leaving the container: what
// an emulator that lost its last seconds of writes, or an operator, does.
func (r *rig) dropJobBlobs(id string) {
	r.t.Helper()
	for _, name := range []string{protocol.CheckpointBlob(id), protocol.SpecBlob(id), protocol.ActiveBlob(id)} {
		if err := r.st.Delete(context.Background(), name); err != nil {
			r.t.Fatal(err)
		}
	}
}

// storageTrouble makes one storage request of this process meet a transient failure (a
// connection refused), as an emulator that was killed does: store.TransientFailures changes.
func storageTrouble(t *testing.T) {
	t.Helper()
	before := store.TransientFailures()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := l.Addr().String()
	l.Close()
	conn := regexp.MustCompile(`BlobEndpoint=http://[^/;]+`).ReplaceAllString(testenv.Azurite(t), "BlobEndpoint=http://"+closed)
	bc, err := store.NewClient(conn)
	if err != nil {
		t.Fatal(err)
	}
	// The SDK's own retries (3, 0.1 s to 0.4 s apart) come first, then the transient policy
	// counts the failure and waits a second: the context ends then.
	ctx, cancel := context.WithTimeout(context.Background(), 1500*time.Millisecond)
	defer cancel()
	_, _, _ = store.New(bc, "nothing").Get(ctx, "nothing")
	if store.TransientFailures() == before {
		t.Fatal("a request to a closed port was not counted a transient failure")
	}
}

// A checkpoint write refused while the job's checkpoint is still there is a newer leader's:
// the state check does not hide a deposal.
func TestCheckpoint_RefusedWithStateStillDeposes(t *testing.T) {
	r := newRig(t)
	ctx := context.Background()
	a := r.lead(1)
	id := r.submit("sleep", `{"shards":3}`)
	shards := r.shardsOf(3)
	r.result(shards[0], 1, 1, nil)
	testenv.Eventually(t, 10*time.Second, 20*time.Millisecond, func() bool {
		st, err := r.cl.Status(ctx, id)
		return err == nil && st.ShardsDone == 1
	}, "first result not checkpointed")
	c, err := New(Config{Registry: r.cl.Registry, Logger: quietLog()}, r.st, r.q, r.b, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.newTerm(2).claim(ctx, id); err != nil {
		t.Fatal(err)
	}
	gen, err := r.st.Generation(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if lost := stateLost(ctx, c.newTerm(1).ck.store, id, gen); lost != nil {
		t.Fatalf("stateLost with the checkpoint there: %v", lost)
	}
	r.result(shards[1], 1, 1, nil)
	select {
	case <-a.done:
		if !errors.Is(a.err, ErrDeposed) {
			t.Fatalf("Lead: %v, want ErrDeposed", a.err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("the deposed term did not end")
	}
}

// A term whose results feed is taken by a newer leader's consumer ends naming that cause.
func TestLead_EndsNamingTheResultsFeedCause(t *testing.T) {
	r := newRig(t)
	ctx := context.Background()
	started := make(chan struct{}, 1)
	a := r.leadObserved(1, func(ev Event) {
		if ev.Kind == EventTermStarted {
			started <- struct{}{}
		}
	})
	select {
	case <-started:
	case <-time.After(15 * time.Second):
		t.Fatal("term not started")
	}
	f, err := connect(t, r.url).OpenResults(ctx, 2, 1)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Stop()
	select {
	case <-a.done:
	case <-time.After(15 * time.Second):
		t.Fatal("the term went on after a newer leader's consumer took the results stream")
	}
	if !errors.Is(a.err, ErrDeposed) || !strings.Contains(a.err.Error(), "results feed ended: a newer leader's consumer holds the stream") {
		t.Fatalf("Lead: %v, want ErrDeposed naming the results feed", a.err)
	}
}
