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
)

// A failed job with --retries 2 is submitted again twice, with backoff, each retry naming the job
// it retries; a job after it waits for its retries, and fails once the last one failed.
func TestRetry_Automatic(t *testing.T) {
	r := newRig(t)
	var retried []Event
	evs := make(chan Event, 16)
	r.leadWith(1, func(c *Config) {
		c.RetryBackoff = time.Second
		c.OnEvent = func(ev Event) {
			if ev.Kind == EventJobRetried {
				evs <- ev
			}
		}
	})
	r.work(worker.Config{MaxAttempts: 1})
	ctx := context.Background()
	a, err := r.cl.Submit(ctx, "sleep", json.RawMessage(`{"shards":1,"fail_always":[0]}`), client.WithRetries(2))
	if err != nil {
		t.Fatal(err)
	}
	b := r.submitAfter("sleep", `{"shards":1}`, a)
	r1, _ := protocol.RetryJobID(a)
	r2, _ := protocol.RetryJobID(r1)
	if st := r.wait(a, 30*time.Second); st.State != jobs.StateFailed {
		t.Fatalf("a: %+v", st)
	}
	failedAt := time.Now()
	eventually(t, 30*time.Second, "the second retry is submitted", func() bool {
		_, err := r.cl.Status(ctx, r2)
		return err == nil
	})
	st := r.wait(r2, 60*time.Second)
	if st.State != jobs.StateFailed || st.RetryOf != r1 {
		t.Fatalf("second retry: %+v", st)
	}
	// Backoff: 1s before the first retry, 2s before the second.
	if took := time.Since(failedAt); took < 3*time.Second {
		t.Fatalf("two retries within %v: no backoff", took)
	}
	if s1, err := r.cl.Status(ctx, r1); err != nil || s1.RetryOf != a || s1.State != jobs.StateFailed {
		t.Fatalf("first retry: %+v %v", s1, err)
	}
	r3, _ := protocol.RetryJobID(r2)
	if _, err := r.cl.Status(ctx, r3); err == nil {
		t.Fatalf("a third retry %s of a job with --retries 2", r3)
	}
	if st := r.wait(b, 20*time.Second); st.State != jobs.StateFailed || !strings.Contains(st.Error, r2) {
		t.Fatalf("b after a failed thrice: %+v", st)
	}
	close(evs)
	for ev := range evs {
		retried = append(retried, ev)
	}
	if len(retried) != 2 {
		t.Fatalf("retried events: %v", retried)
	}
}

// `retry` of a failed or cancelled job submits its spec again under a new id; a running job is
// refused.
func TestRetry_Manual(t *testing.T) {
	r := newRig(t)
	r.lead(1)
	ctx := context.Background()
	a := r.submit("sleep", `{"shards":1,"duration":"30s"}`)
	eventually(t, 10*time.Second, "a runs", func() bool {
		st, err := r.cl.Status(ctx, a)
		return err == nil && st.State == jobs.StateRunning
	})
	if _, err := r.cl.Retry(ctx, a); err == nil || !strings.Contains(err.Error(), "only a failed or cancelled job can be retried") {
		t.Fatalf("retry of a running job: %v", err)
	}
	if _, err := r.cl.Cancel(ctx, a); err != nil {
		t.Fatal(err)
	}
	if st := r.wait(a, 10*time.Second); st.State != jobs.StateCancelled {
		t.Fatalf("a: %+v", st)
	}
	b, err := r.cl.Retry(ctx, a)
	if err != nil {
		t.Fatal(err)
	}
	st, err := r.cl.Status(ctx, b)
	if err != nil || b == a || st.RetryOf != a || st.Type != "sleep" {
		t.Fatalf("retry: %s %+v %v", b, st, err)
	}
	if _, err := r.cl.Retry(ctx, "20260101-000000-00000000"); err == nil || !strings.Contains(err.Error(), "no such job") {
		t.Fatalf("retry of a job that does not exist: %v", err)
	}
}
