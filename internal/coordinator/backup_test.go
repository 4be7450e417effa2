package coordinator

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/RoaringBitmap/roaring/v2"

	"github.com/mapagg/mapagg/internal/harness/testenv"
	"github.com/mapagg/mapagg/internal/worker"
	"github.com/mapagg/mapagg/jobs"
)

// feed merges shards into done and b in the given order, each ran for run, at now.
func feed(b *backupState, done *roaring.Bitmap, run time.Duration, now time.Time, order ...int) {
	for _, i := range order {
		done.Add(uint32(i))
		b.merged(done, i, run.Microseconds(), now)
	}
}

func seq(from, to int) []int {
	var out []int
	for i := from; i < to; i++ {
		out = append(out, i)
	}
	return out
}

// looks looks for stragglers every backupCheckInterval from `from` to `to` (inclusive), as the
// loop does, and returns what was backed up and when first.
func looks(b *backupState, done *roaring.Bitmap, total int, from, to time.Time) ([]int, time.Time) {
	var got []int
	var first time.Time
	for at := from; !at.After(to); at = at.Add(backupCheckInterval) {
		if idx := b.stragglers(done, total, 1, backupMaxShards, at); len(idx) > 0 {
			if got == nil {
				first = at
			}
			got = append(got, idx...)
		}
	}
	return got, first
}

// A shard still missing when later ones were merged is backed up once it has been overtaken for
// the wait, and only once. The wait is backupMinWait for 20ms shards while shards of the job are
// still queued, 2 × 20ms once every one was pulled.
func TestBackupState_OvertakenShardBackedUpOnceAfterWait(t *testing.T) {
	for _, c := range []struct {
		name  string
		total int
		wait  time.Duration
	}{
		{"shards still queued", 20, backupMinWait},
		{"every shard pulled", 10, 40 * time.Millisecond},
	} {
		t.Run(c.name, func(t *testing.T) {
			var b backupState
			done := roaring.New()
			t0 := time.Now()
			feed(&b, done, 20*time.Millisecond, t0, 0, 1, 2)
			t1 := t0.Add(5 * time.Millisecond)
			feed(&b, done, 20*time.Millisecond, t1, seq(4, 10)...) // 3 overtaken at t1
			// 10-19 (when there are) stay quiet: they have nothing merged after them yet.
			b.lastMerge = t1.Add(time.Hour)
			got, at := looks(&b, done, c.total, t1, t1.Add(3*backupMinWait))
			if !slices.Equal(got, []int{3}) || at.Sub(t1) != c.wait {
				t.Fatalf("backed up %v %v after being overtaken, want [3] once, after %v", got, at.Sub(t1), c.wait)
			}
			feed(&b, done, 20*time.Millisecond, t1.Add(3*backupMinWait), 3)
			b.compact(done)
			if len(b.late) != 0 {
				t.Fatalf("late holds %v after every shard merged", b.late)
			}
		})
	}
}

// The wait is backupFactor median shard times per message, at least backupMinWait; the median
// ignores a few slow runs.
func TestBackupState_WaitFollowsMedianShardTime(t *testing.T) {
	for _, c := range []struct {
		name    string
		runs    []time.Duration
		perMsg  int
		drained bool
		want    time.Duration
	}{
		{"short shards: the floor", []time.Duration{time.Millisecond, 2 * time.Millisecond}, 1, false, backupMinWait},
		{"short shards, every one pulled: the lower floor", []time.Duration{time.Millisecond, 2 * time.Millisecond}, 1, true, backupDrainedMinWait},
		{"80ms shards", []time.Duration{80 * time.Millisecond, 80 * time.Millisecond, 80 * time.Millisecond}, 1, false, 160 * time.Millisecond},
		{"80ms shards, every one pulled", []time.Duration{80 * time.Millisecond, 80 * time.Millisecond, 80 * time.Millisecond}, 1, true, 160 * time.Millisecond},
		{"four per message", []time.Duration{30 * time.Millisecond}, 4, false, 240 * time.Millisecond},
		{"a few slow runs", []time.Duration{80 * time.Millisecond, 80 * time.Millisecond, 800 * time.Millisecond, 80 * time.Millisecond, 800 * time.Millisecond}, 1, false, 160 * time.Millisecond},
	} {
		t.Run(c.name, func(t *testing.T) {
			var b backupState
			done := roaring.New()
			for i, d := range c.runs {
				feed(&b, done, d, time.Now(), i)
			}
			if got := b.wait(c.perMsg, c.drained); got != c.want {
				t.Fatalf("wait %v, want %v", got, c.want)
			}
		})
	}
	var b backupState
	if b.median() != 0 || b.stragglers(roaring.New(), 10, 1, 10, time.Now()) != nil {
		t.Fatal("a job with no merge this term has a median or stragglers")
	}
}

// The last shards dispatched have nothing to overtake them: they are backed up once no result
// came for the wait, unless so many are left that most must still be queued.
func TestBackupState_SilenceBacksUpTheLastFewShards(t *testing.T) {
	t0 := time.Now()
	for _, c := range []struct {
		name  string
		total int
		want  []int
	}{
		{"two left", 12, []int{10, 11}},
		{"more left than backupSilenceMax", 10 + backupSilenceMax + 1, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			var b backupState
			done := roaring.New()
			feed(&b, done, 20*time.Millisecond, t0, seq(0, 10)...)
			got, at := looks(&b, done, c.total, t0, t0.Add(3*backupMinWait))
			if !slices.Equal(got, c.want) || got != nil && at.Sub(t0) != backupMinWait {
				t.Fatalf("backed up %v %v after the last merge, want %v after %v", got, at.Sub(t0), c.want, backupMinWait)
			}
		})
	}
}

// After a stall of the loop, results waiting to be merged would make shards look late: no look
// counts until as long again has passed.
func TestBackupState_NoBackupRightAfterAStall(t *testing.T) {
	var b backupState
	done := roaring.New()
	t0 := time.Now()
	feed(&b, done, time.Millisecond, t0, 0, 2) // 1 overtaken at t0
	b.stragglers(done, 3, 1, 10, t0)
	stalled := t0.Add(backupMinWait + 50*time.Millisecond) // a look 150ms after the last one
	if got := b.stragglers(done, 3, 1, 10, stalled); len(got) != 0 {
		t.Fatalf("backed up %v right after a stall", got)
	}
	if got := b.stragglers(done, 3, 1, 10, stalled.Add(backupCheckInterval)); len(got) != 0 {
		t.Fatalf("backed up %v while catching up", got)
	}
	at := stalled
	var got []int
	for i := 0; i < 20 && len(got) == 0; i++ {
		at = at.Add(backupCheckInterval)
		got = b.stragglers(done, 3, 1, 10, at)
	}
	if !slices.Equal(got, []int{1}) || at.Sub(stalled) < stalled.Sub(t0) {
		t.Fatalf("backed up %v %v after the stall, want [1] after %v", got, at.Sub(stalled), stalled.Sub(t0))
	}
}

// A new term starts from the checkpoint's done-bitmap: its first merge marks the missing shards
// below it as overtaken, not those merged in an earlier term. The limit bounds one look.
func TestBackupState_FirstMergeOfATermAndLimit(t *testing.T) {
	var b backupState
	done := roaring.New()
	done.AddRange(0, 1000)
	for _, i := range []uint32{100, 500, 501, 999} {
		done.Remove(i)
	}
	t0 := time.Now()
	feed(&b, done, 5*time.Millisecond, t0, 1200) // 1000-1199 missing too
	var idx []int
	for _, o := range b.late {
		idx = append(idx, int(o.index))
	}
	want := append([]int{100, 500, 501, 999}, seq(1000, 1200)...)
	if !slices.Equal(idx, want) {
		t.Fatalf("overtaken %d shards %v…, want %d", len(idx), idx[:min(8, len(idx))], len(want))
	}
	if got := b.stragglers(done, 1201, 1, 3, t0.Add(backupMinWait)); !slices.Equal(got, []int{100, 500, 501}) {
		t.Fatalf("backed up %v, want the first 3", got)
	}
}

// late holds about the shards in flight, not every shard ever overtaken: merged ones are dropped
// as it grows, even far from the tail (where no look compacts it).
func TestBackupState_LateStaysSmallOverALongJob(t *testing.T) {
	var b backupState
	done := roaring.New()
	now := time.Now()
	most := 0
	for i := 0; i+1 < 200_000; i += 2 {
		feed(&b, done, time.Millisecond, now, i+1, i) // every shard overtaken by its neighbour
		most = max(most, len(b.late))
	}
	if most > 2*backupCompactMin {
		t.Fatalf("late grew to %d entries", most)
	}
}

// mapStarts counts a worker's map steps.
type mapStarts struct{ n atomic.Int64 }

func (m *mapStarts) MapStarted(string)                        { m.n.Add(1) }
func (m *mapStarts) MapFinished(string, time.Duration, error) {}

// stragglerJob runs a sleep job of n shards of 10ms where worker "straggler" (one slot, a
// minute per shard) holds shard 0 and worker "fast" runs the rest; it returns the job's id.
func stragglerJob(t *testing.T, r *rig, n int) string {
	t.Helper()
	slow := &mapStarts{}
	r.work(worker.Config{ID: "straggler", Concurrency: 1, MapDelay: time.Minute, Metrics: slow})
	id := r.submit("sleep", `{"shards":`+itoa(n)+`,"duration":"10ms"}`)
	testenv.Eventually(t, 20*time.Second, 5*time.Millisecond, func() bool { return slow.n.Load() == 1 }, "the straggler took no shard")
	r.work(worker.Config{ID: "fast", Concurrency: 2})
	return id
}

func itoa(n int) string { b, _ := json.Marshal(n); return string(b) }

// A shard held by a worker far slower than its peers is dispatched again near the job's end and
// run by a free worker: the job ends exact, long before the straggler would have finished, with
// a backup event naming that shard and nothing else backed up.
func TestBackups_StragglerShardRunAgainNearTheEnd(t *testing.T) {
	r := newRig(t)
	var mu sync.Mutex
	var backups []Event
	r.leadObserved(1, func(ev Event) {
		if ev.Kind == EventBackup {
			mu.Lock()
			backups = append(backups, ev)
			mu.Unlock()
		}
	})
	id := stragglerJob(t, r, 40)
	start := time.Now()
	st := r.wait(id, 30*time.Second) // the straggler's shard takes a minute
	t.Logf("the job ended %v after the fast worker started", time.Since(start).Round(time.Millisecond))
	if st.State != jobs.StateSucceeded {
		t.Fatalf("state %s: %s", st.State, st.Error)
	}
	sameJSON(t, st.Result, json.RawMessage(`{"shards":40,"index_sum":780}`))
	mu.Lock()
	defer mu.Unlock()
	if len(backups) == 0 || backups[0].Job != id || backups[0].Shard != 0 {
		t.Fatalf("backup events %+v, want the first for shard 0 of %s", backups, id)
	}
	n := 0
	for _, ev := range backups {
		n += ev.Count
	}
	if n > 3 {
		t.Errorf("%d shards backed up, want shard 0 (and hardly any other): %+v", n, backups)
	}
}

// Without backup tasks the same job waits for the straggler: the test above measures them.
func TestBackups_OffTheJobWaitsForTheStraggler(t *testing.T) {
	r := newRig(t)
	r.leadWith(1, func(c *Config) { c.NoBackupTasks = true })
	id := stragglerJob(t, r, 40)
	ctx := context.Background()
	testenv.Eventually(t, 20*time.Second, 20*time.Millisecond, func() bool {
		st, err := r.cl.Status(ctx, id)
		return err == nil && st.ShardsDone == 39
	}, "the fast worker did not finish the other 39 shards")
	time.Sleep(time.Second) // far longer than a backup would take: the job must still wait
	st, err := r.cl.Status(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if st.State != jobs.StateRunning || st.ShardsDone != 39 {
		t.Fatalf("state %s with %d of 40 merged: want running with 39, waiting for the straggler", st.State, st.ShardsDone)
	}
}

// A keyed job's map task held by a straggler is backed up in the map phase (the gate holds the
// reduce tasks back, so the job's shards are never all dispatched then): the job ends exact long
// before the straggler would finish, and the task is committed once.
func TestBackups_KeyedStragglerMapTaskBackedUp(t *testing.T) {
	r := newRig(t)
	container, want := r.keyedCorpus(4, 3000)
	var mu sync.Mutex
	var backups []Event
	r.leadObserved(1, func(ev Event) {
		if ev.Kind == EventBackup {
			mu.Lock()
			backups = append(backups, ev)
			mu.Unlock()
		}
	})
	slow := &mapStarts{}
	r.work(worker.Config{ID: "straggler", Concurrency: 1, MapDelay: time.Minute, Metrics: slow, TempDir: t.TempDir()})
	id := r.submit("wordcount", fmt.Sprintf(`{"container":%q,"prefix":"in/","output":"blob","partitions":2,"shard_bytes":10000}`, container))
	testenv.Eventually(t, 20*time.Second, 5*time.Millisecond, func() bool { return slow.n.Load() == 1 }, "the straggler took no task")
	r.work(worker.Config{ID: "fast", Concurrency: 2, TempDir: t.TempDir()})
	st := r.wait(id, 30*time.Second) // the straggler's map task takes a minute
	if st.State != jobs.StateSucceeded {
		t.Fatalf("job %s: %s %s", id, st.State, st.Error)
	}
	m, got := r.keyedOutput(id)
	sameCounts(t, got, want)
	r.noLeftovers(id, m)
	mu.Lock()
	defer mu.Unlock()
	if len(backups) == 0 || backups[0].Job != id || backups[0].Shard != 0 {
		t.Fatalf("backup events %+v, want the first for map task 0 of %s", backups, id)
	}
}

// When a keyed job's gate opens, its backups start over from the reduce tasks' run times: the
// map tasks' median says nothing of a reduce task (a merge of every map's run).
func TestBackups_KeyedReducePhaseStartsWithoutMapTimes(t *testing.T) {
	tm := &term{log: quietLog()}
	j := &job{id: "20261126-000000-00000001", done: roaring.New()}
	ka := newKeyedRun(j.id, "c", 4, 2)
	j.run = ka
	j.cp.Total = 6
	j.gate.Store(5)
	feed(&j.bk, j.done, time.Millisecond, time.Now(), 0, 1, 3) // map task 2 overtaken
	if got := j.bk.stragglers(j.done, backupTotal(j), 1, 10, time.Now().Add(time.Second)); !slices.Equal(got, []int{2}) {
		t.Fatalf("map phase: backed up %v, want [2]", got)
	}
	feed(&j.bk, j.done, time.Millisecond, time.Now(), 2)
	tm.openGate(context.Background(), j, ka)
	if j.gate.Load() != 0 || backupTotal(j) != 6 {
		t.Fatalf("gate %d, backup total %d after opening", j.gate.Load(), backupTotal(j))
	}
	if j.bk.median() != 0 || j.bk.stragglers(j.done, 6, 1, 10, time.Now().Add(time.Hour)) != nil {
		t.Fatal("the reduce phase starts with the map tasks' run times")
	}
	if !j.bk.backed.Contains(2) {
		t.Fatal("the shards backed up this term are forgotten")
	}
}
