package coordinator

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/mapagg/mapagg/client"
	"github.com/mapagg/mapagg/internal/harness/testenv"
	"github.com/mapagg/mapagg/internal/worker"
	"github.com/mapagg/mapagg/jobs"
)

// threeWorkers starts three one-slot workers.
func (r *rig) threeWorkers() {
	for i := 1; i <= 3; i++ {
		r.work(worker.Config{ID: fmt.Sprintf("w%d", i), Concurrency: 1})
	}
}

// A 20-shard job submitted a second after a 4,000-shard job of the same type (20 ms shards,
// 3 workers) finishes while the big one still runs: it does not wait behind the big job's shards.
// (Before fair dispatch the big job's 4,000 shards were all in the stream ahead of it.)
func TestFair_SmallJobOvertakesBigOne(t *testing.T) {
	r := newRig(t)
	r.lead(1)
	r.threeWorkers()
	ctx := context.Background()
	big := r.submit("sleep", `{"shards":4000,"duration":"20ms"}`)
	submitted := time.Now()
	testenv.Eventually(t, 30*time.Second, 10*time.Millisecond, func() bool {
		st, err := r.cl.Status(ctx, big)
		return err == nil && st.ShardsDone > 0
	}, "the big job did not start")
	time.Sleep(time.Until(submitted.Add(time.Second))) // the scenario: one second later
	small := r.submit("sleep", `{"shards":20,"duration":"20ms"}`)
	start := time.Now()
	st := r.wait(small, 2*time.Minute)
	took := time.Since(start)
	if st.State != jobs.StateSucceeded {
		t.Fatalf("small job %s: %s", st.State, st.Error)
	}
	sameJSON(t, st.Result, json.RawMessage(`{"shards":20,"index_sum":190}`))
	b, err := r.cl.Status(ctx, big)
	if err != nil {
		t.Fatal(err)
	}
	if b.State != jobs.StateRunning || b.ShardsDone >= b.ShardsTotal {
		t.Fatalf("the big job is %s with %d of %d merged when the small one finished: the small one waited behind it", b.State, b.ShardsDone, b.ShardsTotal)
	}
	t.Logf("small job: submit to succeeded %v (big job %d/%d merged meanwhile)", took.Round(time.Millisecond), b.ShardsDone, b.ShardsTotal)
}

// Two big jobs of one type share the workers by priority: the job of priority 2 gets about four
// times the shards of the job of priority 0 once both run. The shards take 30 ms so that the
// workers are what limits the jobs: priority splits the workers' time, and with 10 ms shards under
// -race on a loaded 2-core machine the leader's own dispatch and merge were the limit (a 2.0:1
// split in CI). The budget's floor is low so that the first job's first window (the whole budget,
// before the second job exists) drains in well under a second.
func TestFair_PriorityWeightsTheShare(t *testing.T) {
	r := newRig(t)
	r.leadWith(1, func(c *Config) { c.FairMinShards, c.FairHorizon = 64, 300*time.Millisecond })
	r.threeWorkers()
	ctx := context.Background()
	submit := func(p int) string {
		id, err := r.cl.Submit(ctx, "sleep", json.RawMessage(`{"shards":3000,"duration":"30ms"}`), client.WithPriority(p))
		if err != nil {
			t.Fatal(err)
		}
		return id
	}
	low, high := submit(0), submit(2)
	done := func(id string) int {
		st, err := r.cl.Status(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		return st.ShardsDone
	}
	// Past the start (the first job's first window is in the stream before the second's).
	testenv.Eventually(t, time.Minute, 20*time.Millisecond, func() bool { return done(high) >= 100 }, "the priority-2 job did not get going")
	l0, h0 := done(low), done(high)
	testenv.Eventually(t, time.Minute, 20*time.Millisecond, func() bool { return done(high)-h0 >= 300 }, "the priority-2 job stalled")
	dl, dh := done(low)-l0, done(high)-h0
	if dh < 2*dl {
		t.Fatalf("merged meanwhile: priority 2 %d shards, priority 0 %d; want about 4:1 (at least 2:1)", dh, dl)
	}
	t.Logf("merged meanwhile: priority 2 %d shards, priority 0 %d", dh, dl)
	list, err := r.cl.List(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range list {
		want := map[string]float64{low: 0.2, high: 0.8}[s.ID]
		if s.State == jobs.StateRunning && (s.Share < want-0.01 || s.Share > want+0.01) {
			t.Errorf("job %s (priority %d): share %.2f, want %.2f", s.ID, s.Priority, s.Share, want)
		}
	}
}
