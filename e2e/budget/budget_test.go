// Package budget_test holds the storage request budget of every operation: each test counts the
// requests an operation sends (storecount.Counting on every member's storage client and on the
// submitter's) and fails when the count grows past the figure docs/limits.md publishes.
package budget_test

import (
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mapagg/mapagg/internal/harness/storecount"

	"github.com/mapagg/mapagg/client"
	"github.com/mapagg/mapagg/election"
	"github.com/mapagg/mapagg/internal/coordinator"
	"github.com/mapagg/mapagg/internal/harness/knownjobs"
	"github.com/mapagg/mapagg/internal/membership"
	"github.com/mapagg/mapagg/internal/protocol"
	"github.com/mapagg/mapagg/jobs"
)

// The budgets, in storage requests: what the code sends today (docs/limits.md, "Storage
// requests per operation"). Lower one when a change saves a request; never raise one without
// saying why there.
const (
	// A one-shard job, submit to end: spec write, enqueue with the spec inline (the submit); the
	// final checkpoint (created If-None-Match, holding the result: a small value gets no copy),
	// ended marker, message delete (the leader). A small job stores nothing while it runs
	// (docs/design.md, "A small job's requests"); its fresh shard skips the worker's ended
	// check. Queue receives are polls, counted apart (the thousand scenario counts them).
	budgetTinyJob = 5
	// Queue receives a job of a stream of tiny jobs (one submitted every 30 ms): one on each
	// submit's hint, and the polls of the idle time (QueuePoll, 500 ms) beside them.
	budgetReceivesPerJob = 1.4
	// Each shard of an aggregate job beyond the first: none. Shards and results travel on NATS;
	// the checkpoints are by time (budgetCheckpoint each), not by shard. A longer job checks its
	// cancel marker and its end again, so 2,000 shards cost a few requests more than one shard
	// (by time, not by shard).
	budgetPerShard = 0.005
	// A keyed job: each map task reads its input range, writes its run (one blob holding
	// every partition), checks it and deletes it; each partition writes its output and checks
	// it, and each reduce task reads the map manifest; each reduce task reads each run once,
	// whatever its partitions (M × ⌈R/G⌉ reads, G = jobs.PartitionsPerReduceTask: the keyed
	// shuffle, docs/limits.md); the rest (spec, plan, markers, checkpoints and the workers'
	// status checks) is about fixed; its checkpoint writes are by time, counted apart.
	budgetKeyedPerMapTask   = 4
	budgetKeyedPerPartition = 3
	budgetKeyedPerTask      = 1 // the worker's ended check after a task (a HEAD of the checkpoint)
	budgetKeyedFixed        = 28
	// Waiting for a job that has ended: its status (a HEAD of the checkpoint) and its result,
	// read from the final checkpoint, which holds a small one. Reading the result's copy first
	// made three, the copy being missing for every small result.
	budgetWaitEnded = 2
	// A checkpoint: one conditional write, no read.
	budgetCheckpoint = 1
	// A takeover after a crash, every member's lease-blob requests but renewals: the
	// successor's break and acquire, the epoch stamp, and reads of the blob.
	budgetTakeoverLease = 6
	// A schedule tick, its job aside (that is a tiny job's): the tick's claim (a conditional
	// create), the schedule's state write and a HEAD of it, and the definition's read (each
	// pass of the scheduler, a second apart like the ticks). budgetScheduleFixed: the state's
	// first read and a pass after the last tick. The listing of schedules is a poll, apart.
	budgetScheduleTick  = 4
	budgetScheduleFixed = 2
)

// render lists counts one request a line, with the job id shown as <job>.
func render(c storecount.Counts, id string) string {
	var lines []string
	for r, n := range c {
		if id != "" {
			r.Blob = strings.ReplaceAll(r.Blob, id, "<job>")
		}
		lines = append(lines, fmt.Sprintf("%3d %s", n, r))
	}
	slices.Sort(lines)
	return strings.Join(lines, "\n")
}

// queueMessage keeps the requests that write or delete a queue message (not the receives, which
// are polls).
func queueMessage(r storecount.Request) bool {
	return r.Service == "queue" && (r.Method == "POST" || strings.HasPrefix(r.Blob, "messages/"))
}

// tinyJobRequests runs one one-shard job and returns its requests: those whose blob names the
// job, and the queue message's.
func tinyJobRequests(ctx context.Context, t *testing.T, c *cluster) (storecount.Counts, string) {
	t.Helper()
	m0 := c.host.Counts()
	c.submits.Reset()
	id := c.tiny(ctx, t)
	time.Sleep(1500 * time.Millisecond) // the sweeper deletes the active marker once intake is idle 0.5 s
	all := c.host.Counts().Sub(m0)
	all.Add(c.submits.Counts())
	out := storecount.Counts{}
	for r, n := range all.Only(storecount.Answered) {
		if strings.Contains(r.Blob, id) || queueMessage(r) {
			out[r] = n
		}
	}
	logFailed(t, all)
	return out, id
}

// logFailed logs the requests of all the server failed (no answer, or one the SDK retries).
func logFailed(t *testing.T, all storecount.Counts) {
	t.Helper()
	if failed := all.Only(func(r storecount.Request) bool { return r.Failed }); len(failed) > 0 {
		t.Logf("%d requests failed and were left out of the budget:\n%s", failed.Total(nil), render(failed, ""))
	}
}

var shared *cluster

// one is the one-member cluster the single-member budgets share (they run one after another).
func one(t *testing.T) *cluster {
	if shared == nil {
		shared = newCluster(t, 1, true)
		time.Sleep(2 * time.Second) // start-up traffic (streams, first announcements) passes
	}
	return shared
}

func TestBudget_TinyJob(t *testing.T) {
	ctx := context.Background()
	c := one(t)
	best := int64(-1)
	var bestCounts storecount.Counts
	var bestID string
	for range 3 { // the least of three: a checkpoint that happens to tick mid-job is timing, not cost
		got, id := tinyJobRequests(ctx, t, c)
		if n := got.Total(nil); best < 0 || n < best {
			best, bestCounts, bestID = n, got, id
		}
	}
	t.Logf("a tiny job: %d requests (blob %d, queue %d):\n%s", best, bestCounts.Total(storecount.Blobs), bestCounts.Total(storecount.Queues), render(bestCounts, bestID))
	if best > budgetTinyJob {
		t.Errorf("a tiny job sent %d storage requests, budget %d:\n%s", best, budgetTinyJob, render(bestCounts, bestID))
	}
	if best < 4 {
		t.Errorf("a tiny job counted %d requests: the counting missed the spec, message and checkpoint writes", best)
	}
}

// Waiting for a tiny job that has ended: budgetWaitEnded requests, and the result is the job's.
func TestBudget_WaitForAnEndedJob(t *testing.T) {
	ctx := context.Background()
	c := one(t)
	id := c.tiny(ctx, t)
	c.submits.Reset()
	st, err := c.client.Wait(ctx, id, time.Second, nil)
	if err != nil || st.State != jobs.StateSucceeded || len(st.Result) == 0 {
		t.Fatalf("wait for %s: %+v, %v", id, st, err)
	}
	all := c.submits.Counts()
	logFailed(t, all)
	got := all.Only(storecount.Answered)
	t.Logf("waiting for an ended job: %d requests, result %s:\n%s", got.Total(nil), st.Result, render(got, id))
	if n := got.Total(nil); n > budgetWaitEnded {
		t.Errorf("waiting for an ended job sent %d storage requests, budget %d:\n%s", n, budgetWaitEnded, render(got, id))
	}
}

// Queue receives of a stream of tiny jobs, submitted one every 30 ms: a receive on each submit's
// hint takes its message, and a receive that emptied the queue waits for the next hint (or the
// poll) instead of receiving again at once. One receive a job, and the polls of the idle time:
// budgetReceivesPerJob. Receiving again after every short batch made two.
func TestBudget_TinyJobStreamReceives(t *testing.T) {
	ctx := context.Background()
	c := one(t)
	const n = 30
	j := knownjobs.Sleep(1, "")
	m0 := c.host.Counts()
	ids := make([]string, 0, n)
	for range n {
		id, err := c.client.Submit(ctx, j.Type, j.Params)
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
		time.Sleep(30 * time.Millisecond)
	}
	for _, id := range ids {
		c.wait(t, 30*time.Second, "job "+id+" finished", func(e membership.Event) bool {
			return e.Kind == string(coordinator.EventJobFinished) && e.Job == id
		})
	}
	receives := c.host.Counts().Sub(m0).Total(func(r storecount.Request) bool {
		return r.Service == "queue" && r.Method == "GET" && r.Blob == "messages"
	})
	t.Logf("%d tiny jobs, one every 30 ms: %d queue receives (%.2f a job)", n, receives, float64(receives)/n)
	if per := float64(receives) / n; per > budgetReceivesPerJob {
		t.Errorf("%d receives for %d jobs (%.2f a job), budget %v", receives, n, per, budgetReceivesPerJob)
	}
}

func TestBudget_AggregateShard(t *testing.T) {
	ctx := context.Background()
	c := one(t)
	tiny, _ := tinyJobRequests(ctx, t, c)
	const shards = 2000
	j := knownjobs.Sleep(shards, "")
	m0 := c.host.Counts()
	c.submits.Reset()
	id, err := c.client.Submit(ctx, j.Type, j.Params)
	if err != nil {
		t.Fatal(err)
	}
	c.wait(t, 2*time.Minute, "job "+id+" finished", func(e membership.Event) bool {
		return e.Kind == string(coordinator.EventJobFinished) && e.Job == id
	})
	time.Sleep(1500 * time.Millisecond)
	all := c.host.Counts().Sub(m0)
	all.Add(c.submits.Counts())
	checkpoint := func(r storecount.Request) bool { return r.Method == "PUT" && r.Blob == protocol.CheckpointBlob(id) }
	var other storecount.Counts = storecount.Counts{}
	for r, n := range all {
		if (strings.Contains(r.Blob, id) || queueMessage(r)) && !checkpoint(r) {
			other[r] = n
		}
	}
	tinyOther := tiny.Total(func(r storecount.Request) bool { return !strings.HasSuffix(r.Blob, "/checkpoint") || r.Method != "PUT" })
	extra := other.Total(nil) - tinyOther
	t.Logf("a %d-shard job: %d checkpoint writes and %d other requests (a one-shard job: %d other):\n%s",
		shards, all.Total(checkpoint), other.Total(nil), tinyOther, render(other, id))
	if perShard := float64(extra) / float64(shards-1); perShard > budgetPerShard {
		t.Errorf("%d shards sent %d requests beyond a one-shard job's (%.4f a shard), budget %v a shard:\n%s", shards, extra, perShard, budgetPerShard, render(other, id))
	}
}

func TestBudget_Checkpoint(t *testing.T) {
	ctx := context.Background()
	c := one(t)
	j := knownjobs.Sleep(80, "50ms") // two seconds or more on one member: several checkpoints
	m0 := c.host.Counts()
	start := time.Now()
	id, err := c.client.Submit(ctx, j.Type, j.Params)
	if err != nil {
		t.Fatal(err)
	}
	c.wait(t, time.Minute, "job "+id+" finished", func(e membership.Event) bool {
		return e.Kind == string(coordinator.EventJobFinished) && e.Job == id
	})
	took := time.Since(start)
	all := c.host.Counts().Sub(m0)
	writes := all.Total(func(r storecount.Request) bool { return r.Blob == protocol.CheckpointBlob(id) && r.Method == "PUT" })
	// The workers' ended checks are HEADs of the checkpoint (its status record), by time, not by
	// checkpoint: apart.
	reads := all.Total(func(r storecount.Request) bool { return r.Blob == protocol.CheckpointBlob(id) && r.Method == "GET" })
	t.Logf("a job of %v: %d checkpoint writes, %d reads of the checkpoint", took.Round(time.Millisecond), writes, reads)
	if writes < 3 {
		t.Fatalf("%d checkpoint writes in %v: the job ended too fast to measure checkpoints", writes, took)
	}
	// Each checkpoint is one write: no read goes with it (the leader keeps its ETag).
	if per := float64(writes+reads) / float64(writes); per > budgetCheckpoint {
		t.Errorf("%d requests for %d checkpoints (%.2f each), budget %d", writes+reads, writes, per, budgetCheckpoint)
	}
}

func TestBudget_KeyedMapTaskAndPartition(t *testing.T) {
	c := one(t)
	for _, tt := range []struct{ m, r int }{{4, 3}, {100, 64}} {
		t.Run(fmt.Sprintf("%d×%d", tt.m, tt.r), func(t *testing.T) { keyedBudget(t, c, tt.m, tt.r) })
	}
}

// keyedBudget runs a keyed wordcount of m map tasks and r partitions and holds its requests to
// the budgets. Its run reads are m × (reduce tasks): a reduce task of several partitions reads
// each map run once (jobs.PartitionsPerReduceTask), so fewer than m × r when r is large.
func keyedBudget(t *testing.T, c *cluster, m, r int) {
	ctx := context.Background()
	in := fmt.Sprintf("%s-in%d", c.names.JobsContainer, m)
	j, err := knownjobs.Wordcount(ctx, c.blob, in, 200, m*16<<10, 16<<10) // m shards: m map tasks
	if err != nil {
		t.Fatal(err)
	}
	if j.Shards != m {
		t.Fatalf("the corpus has %d shards, want %d", j.Shards, m)
	}
	var p map[string]any
	if err := json.Unmarshal(j.Params, &p); err != nil {
		t.Fatal(err)
	}
	p["output"], p["partitions"] = "blob", r
	params, _ := json.Marshal(p)
	m0 := c.host.Counts()
	c.submits.Reset()
	id, err := c.client.Submit(ctx, j.Type, params)
	if err != nil {
		t.Fatal(err)
	}
	c.wait(t, 3*time.Minute, "job "+id+" finished", func(e membership.Event) bool {
		return e.Kind == string(coordinator.EventJobFinished) && e.Job == id
	})
	time.Sleep(1500 * time.Millisecond)
	all := c.host.Counts().Sub(m0)
	all.Add(c.submits.Counts())
	st, err := c.client.Status(ctx, id)
	if err != nil || st.State != "succeeded" {
		t.Fatalf("keyed job: %v %+v", err, st)
	}
	// Budgets count what the design asks for: an attempt the server failed (a timeout on a
	// loaded machine) is left out, as its retry is counted.
	logFailed(t, all)
	mine := storecount.Counts{}
	for q, n := range all.Only(storecount.Answered) {
		if strings.Contains(q.Blob, id) || q.Container == in {
			mine[q] = n
		}
	}
	runs := id + "/map/"
	runReads := mine.Total(func(q storecount.Request) bool { return strings.HasPrefix(q.Blob, runs) && q.Method == "GET" })
	perMap := mine.Total(func(q storecount.Request) bool {
		return strings.HasPrefix(q.Blob, runs) && q.Method != "GET" || q.Container == in && q.Blob != ""
	})
	perPart := mine.Total(func(q storecount.Request) bool {
		return strings.HasPrefix(q.Blob, id+"/out/") || q.Blob == id+"/map-manifest" && q.Method == "GET"
	})
	// Checkpoint writes are by time (TestBudget_Checkpoint), not by task: apart.
	cps := mine.Total(func(q storecount.Request) bool { return q.Blob == protocol.CheckpointBlob(id) && q.Method == "PUT" })
	g := jobs.PartitionsPerReduceTask(m, r)
	tasks := (r + g - 1) / g
	// A worker checks whether the job ended after each task (a HEAD of the checkpoint): per task.
	heads := mine.Total(func(q storecount.Request) bool { return q.Blob == protocol.CheckpointBlob(id) && q.Method == "HEAD" })
	perTask := min(heads, int64(budgetKeyedPerTask*(m+tasks)))
	// So are the re-checks of a job's cancel marker (the leader) and of its end (the workers, a
	// HEAD of the checkpoint every 5 s while they run its tasks, beyond the one after each
	// task): the first of each is fixed.
	again := func(blob string) int64 {
		return max(mine.Total(func(q storecount.Request) bool { return q.Blob == blob && q.Method == "HEAD" })-1, 0)
	}
	cps += again(id+"/cancel") + max(heads-perTask-1, 0)
	fixed := mine.Total(nil) - runReads - perMap - perPart - cps - perTask
	t.Logf("a keyed job of %d map tasks and %d partitions (%d reduce tasks): %d requests: %d run reads, %d of map tasks, %d of partitions, %d of tasks, %d by time (checkpoint writes, re-checks), %d others",
		m, r, tasks, mine.Total(nil), runReads, perMap, perPart, perTask, cps, fixed)
	others := storecount.Counts{}
	for q, n := range mine {
		if !strings.HasPrefix(q.Blob, runs) && q.Container != in && !strings.HasPrefix(q.Blob, id+"/out/") && q.Blob != id+"/map-manifest" {
			others[q] = n
		}
	}
	t.Logf("requests but runs, inputs and outputs:\n%s", render(others, id))
	if n := c.backups(id); n > 0 {
		t.Logf("the leader backed up %d tasks of the job", n)
	}
	// A reduce task reads each map run once; the leader may back a straggling task up once (a
	// loaded machine), and the backup reads them again.
	if runReads > int64(2*m*tasks) {
		t.Errorf("%d run reads, more than M × reduce tasks = %d × %d, twice", runReads, m, tasks)
	}
	if r > jobs.MinReduceTasks && runReads >= int64(m*r) {
		t.Errorf("%d run reads, not fewer than M × R = %d", runReads, m*r)
	}
	// A map task's execution reads its input range once. A backed-up task (a straggler on a
	// loaded machine) or a redelivered one runs again, reads its input and writes its runs once
	// more: the budget is per execution, and each task may run twice at most, as with run reads.
	executions := mine.Total(func(q storecount.Request) bool { return q.Container == in && q.Blob != "" && q.Method == "GET" })
	if executions > int64(2*m) {
		t.Errorf("%d executions of %d map tasks (reads of their input), more than twice (%d backup copies)", executions, m, c.backups(id))
	}
	if perMap > int64(budgetKeyedPerMapTask)*max(executions, int64(m)) {
		t.Errorf("%d requests of %d map tasks in %d executions, budget %d each:\n%s", perMap, m, executions, budgetKeyedPerMapTask, render(mapRequests(mine, id, in), ""))
	}
	if perPart > int64(budgetKeyedPerPartition*r) {
		t.Errorf("%d requests of %d partitions, budget %d each", perPart, r, budgetKeyedPerPartition)
	}
	if fixed > budgetKeyedFixed {
		t.Errorf("%d other requests of a keyed job, budget %d", fixed, budgetKeyedFixed)
	}
}

// mapRequests sums the requests of map tasks (all but reads of their runs) by method, operation and
// blob with the task's number taken out, for a budget's failure message.
func mapRequests(mine storecount.Counts, id, in string) storecount.Counts {
	runs := id + "/map/"
	digits := regexp.MustCompile(`[0-9]+`)
	out := storecount.Counts{}
	for q, n := range mine {
		if strings.HasPrefix(q.Blob, runs) && q.Method != "GET" || q.Container == in && q.Blob != "" {
			q.Blob = digits.ReplaceAllString(strings.ReplaceAll(q.Blob, id, "<job>"), "N")
			q.Container = digits.ReplaceAllString(q.Container, "N")
			out[q] += n
		}
	}
	return out
}

func TestBudget_Takeover(t *testing.T) {
	ctx := context.Background()
	c := newCluster(t, 3, false)
	_ = ctx
	time.Sleep(3 * time.Second) // the leader names its successors
	leader := c.leader(t)
	m0 := c.host.Counts()
	if _, err := c.host.Crash(leader.Worker); err != nil {
		t.Fatal(err)
	}
	next := c.wait(t, 10*time.Second, "a new leader", func(e membership.Event) bool {
		return e.Kind == string(election.EventElected) && e.Epoch > leader.Epoch
	})
	time.Sleep(2 * time.Second) // late breaks and reads, if any, are counted
	d := c.host.Counts().Sub(m0)
	lease := storecount.Counts{}
	for r, n := range d {
		if r.Container == c.names.LeaseContainer && r.Op != "lease:renew" {
			lease[r] = n
		}
	}
	t.Logf("takeover by %s (epoch %d): lease-blob requests but renewals: %d\n%s\nall requests meanwhile:\n%s",
		next.Worker, next.Epoch, lease.Total(nil), render(lease, ""), render(d, ""))
	if n := lease.Total(nil); n > budgetTakeoverLease {
		t.Errorf("a takeover sent %d lease-blob requests (renewals aside), budget %d:\n%s", n, budgetTakeoverLease, render(lease, ""))
	}
	if n := lease.Total(func(r storecount.Request) bool { return r.Op == "lease:break" }); n != 1 {
		t.Errorf("%d lease breaks, want 1", n)
	}
}

func TestBudget_ScheduleTick(t *testing.T) {
	ctx := context.Background()
	c := one(t)
	j := knownjobs.Sleep(1, "")
	name := "tick" + strings.ReplaceAll(c.names.Queue, "-", "")
	m0 := c.host.Counts()
	t0 := time.Now()
	if _, err := c.client.AddSchedule(ctx, name, client.ScheduleOptions{Every: time.Second, Type: j.Type, Params: j.Params}); err != nil {
		t.Fatal(err)
	}
	const ticks = 4
	var jobs []string
	for len(jobs) < ticks {
		e := c.wait(t, 30*time.Second, "a scheduled job", func(e membership.Event) bool {
			return e.Kind == string(coordinator.EventJobFinished) && e.At.After(t0) && !slices.Contains(jobs, e.Job)
		})
		jobs = append(jobs, e.Job)
	}
	if err := c.client.PauseSchedule(ctx, name); err != nil {
		t.Fatal(err)
	}
	d := c.host.Counts().Sub(m0)
	sched := storecount.Counts{}
	for r, n := range d {
		named := false
		for _, id := range jobs {
			named = named || strings.Contains(r.Blob, id)
		}
		if !named && strings.HasPrefix(r.Blob, "schedules/") {
			sched[r] = n
		}
	}
	fired := sched.Total(func(r storecount.Request) bool {
		return strings.HasPrefix(r.Blob, "schedules/ticks/") && r.Method == "PUT"
	})
	t.Logf("%d ticks: schedule requests (the jobs' own aside) %d:\n%s", fired, sched.Total(nil), render(sched, ""))
	if fired < ticks {
		t.Fatalf("%d tick claims counted for %d scheduled jobs", fired, ticks)
	}
	if n := sched.Total(nil); n > budgetScheduleTick*fired+budgetScheduleFixed {
		t.Errorf("%d ticks sent %d requests, budget %d a tick and %d more:\n%s", fired, n, budgetScheduleTick, budgetScheduleFixed, render(sched, ""))
	}
}
