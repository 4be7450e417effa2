package coordinator

import (
	"context"
	"encoding/json"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mapagg/mapagg/client"
	"github.com/mapagg/mapagg/internal/worker"
	"github.com/mapagg/mapagg/jobs"
)

func (r *rig) submitAfter(typ, params string, after ...string) string {
	r.t.Helper()
	id, err := r.cl.Submit(context.Background(), typ, json.RawMessage(params), client.WithAfter(after...))
	if err != nil {
		r.t.Fatal(err)
	}
	return id
}

// A job submitted after another waits (with a reason naming it) and is planned only once the
// other has ended, across a change of leader.
func TestAfter_WaitsForPredecessor(t *testing.T) {
	r := newRig(t)
	// When b is planned, a's stored state must already be succeeded. The events alone cannot
	// say so: a's job_finished is emitted after its final checkpoint is stored, and a rescan of
	// the waiting b may run in between.
	var mu sync.Mutex
	var a, b string
	var planned []string // a's stored state each time b was planned
	record := func(ev Event) {
		mu.Lock()
		pa, pb := a, b
		mu.Unlock()
		if ev.Kind != EventJobPlanned || pb == "" || ev.Job != pb {
			return
		}
		st, err := r.cl.Status(context.Background(), pa)
		mu.Lock()
		defer mu.Unlock()
		if err != nil {
			planned = append(planned, "unreadable: "+err.Error())
			return
		}
		planned = append(planned, string(st.State))
	}
	l := r.leadObserved(1, record)
	// No worker yet: the first job cannot end.
	ida := r.submit("sleep", `{"shards":4,"duration":"50ms"}`)
	mu.Lock()
	a = ida
	mu.Unlock()
	idb := r.submitAfter("sleep", `{"shards":2}`, ida)
	mu.Lock()
	b = idb
	mu.Unlock()
	eventually(t, 10*time.Second, "b waits", func() bool {
		st, err := r.cl.Status(context.Background(), idb)
		return err == nil && st.State == jobs.StateWaiting
	})
	st, _ := r.cl.Status(context.Background(), idb)
	if !strings.Contains(st.Error, "waiting for job "+ida) || len(st.After) != 1 {
		t.Fatalf("waiting job's status: %+v", st)
	}
	// A new leader takes both over; then the first can end.
	if err := l.stop(); err != nil {
		t.Fatal(err)
	}
	r.leadObserved(2, record)
	time.Sleep(500 * time.Millisecond)
	if st, _ := r.cl.Status(context.Background(), idb); st.State != jobs.StateWaiting {
		t.Fatalf("b is %s before a ended", st.State)
	}
	r.work(worker.Config{})
	if st := r.wait(idb, 30*time.Second); st.State != jobs.StateSucceeded {
		t.Fatalf("b: %+v", st)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(planned) == 0 {
		t.Fatal("b succeeded without a job_planned event")
	}
	for _, s := range planned {
		if s != string(jobs.StateSucceeded) {
			t.Fatalf("b planned while a was %s (every planning: %v)", s, planned)
		}
	}
}

// A job after one that fails (or is cancelled) fails with a reason naming it; one after a job
// that does not exist is refused at submit.
func TestAfter_PredecessorFails(t *testing.T) {
	r := newRig(t)
	r.lead(1)
	r.work(worker.Config{})
	a := r.submit("sleep", `{"shards":2,"duration":"1s","fail_always":[0]}`)
	b := r.submitAfter("sleep", `{"shards":1}`, a)
	c := r.submitAfter("sleep", `{"shards":1}`, b)
	st := r.wait(c, 60*time.Second)
	if st.State != jobs.StateFailed || !strings.Contains(st.Error, "job "+b+" it runs after failed") {
		t.Fatalf("c: %+v", st)
	}
	if st := r.wait(b, time.Second); st.State != jobs.StateFailed || !strings.Contains(st.Error, a) {
		t.Fatalf("b: %+v", st)
	}
	d := r.submit("sleep", `{"shards":1,"duration":"10s"}`)
	e := r.submitAfter("sleep", `{"shards":1}`, d)
	eventually(t, 10*time.Second, "e waits", func() bool {
		st, err := r.cl.Status(context.Background(), e)
		return err == nil && st.State == jobs.StateWaiting
	})
	if _, err := r.cl.Cancel(context.Background(), d); err != nil {
		t.Fatal(err)
	}
	if st := r.wait(e, 20*time.Second); st.State != jobs.StateFailed || !strings.Contains(st.Error, "job "+d+" it runs after cancelled") {
		t.Fatalf("e: %+v", st)
	}
	if _, err := r.cl.Submit(context.Background(), "sleep", json.RawMessage(`{"shards":1}`), client.WithAfter("20260101-000000-00000000")); err == nil || !strings.Contains(err.Error(), "no such job") {
		t.Fatalf("after a job that does not exist: %v", err)
	}
}
