package coordinator

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"runtime"
	"runtime/pprof"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mapagg/mapagg/internal/harness/testenv"
	"github.com/mapagg/mapagg/internal/protocol"
	"github.com/mapagg/mapagg/internal/worker"
	"github.com/mapagg/mapagg/jobs"
	"github.com/mapagg/mapagg/store"
)

// heapPeak samples the process's HeapInuse after a collection (the live heap: garbage not yet
// collected is not the plan) until stop is called, and returns the peak.
func heapPeak() (stop func() uint64) {
	var peak atomic.Uint64
	done := make(chan struct{})
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		var ms runtime.MemStats
		for {
			runtime.GC()
			runtime.ReadMemStats(&ms)
			if ms.HeapInuse > peak.Load() {
				if f := os.Getenv("MAPAGG_HEAPPROFILE"); f != "" && ms.HeapInuse > peak.Load()+4<<20 {
					if out, err := os.Create(f); err == nil {
						_ = pprof.Lookup("heap").WriteTo(out, 0)
						out.Close()
					}
				}
				peak.Store(ms.HeapInuse)
			}
			select {
			case <-done:
				return
			case <-time.After(200 * time.Millisecond):
			}
		}
	}()
	return func() uint64 { close(done); <-finished; return peak.Load() }
}

// storedPlan lists the plan blobs of a job.
func (r *rig) storedPlan(id string) []string {
	r.t.Helper()
	bs, err := r.st.List(context.Background(), id+"/plan-")
	if err != nil {
		r.t.Fatal(err)
	}
	var names []string
	for _, b := range bs {
		names = append(names, b.Name)
	}
	return names
}

// A job whose plan is a function of its parameters is never materialized: a sleep job of
// MaxShards shards is planned, dispatched through its window, taken over by a new leader at about
// half-way and finished exactly, with no plan stored and the heap of this whole process (leaders,
// workers and the NATS server) under a bound that a materialized plan alone would exceed (a
// million sleep shard descriptions take 85 MiB). Slow (about 2 minutes under -race): run with
// MAPAGG_MILLION=1 (make test-million); the cheap case below runs the same path at 20,000 shards.
func TestPlan_MillionShardJobInBoundedMemory(t *testing.T) {
	if os.Getenv("MAPAGG_MILLION") == "" {
		t.Skip("a million shards: set MAPAGG_MILLION=1 or run make test-million (about 2 minutes under -race)")
	}
	indexedJobAcrossTakeover(t, jobs.MaxShards, 64<<20)
}

func TestPlan_IndexedJobAcrossTakeover(t *testing.T) {
	indexedJobAcrossTakeover(t, 20_000, 64<<20)
}

func indexedJobAcrossTakeover(t *testing.T, shards int, heapBound uint64) {
	r := newRig(t)
	runtime.GC()
	peak := heapPeak()
	cfg := func(c *Config) { c.CheckpointInterval, c.StallTimeout = 100*time.Millisecond, time.Minute }
	l1 := r.leadWith(1, cfg)
	r.work(worker.Config{Concurrency: 8})
	id := r.submit("sleep", fmt.Sprintf(`{"shards":%d}`, shards))
	testenv.Eventually(t, 10*time.Minute, 50*time.Millisecond, func() bool {
		st, err := r.cl.Status(context.Background(), id)
		return err == nil && st.ShardsDone >= shards/2
	}, "leader 1 did not get half-way")
	if names := r.storedPlan(id); len(names) != 0 {
		t.Fatalf("an indexed plan stored %v", names)
	}
	if err := l1.stop(); err != nil {
		t.Fatal(err)
	}
	r.leadWith(2, cfg)
	st := r.wait(id, 20*time.Minute)
	most := peak()
	if st.State != jobs.StateSucceeded {
		t.Fatalf("state %s: %s", st.State, st.Error)
	}
	n := uint64(shards)
	sameJSON(t, st.Result, json.RawMessage(fmt.Sprintf(`{"shards":%d,"index_sum":%d}`, n, n*(n-1)/2)))
	t.Logf("%d shards: peak HeapInuse %.1f MiB, %d duplicates", shards, float64(most)/(1<<20), st.Duplicates)
	if most > heapBound {
		t.Fatalf("peak HeapInuse %.1f MiB, want at most %.0f MiB: is the plan materialized?", float64(most)/(1<<20), float64(heapBound)/(1<<20))
	}
}

// wordcountInput writes blobs for a wordcount whose plan spans several pages.
func (r *rig) wordcountInput() (container string) {
	r.t.Helper()
	ctx := context.Background()
	data := store.New(r.blob, testenv.Name(r.t, "text"))
	if err := data.Ensure(ctx); err != nil {
		r.t.Fatal(err)
	}
	for i := range 3 {
		s := strings.Repeat(fmt.Sprintf("alpha beta%d gamma ünïcödé delta%d\n", i, i*7), 2000+500*i)
		if _, err := data.Put(ctx, fmt.Sprintf("in/%d.txt", i), []byte(s), store.Cond{}); err != nil {
			r.t.Fatal(err)
		}
	}
	return data.Name()
}

// A job whose Split lists storage keeps a stored plan, in pages read as the window drains: a
// wordcount of more than two pages of shards, its leader replaced before the plan is dispatched,
// is exact, and its plan pages are deleted once it ends.
func TestPlan_StoredPlanStreamedAcrossTakeover(t *testing.T) {
	r := newRig(t)
	params := fmt.Sprintf(`{"container":%q,"prefix":"in/","top":5,"shard_bytes":200}`, r.wordcountInput())
	cfg := func(c *Config) { c.DispatchBatch, c.DispatchWindow = 16, 64 }
	l1 := r.leadWith(1, cfg)
	id := r.submit("wordcount", params)
	testenv.Eventually(t, 20*time.Second, 10*time.Millisecond, func() bool {
		ok, _ := r.st.Exists(context.Background(), protocol.CheckpointBlob(id))
		return ok
	}, "job not planned")
	pages := r.storedPlan(id)
	if len(pages) < 3 {
		t.Fatalf("plan pages %v: want at least 3 (the input is too small for the test)", pages)
	}
	for _, p := range pages {
		if !strings.HasPrefix(p, protocol.PlanPrefix(id, 1)) {
			t.Fatalf("plan page %s not under %s", p, protocol.PlanPrefix(id, 1))
		}
	}
	r.work(worker.Config{Concurrency: 2})
	testenv.Eventually(t, 30*time.Second, 10*time.Millisecond, func() bool {
		st, err := r.cl.Status(context.Background(), id)
		return err == nil && st.ShardsDone >= 100
	}, "leader 1 merged nothing")
	if err := l1.stop(); err != nil {
		t.Fatal(err)
	}
	r.leadWith(2, cfg)
	st := r.wait(id, 60*time.Second)
	if st.State != jobs.StateSucceeded {
		t.Fatalf("state %s: %s", st.State, st.Error)
	}
	if st.ShardsTotal <= 2*protocol.PlanPageShards {
		t.Fatalf("%d shards: want more than two pages", st.ShardsTotal)
	}
	sameJSON(t, st.Result, sequential(t, store.NewEnv(r.blob), "wordcount", params))
	testenv.Eventually(t, 10*time.Second, 20*time.Millisecond, func() bool { return len(r.storedPlan(id)) == 0 },
		"plan pages left after the job ended")
}

// A plan page that is corrupt (or of another position) is refused: the job fails, naming the
// page, instead of running a shard nobody planned.
func TestPlan_CorruptPageFailsTheJob(t *testing.T) {
	r := newRig(t)
	params := fmt.Sprintf(`{"container":%q,"prefix":"in/","shard_bytes":200}`, r.wordcountInput())
	r.leadWith(1, func(c *Config) { c.DispatchBatch, c.DispatchWindow = 16, 32 })
	id := r.submit("wordcount", params)
	page1 := protocol.PlanPageBlob(id, 1, 1)
	testenv.Eventually(t, 20*time.Second, 10*time.Millisecond, func() bool { // every page is stored
		ok, _ := r.st.Exists(context.Background(), protocol.CheckpointBlob(id))
		return ok
	}, "job not planned")
	// With no worker, the window (32 shards) keeps the dispatcher on page 0.
	// Page 0 in place of page 1: a valid page, in the wrong place.
	data, _, err := r.st.Get(context.Background(), protocol.PlanPageBlob(id, 1, 0))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.st.Put(context.Background(), page1, data, store.Cond{}); err != nil {
		t.Fatal(err)
	}
	r.work(worker.Config{Concurrency: 2})
	st := r.wait(id, 60*time.Second)
	if st.State != jobs.StateFailed || !strings.Contains(st.Error, "plan page 1") {
		t.Fatalf("state %s (%q), want failed naming plan page 1", st.State, st.Error)
	}
}
