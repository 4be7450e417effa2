package coordinator

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mapagg/mapagg/builtin"
	"github.com/mapagg/mapagg/internal/harness/testenv"
	"github.com/mapagg/mapagg/internal/harness/testworker/badjobs"
	"github.com/mapagg/mapagg/internal/protocol"
	"github.com/mapagg/mapagg/internal/worker"
	"github.com/mapagg/mapagg/jobs"
)

// codeEvents collects the coordinator's events of a test.
type codeEvents struct {
	mu  sync.Mutex
	evs []Event
}

func (c *codeEvents) on(ev Event) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.evs = append(c.evs, ev)
}

func (c *codeEvents) of(kind EventKind, job string) []Event {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []Event
	for _, ev := range c.evs {
		if ev.Kind == kind && (job == "" || ev.Job == job) {
			out = append(out, ev)
		}
	}
	return out
}

// Each bad job fails alone, naming the panic and the user's frame (or the permanent error and
// its shard), while a primes job beside them is exact and the term never ends.
func TestLead_BadJobCodeFailsOnlyItsJob(t *testing.T) {
	r := newRig(t)
	reg := badjobs.Registry()
	r.cl.Registry = reg
	var evs codeEvents
	l := r.leadWith(1, func(c *Config) { c.Registry, c.OnEvent = reg, evs.on })
	r.work(worker.Config{Registry: reg, Concurrency: 4, RetryBackoff: time.Second})

	const primes = `{"from":0,"to":200000,"shards":20}`
	good := r.submit("primes", primes)
	want := map[string][]string{
		"bad-merge":  {"merge: panic: assignment to entry in nil map", "badjobs.mergeCounts (badjobs/badjobs.go:"},
		"bad-split":  {"split: panic: runtime error: index out of range [4] with length 4", "badjobs.BadSplit.Split (badjobs/badjobs.go:"},
		"bad-check":  {"merge: panic: runtime error: invalid memory address or nil pointer dereference", "badjobs.BadCheck.Check (badjobs/badjobs.go:"},
		"bad-result": {"result: panic: bad-result: cannot summarize 3 keys", "badjobs.BadResult.Result (badjobs/badjobs.go:"},
		"permanent":  {"shard 1 of job", "failed permanently (attempt 1, not retried): parse record 1: unexpected byte 0xff"},
	}
	ids := map[string]string{}
	for _, typ := range badjobs.Types {
		ids[typ] = r.submit(typ, `{"shards":4}`)
	}
	for _, typ := range badjobs.Types {
		st := r.wait(ids[typ], 20*time.Second)
		if st.State != jobs.StateFailed {
			t.Errorf("%s: %s, want failed", typ, st.State)
			continue
		}
		for _, w := range want[typ] {
			if !strings.Contains(st.Error, w) {
				t.Errorf("%s: error %q, want it to hold %q", typ, st.Error, w)
			}
		}
		if typ != "permanent" && len(evs.of(EventJobCodeFailed, ids[typ])) == 0 {
			t.Errorf("%s: no %s event", typ, EventJobCodeFailed)
		}
	}
	// The aggregate a panicking Merge may have half-updated is never stored.
	data, _, err := r.st.Get(context.Background(), protocol.CheckpointBlob(ids["bad-merge"]))
	if err != nil {
		t.Fatal(err)
	}
	if cp, err := protocol.DecodeCheckpoint(data); err != nil {
		t.Error(err)
	} else if len(cp.Aggregate) != 0 || cp.State != jobs.StateFailed {
		t.Errorf("bad-merge's checkpoint: %s with a %d-byte aggregate", cp.State, len(cp.Aggregate))
	}
	st := r.wait(good, 30*time.Second)
	if st.State != jobs.StateSucceeded {
		t.Fatalf("primes: %s %s", st.State, st.Error)
	}
	sameJSON(t, st.Result, sequential(t, nil, "primes", primes))
	select {
	case <-l.done:
		t.Fatalf("the term ended: %v", l.err)
	default:
	}
	if n := len(evs.of(EventTermEnded, "")); n != 0 {
		t.Errorf("%d terms ended", n)
	}
	// Stored as failed: no active marker is left for a next leader to resume.
	testenv.Eventually(t, 10*time.Second, 20*time.Millisecond, func() bool {
		marks, err := r.st.List(context.Background(), protocol.ActivePrefix)
		return err == nil && len(marks) == 0
	}, "active markers left")
}

// A job whose code panics when a new leader resumes it (restoring its aggregate) is stored as
// failed by that leader, once: the next leader does not try again.
func TestLead_ResumePanicStoresTheJobFailed(t *testing.T) {
	r := newRig(t)
	good := jobs.NewRegistry()
	if err := good.Register(jobs.Typed("bad-check", jobs.TypedJob[badjobs.Params, int, badjobs.Counts](badjobs.BadResult{}))); err != nil {
		t.Fatal(err)
	}
	r.cl.Registry = good
	l1 := r.leadWith(1, func(c *Config) { c.Registry = good })
	id := r.submit("bad-check", `{"shards":4}`)
	testenv.Eventually(t, 10*time.Second, 20*time.Millisecond, func() bool {
		st, err := r.cl.Status(context.Background(), id)
		return err == nil && st.State == jobs.StateRunning
	}, "job not planned")
	if err := l1.stop(); err != nil {
		t.Fatal(err)
	}
	var evs codeEvents
	l2 := r.leadWith(2, func(c *Config) { c.Registry, c.OnEvent = badjobs.Registry(), evs.on })
	st := r.wait(id, 10*time.Second)
	if st.State != jobs.StateFailed || !strings.Contains(st.Error, "resume: ") || !strings.Contains(st.Error, "panic: runtime error: invalid memory address") ||
		!strings.Contains(st.Error, "badjobs.BadCheck.Check") {
		t.Fatalf("job %s: %q", st.State, st.Error)
	}
	if len(evs.of(EventJobCodeFailed, id)) != 1 {
		t.Errorf("events: %v", evs.of(EventJobCodeFailed, ""))
	}
	select {
	case <-l2.done:
		t.Fatalf("the term ended: %v", l2.err)
	default:
	}
	testenv.Eventually(t, 10*time.Second, 20*time.Millisecond, func() bool {
		ok, err := r.st.Exists(context.Background(), protocol.ActiveBlob(id))
		return err == nil && !ok
	}, "active marker left")
}

// A job whose type the leader lacks waits, naming the workers that have the type, and runs
// exactly once a leader that has it is elected.
func TestLead_UnknownTypeWaitsForALeaderWithIt(t *testing.T) {
	r := newRig(t)
	onlyPrimes := jobs.NewRegistry()
	if err := onlyPrimes.Register(builtin.Jobs()[0]); err != nil {
		t.Fatal(err)
	}
	var evs codeEvents
	l1 := r.leadWith(1, func(c *Config) {
		c.Registry, c.OnEvent = onlyPrimes, evs.on
		c.TypeHolders = func(typ string) []string { return []string{"w2", "w3"} }
	})
	r.work(worker.Config{Concurrency: 2})
	const pi = `{"samples":200000,"shards":8,"seed":3}`
	id := r.submit("pi", pi)
	testenv.Eventually(t, 10*time.Second, 20*time.Millisecond, func() bool {
		s, err := r.cl.Status(context.Background(), id)
		return err == nil && s.State == jobs.StateWaiting && s.Error == "no leader with type pi; workers with it: w2, w3"
	}, "job not waiting")
	if len(evs.of(EventJobWaiting, id)) != 1 {
		t.Errorf("waiting events: %v", evs.of(EventJobWaiting, ""))
	}
	// Cancel waits too: a second waiting job is cancelled by the leader that lacks its type.
	other := r.submit("pi", pi)
	testenv.Eventually(t, 10*time.Second, 20*time.Millisecond, func() bool {
		s, err := r.cl.Status(context.Background(), other)
		return err == nil && s.State == jobs.StateWaiting
	}, "second job not waiting")
	if _, err := r.cl.Cancel(context.Background(), other); err != nil {
		t.Fatal(err)
	}
	if s := r.wait(other, 10*time.Second); s.State != jobs.StateCancelled {
		t.Errorf("cancelled waiting job: %s %s", s.State, s.Error)
	}
	if err := l1.stop(); err != nil {
		t.Fatal(err)
	}
	r.leadWith(2, func(c *Config) {})
	s := r.wait(id, 20*time.Second)
	if s.State != jobs.StateSucceeded {
		t.Fatalf("job %s: %s", s.State, s.Error)
	}
	sameJSON(t, s.Result, sequential(t, nil, "pi", pi))
	if s.PlanEpoch != 2 {
		t.Errorf("plan epoch %d, want 2", s.PlanEpoch)
	}
}

// A running job claimed by a leader that lacks its type is paused (waiting, its progress kept),
// and resumed where it was by a leader that has the type: same plan, exact result.
func TestLead_RunningJobPausedByALeaderWithoutItsType(t *testing.T) {
	r := newRig(t)
	l1 := r.lead(1)
	const pi = `{"samples":400000,"shards":16,"seed":5}`
	id := r.submit("pi", pi)
	testenv.Eventually(t, 10*time.Second, 20*time.Millisecond, func() bool {
		s, err := r.cl.Status(context.Background(), id)
		return err == nil && s.State == jobs.StateRunning
	}, "job not planned")
	if err := l1.stop(); err != nil {
		t.Fatal(err)
	}
	onlyPrimes := jobs.NewRegistry()
	if err := onlyPrimes.Register(builtin.Jobs()[0]); err != nil {
		t.Fatal(err)
	}
	var evs codeEvents
	l2 := r.leadWith(2, func(c *Config) { c.Registry, c.OnEvent = onlyPrimes, evs.on })
	testenv.Eventually(t, 10*time.Second, 20*time.Millisecond, func() bool {
		s, err := r.cl.Status(context.Background(), id)
		return err == nil && s.State == jobs.StateWaiting && s.Error == "no leader with type pi; workers with it: none" && s.ShardsTotal == 16
	}, "job not paused")
	if len(evs.of(EventJobWaiting, id)) != 1 {
		t.Errorf("waiting events: %v", evs.of(EventJobWaiting, ""))
	}
	if err := l2.stop(); err != nil {
		t.Fatal(err)
	}
	r.lead(3)
	r.work(worker.Config{Concurrency: 2})
	s := r.wait(id, 20*time.Second)
	if s.State != jobs.StateSucceeded {
		t.Fatalf("job %s: %s", s.State, s.Error)
	}
	sameJSON(t, s.Result, sequential(t, nil, "pi", pi))
	if s.PlanEpoch != 1 {
		t.Errorf("plan epoch %d, want 1 (resumed, not planned again)", s.PlanEpoch)
	}
}

// BenchmarkIsolate is what isolating one Merge costs the merge loop (no panic).
//
//	go test -run XXX -bench Isolate ./coordinator/
func BenchmarkIsolate(b *testing.B) {
	j := &job{spec: &protocol.Spec{Type: "x"}}
	var n int64
	for b.Loop() {
		_ = j.call("merge", func() error { n++; return nil })
	}
	if n == 0 {
		b.Fatal("not called")
	}
}
