package coordinator

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/mapagg/mapagg/client"
	"github.com/mapagg/mapagg/internal/protocol"
	"github.com/mapagg/mapagg/internal/worker"
	"github.com/mapagg/mapagg/jobs"
	"github.com/mapagg/mapagg/store"
)

// record reads a job's status record as a reader would: the checkpoint's metadata only.
func (r *rig) record(id string) *protocol.StatusRecord {
	r.t.Helper()
	p, err := r.st.Props(context.Background(), protocol.CheckpointBlob(id))
	if err != nil {
		r.t.Fatal(err)
	}
	rec, err := protocol.DecodeStatusRecord(p.Meta)
	if err != nil {
		r.t.Fatalf("status record of %s: %v", id, err)
	}
	return rec
}

// Every checkpoint write carries the job's status record: a finished job's says so, with its
// counts, its priority and its times; a resumed job's names the new leader's epoch.
// The shards are slow (60 × 150 ms over 2 slots) so the job is still running when its leader stops.
func TestStatusRecord_WrittenWithTheCheckpoint(t *testing.T) {
	r := newRig(t)
	first := r.lead(1)
	r.work(worker.Config{Concurrency: 2})
	ctx := context.Background()
	id, err := r.cl.Submit(ctx, "sleep", json.RawMessage(`{"shards":60,"duration":"150ms"}`), client.WithPriority(3))
	if err != nil {
		t.Fatal(err)
	}
	var rec *protocol.StatusRecord
	for rec == nil || rec.Done < 5 {
		time.Sleep(20 * time.Millisecond)
		if ok, _ := r.st.Exists(ctx, protocol.CheckpointBlob(id)); ok {
			rec = r.record(id)
		}
	}
	if rec.State != jobs.StateRunning || rec.Total != 60 || rec.Priority != 3 || rec.Epoch != 1 || rec.SubmittedAt.IsZero() {
		t.Fatalf("running record %+v", rec)
	}
	if err := first.stop(); err != nil {
		t.Fatal(err)
	}
	r.lead(2)
	r.wait(id, time.Minute)
	rec = r.record(id)
	if rec.State != jobs.StateSucceeded || rec.Done != 60 || rec.Epoch != 2 || rec.PlanEpoch != 1 || rec.FinishedAt == nil || rec.Priority != 3 {
		t.Fatalf("final record %+v", rec)
	}
}

// A job refused at intake has a record that says failed, with the reason.
func TestStatusRecord_RefusedJobSaysWhy(t *testing.T) {
	r := newRig(t)
	r.lead(1)
	ctx := context.Background()
	id := protocol.NewID(time.Now())
	spec, _ := (&protocol.Spec{ID: id, Type: "primes", Params: json.RawMessage(`{"from":10,"to":1,"shards":1}`), SubmittedAt: time.Now()}).Encode()
	if _, err := r.st.Put(ctx, protocol.SpecBlob(id), spec, store.Cond{}); err != nil {
		t.Fatal(err)
	}
	if err := r.q.Enqueue(ctx, id); err != nil {
		t.Fatal(err)
	}
	st := r.wait(id, 30*time.Second)
	rec := r.record(id)
	if rec.State != jobs.StateFailed || rec.Error == "" || rec.Error != st.Error || !strings.Contains(st.Error, "primes") {
		t.Fatalf("record %+v, status %+v", rec, st)
	}
}
