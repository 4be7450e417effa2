package coordinator

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/mapagg/mapagg/builtin"
	"github.com/mapagg/mapagg/internal/harness/testenv"
	"github.com/mapagg/mapagg/jobs"
	"github.com/mapagg/mapagg/store"
)

// A storage rollback gives a second term the epoch of a running one: the second term finds the
// job checkpointed by another term of its own epoch, steps down naming both terms, and reports
// the epoch its next term must exceed; the first term goes on and finishes the job exact.
func TestFence_SameEpochOtherTermStepsDown(t *testing.T) {
	r := newRig(t)
	ctx := context.Background()
	a := r.lead(3)
	id := r.submit("sleep", `{"shards":4}`)
	shards := r.shardsOf(4)
	r.result(shards[0], 3, 1, nil)
	r.waitDone(id, 1)

	c, err := New(Config{Registry: builtin.Registry(), Logger: quietLog()}, r.st, r.q, connect(t, r.url), store.NewEnv(r.blob))
	if err != nil {
		t.Fatal(err)
	}
	lctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	err = c.Lead(lctx, 3)
	if !errors.Is(err, ErrDeposed) {
		t.Fatalf("second term of epoch 3: %v, want ErrDeposed", err)
	}
	for _, want := range []string{"another term with this term's epoch", "of epoch 3", "above 3"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
	if got := c.HighestEpochSeen(); got != 3 {
		t.Fatalf("HighestEpochSeen = %d, want 3", got)
	}
	select {
	case <-a.done:
		t.Fatalf("the first term stopped: %v", a.err)
	default:
	}
	for _, m := range shards[1:] {
		r.result(m, 3, 1, nil)
	}
	st := r.wait(id, 30*time.Second)
	sameJSON(t, st.Result, json.RawMessage(`{"shards":4,"index_sum":6}`))
}

// A term that finds a checkpoint of a higher epoch says which term wrote it.
func TestFence_HigherEpochNamedInError(t *testing.T) {
	r := newRig(t)
	r.lead(5)
	id := r.submit("sleep", `{"shards":2}`)
	r.shardsOf(2)
	r.waitDone(id, 0)
	c, err := New(Config{Registry: builtin.Registry(), Logger: quietLog()}, r.st, r.q, connect(t, r.url), store.NewEnv(r.blob))
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.newTerm(4).claim(context.Background(), id)
	if !errors.Is(err, ErrDeposed) || !strings.Contains(err.Error(), "of epoch 5, newer than this term") {
		t.Fatalf("claim by epoch 4: %v", err)
	}
	if c.HighestEpochSeen() != 5 {
		t.Fatalf("HighestEpochSeen = %d, want 5", c.HighestEpochSeen())
	}
}

// A cancel issued while no leader runs (during a failover) takes effect within a second of the
// next term's start: the claim reads the job's cancel marker (the rescan, an hour here, does not
// come into it).
func TestCoordinator_CancelCheckedAtClaim(t *testing.T) {
	r := newRig(t)
	ctx := context.Background()
	a := r.lead(1)
	id := r.submit("sleep", `{"shards":50}`)
	testenv.Eventually(t, 10*time.Second, 20*time.Millisecond, func() bool {
		st, err := r.cl.Status(ctx, id)
		return err == nil && st.State == jobs.StateRunning
	}, "job not running")
	if err := a.stop(); err != nil {
		t.Fatal(err)
	}
	if _, err := r.cl.Cancel(ctx, id); err != nil {
		t.Fatal(err)
	}
	finished := make(chan time.Time, 1)
	start := time.Now()
	r.leadWith(2, func(c *Config) {
		c.RescanInterval = time.Hour
		c.OnEvent = func(ev Event) {
			if ev.Kind == EventJobFinished && ev.Job == id {
				nonBlocking(finished, time.Now())
			}
		}
	})
	select {
	case at := <-finished:
		if took := at.Sub(start); took > time.Second {
			t.Fatalf("cancel took effect %v after the term started, want within 1s", took)
		} else {
			t.Logf("cancelled %v after the term started", took.Round(time.Millisecond))
		}
	case <-time.After(20 * time.Second):
		t.Fatal("cancel never took effect")
	}
	if st := r.wait(id, 10*time.Second); st.State != jobs.StateCancelled {
		t.Fatalf("state %s", st.State)
	}
}
