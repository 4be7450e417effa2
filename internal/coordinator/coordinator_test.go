package coordinator

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob"

	"github.com/mapagg/mapagg/builtin"
	"github.com/mapagg/mapagg/client"
	"github.com/mapagg/mapagg/internal/bus"
	"github.com/mapagg/mapagg/internal/harness/testenv"
	"github.com/mapagg/mapagg/internal/harness/testkeys"
	"github.com/mapagg/mapagg/internal/protocol"
	"github.com/mapagg/mapagg/internal/queue"
	"github.com/mapagg/mapagg/internal/worker"
	"github.com/mapagg/mapagg/jobs"
	"github.com/mapagg/mapagg/store"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// rig is one test's real storage, queue and JetStream, with a coordinator and workers on demand.
type rig struct {
	t    testing.TB
	blob *azblob.Client
	st   *store.Container
	q    *queue.Queue
	b    *bus.Bus
	cl   *client.Client
	url  string
}

func newRig(t testing.TB) *rig {
	t.Helper()
	conn := testenv.Azurite(t)
	url := testenv.NATS(t)
	blob, err := store.NewClient(conn)
	if err != nil {
		t.Fatal(err)
	}
	st := store.New(blob, testenv.Name(t, "jobs"))
	q, err := queue.New(conn, testenv.Name(t, "q"))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := st.Ensure(ctx); err != nil {
		t.Fatal(err)
	}
	if err := q.Ensure(ctx); err != nil {
		t.Fatal(err)
	}
	b := connect(t, url)
	return &rig{t: t, blob: blob, st: st, q: q, b: b, url: url, cl: &client.Client{Store: st, Queue: q, Notify: b, Registry: builtin.Registry()}}
}

func connect(t testing.TB, url string) *bus.Bus {
	t.Helper()
	b, err := bus.Connect(url, t.Name(), bus.Config{ShardTimeout: 5 * time.Second, Keys: testkeys.Keys()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	if err := b.Ensure(context.Background()); err != nil {
		t.Fatal(err)
	}
	return b
}

func quietLog() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// leading is a coordinator term run by a test.
type leading struct {
	cancel context.CancelFunc
	done   chan struct{}
	err    error // Lead's return, once done is closed
}

// stop ends the term and returns Lead's error.
func (l *leading) stop() error {
	l.cancel()
	<-l.done
	return l.err
}

// lead runs a coordinator term with its own NATS connection until the test ends.
func (r *rig) lead(epoch uint64) *leading { return r.leadObserved(epoch, nil) }

// leadObserved is lead with an event hook.
func (r *rig) leadObserved(epoch uint64, onEvent func(Event)) *leading {
	return r.leadWith(epoch, func(c *Config) { c.OnEvent = onEvent })
}

// leadWith is lead with the test's config changes.
func (r *rig) leadWith(epoch uint64, change func(*Config)) *leading {
	r.t.Helper()
	return r.leadOn(epoch, r.st, change)
}

// leadOn is leadWith on the given storage (the rig's, wrapped by a test).
func (r *rig) leadOn(epoch uint64, st Store, change func(*Config)) *leading {
	r.t.Helper()
	cfg := Config{Registry: builtin.Registry(), Logger: quietLog(), CheckpointInterval: 50 * time.Millisecond, RescanInterval: time.Second, QueuePoll: 100 * time.Millisecond}
	change(&cfg)
	c, err := New(cfg, st, r.q, connect(r.t, r.url), store.NewEnv(r.blob))
	if err != nil {
		r.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	l := &leading{cancel: cancel, done: make(chan struct{})}
	go func() { defer close(l.done); l.err = c.Lead(ctx, epoch) }()
	r.t.Cleanup(func() { l.stop() })
	return l
}

func (r *rig) work(cfg worker.Config) {
	r.t.Helper()
	if cfg.ID == "" {
		cfg.ID = "w"
	}
	cfg.Logger = quietLog()
	if cfg.Registry == nil {
		cfg.Registry = builtin.Registry()
	}
	w, err := worker.New(cfg, connect(r.t, r.url), r.st, store.NewEnv(r.blob))
	if err != nil {
		r.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = w.Run(ctx) }()
	r.t.Cleanup(func() { cancel(); <-done })
}

func (r *rig) submit(typ, params string) string {
	r.t.Helper()
	id, err := r.cl.Submit(context.Background(), typ, json.RawMessage(params))
	if err != nil {
		r.t.Fatalf("submit %s %s: %v", typ, params, err)
	}
	return id
}

func (r *rig) wait(id string, within time.Duration) *client.Status {
	r.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), within)
	defer cancel()
	st, err := r.cl.Wait(ctx, id, 50*time.Millisecond, nil)
	if err != nil {
		r.t.Fatalf("wait for %s: %v (last %+v)", id, err, st)
	}
	return st
}

// sequential runs a job in this goroutine: split, map every shard, merge, result. The system's
// answer must equal it.
func sequential(t *testing.T, env jobs.Env, typ, params string) json.RawMessage {
	t.Helper()
	ctx := context.Background()
	j, err := builtin.Registry().Lookup(typ)
	if err != nil {
		t.Fatal(err)
	}
	shards, err := j.Split(ctx, env, json.RawMessage(params))
	if err != nil {
		t.Fatal(err)
	}
	agg, err := j.NewAggregate(json.RawMessage(params))
	if err != nil {
		t.Fatal(err)
	}
	for i, s := range shards {
		p, err := j.Map(ctx, env, jobs.Task{JobID: "seq", Index: i, Attempt: 2, Shard: s})
		if err != nil {
			t.Fatal(err)
		}
		if err := agg.Merge(p); err != nil {
			t.Fatal(err)
		}
	}
	res, err := agg.Result()
	if err != nil {
		t.Fatal(err)
	}
	return res
}

func sameJSON(t *testing.T, got, want json.RawMessage) {
	t.Helper()
	var a, b any
	if err := json.Unmarshal(got, &a); err != nil {
		t.Fatalf("result %s: %v", got, err)
	}
	_ = json.Unmarshal(want, &b)
	ga, _ := json.Marshal(a)
	wb, _ := json.Marshal(b)
	if string(ga) != string(wb) {
		t.Fatalf("result\n got %s\nwant %s", ga, wb)
	}
}

// A job finishes the moment its last result is merged, not at the next checkpoint tick: with a
// 1-minute tick, it still finishes in seconds, with the exact result.
func TestCoordinator_FinishesAtLastMerge(t *testing.T) {
	r := newRig(t)
	r.leadWith(1, func(c *Config) { c.CheckpointInterval, c.StallTimeout = time.Minute, 2*time.Minute })
	r.work(worker.Config{Concurrency: 2})
	id := r.submit("primes", `{"from":0,"to":1000000,"shards":20}`)
	st := r.wait(id, 20*time.Second)
	if st.State != jobs.StateSucceeded {
		t.Fatalf("state %s: %s", st.State, st.Error)
	}
	sameJSON(t, st.Result, json.RawMessage(`{"count":78498}`))
}

// Dispatch is windowed: a job never has more than DispatchWindow shards dispatched and not merged,
// so the shards stream's backlog stays bounded whatever the job's size.
func TestCoordinator_DispatchWindowBoundsBacklog(t *testing.T) {
	r := newRig(t)
	r.leadWith(1, func(c *Config) { c.DispatchBatch, c.DispatchWindow = 8, 32 })
	r.work(worker.Config{Concurrency: 2, Prefetch: 2}) // holds at most 4 shards
	id := r.submit("sleep", `{"shards":400,"duration":"1ms"}`)
	ctx, cancel := context.WithCancel(context.Background())
	peak := make(chan uint64)
	go func() {
		var most uint64
		for ctx.Err() == nil {
			if n, err := r.b.QueuedShards(ctx); err == nil && n > most {
				most = n
			}
			time.Sleep(2 * time.Millisecond)
		}
		peak <- most
	}()
	st := r.wait(id, 60*time.Second)
	cancel()
	most := <-peak
	if st.State != jobs.StateSucceeded {
		t.Fatalf("state %s: %s", st.State, st.Error)
	}
	sameJSON(t, st.Result, json.RawMessage(`{"shards":400,"index_sum":79800}`))
	// The stream holds the window's shards, plus at most the 4 the worker holds whose results
	// were merged before the worker's ack reached the stream.
	if most > 32+4 || most == 0 {
		t.Fatalf("peak backlog %d shards, want 1 to the window of 32 (+4 acks in flight)", most)
	}
}

// Backup tasks: a worker that holds a shard far longer than its peers take does not hold the job
// up: near the end the shard is dispatched again, the fast worker's result wins, the result is
// exact, and the straggler's own result (if it ever comes) is dropped as a duplicate.
func TestCoordinator_BackupTasksBeatAStraggler(t *testing.T) {
	r := newRig(t)
	r.lead(1)
	r.work(worker.Config{ID: "straggler", Concurrency: 1, MapDelay: time.Minute})
	time.Sleep(300 * time.Millisecond) // the straggler's feed is pulling first
	id := r.submit("sleep", `{"shards":30,"duration":"2ms"}`)
	time.Sleep(time.Second) // the straggler took a shard
	r.work(worker.Config{ID: "fast", Concurrency: 2})
	st := r.wait(id, 20*time.Second) // far below the straggler's minute
	if st.State != jobs.StateSucceeded {
		t.Fatalf("state %s: %s", st.State, st.Error)
	}
	sameJSON(t, st.Result, json.RawMessage(`{"shards":30,"index_sum":435}`))
}

// Several shards per message: the answer is exact, and a new leader resumes dispatch from the
// checkpoint on the same message boundaries.
func TestCoordinator_ShardBatchesAcrossFailover(t *testing.T) {
	r := newRig(t)
	cfg := func(c *Config) { c.ShardsPerMsg, c.DispatchBatch, c.DispatchWindow = 4, 8, 16 }
	l1 := r.leadWith(1, cfg)
	id := r.submit("sleep", `{"shards":42,"duration":"1ms"}`)
	testenv.Eventually(t, 20*time.Second, 10*time.Millisecond, func() bool {
		n, err := r.b.QueuedShards(context.Background())
		return err == nil && n == 4 // a window of 16 shards: 4 messages of 4
	}, "leader 1 did not fill its window")
	if err := l1.stop(); err != nil {
		t.Fatal(err)
	}
	r.leadWith(2, cfg)
	r.work(worker.Config{Concurrency: 2})
	st := r.wait(id, 60*time.Second)
	if st.State != jobs.StateSucceeded {
		t.Fatalf("state %s: %s", st.State, st.Error)
	}
	sameJSON(t, st.Result, json.RawMessage(`{"shards":42,"index_sum":861}`))
	if st.Duplicates != 0 {
		t.Fatalf("duplicates = %d, want 0", st.Duplicates)
	}
}

func TestCoordinator_BuiltinJobsMatchSequentialRun(t *testing.T) {
	r := newRig(t)
	r.lead(1)
	r.work(worker.Config{Concurrency: 4})
	r.work(worker.Config{ID: "w2", Concurrency: 2})

	// wordcount input: blobs in their own container, with words across every range boundary.
	ctx := context.Background()
	data := store.New(r.blob, testenv.Name(t, "text"))
	if err := data.Ensure(ctx); err != nil {
		t.Fatal(err)
	}
	texts := []string{
		strings.Repeat("the quick brown fox jumps over the lazy dog\n", 300),
		"naïve café　日本語 text\u0085with\u00a0odd  spaces " + strings.Repeat("ünïcödé wörds ", 200),
		"",
	}
	for i, s := range texts {
		if _, err := data.Put(ctx, fmt.Sprintf("in/%d.txt", i), []byte(s), store.Cond{}); err != nil {
			t.Fatal(err)
		}
	}
	cases := []struct{ typ, params, want string }{
		{"primes", `{"from":0,"to":10000000,"shards":50}`, `{"count":664579}`},
		{"pi", `{"samples":2000000,"shards":16,"seed":42}`, ""},
		{"wordcount", fmt.Sprintf(`{"container":%q,"prefix":"in/","top":5,"shard_bytes":1000}`, data.Name()), ""},
		{"sleep", `{"shards":300,"duration":"1ms","fail_rate":0.2,"seed":7}`, `{"shards":300,"index_sum":44850}`},
	}
	ids := make([]string, len(cases))
	for i, c := range cases { // all at once: several jobs run concurrently
		ids[i] = r.submit(c.typ, c.params)
	}
	env := store.NewEnv(r.blob)
	for i, c := range cases {
		st := r.wait(ids[i], 2*time.Minute)
		if st.State != jobs.StateSucceeded {
			t.Fatalf("%s: %s: %s", c.typ, st.State, st.Error)
		}
		want := json.RawMessage(c.want)
		if c.want == "" {
			want = sequential(t, env, c.typ, c.params)
		}
		sameJSON(t, st.Result, want)
		res, err := r.cl.Result(ctx, ids[i])
		if err != nil {
			t.Fatal(err)
		}
		sameJSON(t, res, want)
		if st.ShardsDone != st.ShardsTotal || st.ShardsTotal == 0 {
			t.Fatalf("%s: %d/%d shards", c.typ, st.ShardsDone, st.ShardsTotal)
		}
	}
	// Finished jobs leave no active marker, and no result copy: their small values stay in the
	// final checkpoint, where the client read them above.
	testenv.Eventually(t, 10*time.Second, 50*time.Millisecond, func() bool {
		marks, _ := r.st.List(ctx, protocol.ActivePrefix)
		return len(marks) == 0
	}, "active markers left behind")
	for _, id := range ids {
		if ok, _ := r.st.Exists(ctx, protocol.ResultBlob(id)); ok {
			t.Fatalf("a result copy for %s, whose value its final checkpoint holds", id)
		}
	}
}

// shardsOf takes n shard messages of the rig's stream, acking them, as a fake worker would.
func (r *rig) shardsOf(n int) []*protocol.ShardMsg {
	r.t.Helper()
	f, err := r.b.Shards(context.Background(), bus.ShardOptions{Types: builtin.Registry().Types(), Limit: func() int { return n }})
	if err != nil {
		r.t.Fatal(err)
	}
	defer f.Stop()
	var out []*protocol.ShardMsg
	timeout := time.After(30 * time.Second)
	for len(out) < n {
		select {
		case d := <-f.C:
			m, err := protocol.DecodeShardMsg(d.Data())
			if err != nil {
				r.t.Fatal(err)
			}
			_ = d.Ack()
			out = append(out, m)
		case <-timeout:
			r.t.Fatalf("got %d shards, want %d", len(out), n)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Index < out[j].Index })
	return out
}

// result maps a shard and publishes its result with the given epoch and attempt.
func (r *rig) result(m *protocol.ShardMsg, epoch uint64, attempt int, mutate func(*protocol.ResultMsg)) {
	r.t.Helper()
	j, _ := builtin.Registry().Lookup(m.Type)
	p, err := j.Map(context.Background(), nil, jobs.Task{JobID: m.Job, Index: m.Index, Attempt: 2, Shard: m.Shard})
	if err != nil {
		r.t.Fatal(err)
	}
	res := protocol.ResultMsg{Kind: m.Kind, Job: m.Job, Index: m.Index, Epoch: epoch, Attempt: attempt, Partial: p}
	if mutate != nil {
		mutate(&res)
	}
	data, _ := res.Encode()
	if err := <-r.b.PublishAsync(bus.Outgoing{Subject: r.b.ResultSubject(m.Job), MsgID: protocol.ResultMsgID(m.Job, m.Index, attempt), Data: data}); err != nil {
		r.t.Fatal(err)
	}
}

func TestCoordinator_DuplicateResultMergedOnce(t *testing.T) {
	r := newRig(t)
	r.lead(3)
	id := r.submit("sleep", `{"shards":4}`)
	shards := r.shardsOf(4)
	if shards[0].Epoch != 3 {
		t.Fatalf("shard epoch %d, want the plan epoch 3", shards[0].Epoch)
	}
	r.result(shards[0], 3, 1, nil)
	r.result(shards[0], 3, 2, nil) // a redelivered shard's second result
	for _, m := range shards[1:3] {
		r.result(m, 3, 1, nil)
	}
	r.result(shards[2], 3, 3, nil) // after more merges: still dropped
	r.result(shards[3], 3, 1, nil) // the last result finishes the job at once
	st := r.wait(id, 30*time.Second)
	sameJSON(t, st.Result, json.RawMessage(`{"shards":4,"index_sum":6}`))
	if st.Duplicates != 2 {
		t.Fatalf("duplicates = %d, want 2", st.Duplicates)
	}
}

// batch publishes the results of several shards of one job in one message.
func (r *rig) batch(ms []*protocol.ShardMsg, epoch uint64, attempt int) {
	r.t.Helper()
	var rs []*protocol.ResultMsg
	for _, m := range ms {
		j, _ := builtin.Registry().Lookup(m.Type)
		p, err := j.Map(context.Background(), nil, jobs.Task{JobID: m.Job, Index: m.Index, Attempt: attempt, Shard: m.Shard})
		if err != nil {
			r.t.Fatal(err)
		}
		rs = append(rs, &protocol.ResultMsg{Kind: m.Kind, Job: m.Job, Index: m.Index, Epoch: epoch, Attempt: attempt, Partial: p})
	}
	data, err := protocol.EncodeResults(rs)
	if err != nil {
		r.t.Fatal(err)
	}
	if err := <-r.b.PublishAsync(bus.Outgoing{Subject: r.b.ResultSubject(ms[0].Job), MsgID: protocol.ResultBatchMsgID(ms[0].Job, fmt.Sprint(time.Now().UnixNano())), Data: data}); err != nil {
		r.t.Fatal(err)
	}
}

// Batches of results merge each shard once, across batches and single results.
func TestCoordinator_BatchedResultsMergedOnce(t *testing.T) {
	r := newRig(t)
	r.lead(2)
	id := r.submit("sleep", `{"shards":5}`)
	s := r.shardsOf(5)
	r.batch(s[0:2], 2, 1)
	r.batch([]*protocol.ShardMsg{s[1], s[2], s[3]}, 2, 2) // shard 1 again
	r.result(s[3], 2, 3, nil)                             // shard 3 again
	r.batch([]*protocol.ShardMsg{s[0], s[4]}, 2, 4)       // shard 0 again, and the last one
	st := r.wait(id, 30*time.Second)
	sameJSON(t, st.Result, json.RawMessage(`{"shards":5,"index_sum":10}`))
	if st.Duplicates != 3 {
		t.Fatalf("duplicates = %d, want 3", st.Duplicates)
	}
}

func TestCoordinator_OlderEpochResultDropped(t *testing.T) {
	r := newRig(t)
	r.lead(5)
	id := r.submit("sleep", `{"shards":3}`)
	shards := r.shardsOf(3)
	// A result stamped with an older epoch, carrying a partial that would corrupt the sum.
	r.result(shards[1], 4, 1, func(m *protocol.ResultMsg) {
		j, _ := builtin.Registry().Lookup("sleep")
		other, _ := j.Split(context.Background(), nil, json.RawMessage(`{"shards":100}`))
		m.Partial, _ = j.Map(context.Background(), nil, jobs.Task{Index: 99, Attempt: 2, Shard: other[99]})
	})
	testenv.Eventually(t, 5*time.Second, 20*time.Millisecond, func() bool {
		st, err := r.cl.Status(context.Background(), id)
		return err == nil && st.State == jobs.StateRunning
	}, "job not running")
	time.Sleep(200 * time.Millisecond) // let the stale result reach the leader first
	for _, m := range shards {
		r.result(m, 5, 2, nil) // attempt 2: the stale message took msg id <job>/1/1
	}
	st := r.wait(id, 30*time.Second)
	sameJSON(t, st.Result, json.RawMessage(`{"shards":3,"index_sum":3}`))
}

func TestCoordinator_DeposedLeaderCannotCheckpointAndStops(t *testing.T) {
	r := newRig(t)
	ctx := context.Background()
	a := r.lead(1)
	id := r.submit("sleep", `{"shards":6}`)
	shards := r.shardsOf(6)
	r.result(shards[0], 1, 1, nil)
	testenv.Eventually(t, 10*time.Second, 20*time.Millisecond, func() bool {
		st, err := r.cl.Status(ctx, id)
		return err == nil && st.ShardsDone == 1
	}, "first result not checkpointed")

	// The deposed leader's situation, step by step: it holds the ETag it last wrote; a term of a
	// newer epoch claims the job; the old term's next checkpoint write is refused as deposed.
	_, staleETag, err := r.st.Get(ctx, protocol.CheckpointBlob(id))
	if err != nil {
		t.Fatal(err)
	}
	c, err := New(Config{Registry: builtin.Registry(), Logger: quietLog()}, r.st, r.q, r.b, nil)
	if err != nil {
		t.Fatal(err)
	}
	j2, err := c.newTerm(2).claim(ctx, id)
	if err != nil || j2 == nil {
		t.Fatalf("claim by epoch 2: %v", err)
	}
	if j2.cp.WriterEpoch != 2 || j2.done.GetCardinality() != 1 {
		t.Fatalf("claimed checkpoint: writer epoch %d, %d done", j2.cp.WriterEpoch, j2.done.GetCardinality())
	}
	stale := &job{id: id, cp: j2.cp, etag: staleETag, run: j2.run, done: j2.done.Clone()}
	stale.done.Add(5)
	if err := c.newTerm(1).ck.now(ctx, stale); !errors.Is(err, ErrDeposed) {
		t.Fatalf("deposed leader's checkpoint write: %v, want ErrDeposed", err)
	}
	if st, _ := r.cl.Status(ctx, id); st.ShardsDone != 1 || st.Epoch != 2 {
		t.Fatalf("deposed write changed the checkpoint: %+v", st)
	}

	// End to end: a new leader takes over while the old one still runs; the old one stops with
	// ErrDeposed, and the job finishes exactly under the new one. (Epoch 3: the claim above was a
	// term of epoch 2, and two terms never share an epoch.)
	r.lead(3)
	select {
	case <-a.done:
		if !errors.Is(a.err, ErrDeposed) {
			t.Fatalf("old leader stopped with %v, want ErrDeposed", a.err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("old leader still running after a newer one took over")
	}
	for _, m := range shards[1:] {
		r.result(m, 1, 1, nil)
	}
	st := r.wait(id, 30*time.Second)
	sameJSON(t, st.Result, json.RawMessage(`{"shards":6,"index_sum":15}`))
	if st.Epoch != 3 {
		t.Fatalf("finished by epoch %d, want 3", st.Epoch)
	}
}

func TestCoordinator_PoisonShardFailsJobNamingIt(t *testing.T) {
	r := newRig(t)
	r.lead(1)
	r.work(worker.Config{Concurrency: 2, MaxAttempts: 3, RetryBackoff: time.Millisecond})
	id := r.submit("sleep", `{"shards":20,"fail_always":[7],"panic_always":[11]}`)
	st := r.wait(id, time.Minute)
	if st.State != jobs.StateFailed {
		t.Fatalf("state %s, want failed", st.State)
	}
	for _, want := range []string{"shard ", "3 attempts", "last error"} {
		if !strings.Contains(st.Error, want) {
			t.Fatalf("error %q does not say %q", st.Error, want)
		}
	}
	if !strings.Contains(st.Error, "shard 7 ") && !strings.Contains(st.Error, "shard 11 ") {
		t.Fatalf("error %q names neither poison shard", st.Error)
	}
	// The worker survived the panics: another job still runs.
	id2 := r.submit("sleep", `{"shards":5}`)
	if st := r.wait(id2, time.Minute); st.State != jobs.StateSucceeded {
		t.Fatalf("next job: %s %s", st.State, st.Error)
	}
}

func TestCoordinator_CancelPurgesShards(t *testing.T) {
	r := newRig(t)
	ctx := context.Background()
	r.lead(1)
	r.work(worker.Config{Concurrency: 1})
	id := r.submit("sleep", `{"shards":200,"duration":"50ms"}`)
	testenv.Eventually(t, 20*time.Second, 20*time.Millisecond, func() bool {
		st, err := r.cl.Status(ctx, id)
		return err == nil && st.ShardsDone >= 2
	}, "job did not start")
	if _, err := r.cl.Cancel(ctx, id); err != nil {
		t.Fatal(err)
	}
	st := r.wait(id, 30*time.Second)
	if st.State != jobs.StateCancelled || st.ShardsDone >= st.ShardsTotal {
		t.Fatalf("after cancel: %s %d/%d", st.State, st.ShardsDone, st.ShardsTotal)
	}
	testenv.Eventually(t, 10*time.Second, 50*time.Millisecond, func() bool {
		n, err := r.b.QueuedShards(ctx)
		return err == nil && n == 0
	}, "queued shards of a cancelled job not purged")
	if _, err := r.cl.Cancel(ctx, id); err == nil {
		t.Fatal("cancelling a cancelled job succeeded")
	}
}

// A cancel hint on NATS without the job's cancel marker in storage (anyone who can publish on the
// control subject) changes nothing; the job runs to the end.
func TestCoordinator_CancelHintWithoutMarkerIgnored(t *testing.T) {
	r := newRig(t)
	ctx := context.Background()
	r.lead(1)
	r.work(worker.Config{Concurrency: 2})
	id := r.submit("sleep", `{"shards":60,"duration":"20ms"}`)
	testenv.Eventually(t, 20*time.Second, 20*time.Millisecond, func() bool {
		st, err := r.cl.Status(ctx, id)
		return err == nil && st.ShardsDone >= 2
	}, "job did not start")
	for range 3 {
		if err := r.b.Announce(bus.CtlCancel, []byte(id)); err != nil {
			t.Fatal(err)
		}
	}
	st := r.wait(id, time.Minute)
	if st.State != jobs.StateSucceeded || st.ShardsDone != 60 {
		t.Fatalf("after a forged cancel hint: %s %d/%d %s", st.State, st.ShardsDone, st.ShardsTotal, st.Error)
	}
}

func TestClient_SubmitRefusesBadJobsAndWritesNothing(t *testing.T) {
	r := newRig(t)
	ctx := context.Background()
	big := `{"shards":1,"fail_always":[` + strings.Repeat("0,", 40000) + `0]}`
	for _, c := range []struct{ typ, params, want string }{
		{"prime", `{}`, `unknown job type "prime"; known: pi, primes, regroup, sleep, wordcount`},
		{"primes", `{"from":10,"to":5,"shards":1}`, `"to" must be greater than "from"`},
		{"primes", `{"from":0,"to":10,"shards":1,"extra":1}`, `extra`},
		{"primes", `{"to":"ten"}`, `to`},
		{"primes", `not json`, `not valid JSON`},
		{"sleep", big, `limit`},
	} {
		_, err := r.cl.Submit(ctx, c.typ, json.RawMessage(c.params))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("submit %s %.40s: %v, want an error saying %q", c.typ, c.params, err, c.want)
		}
	}
	if blobs, err := r.st.List(ctx, ""); err != nil || len(blobs) != 0 {
		t.Fatalf("refused submits wrote %v (%v)", blobs, err)
	}
	if n, err := r.q.Depth(ctx); err != nil || n != 0 {
		t.Fatalf("refused submits queued %d messages (%v)", n, err)
	}
}

func TestCoordinator_ReportsEvents(t *testing.T) {
	r := newRig(t)
	var mu sync.Mutex
	var kinds []EventKind
	var finished Event
	l := r.leadObserved(7, func(ev Event) {
		mu.Lock()
		defer mu.Unlock()
		if ev.Epoch != 7 {
			t.Errorf("event %s with epoch %d, want 7", ev.Kind, ev.Epoch)
		}
		kinds = append(kinds, ev.Kind)
		if ev.Kind == EventJobFinished {
			finished = ev
		}
	})
	r.work(worker.Config{Concurrency: 2})
	id := r.submit("sleep", `{"shards":20}`)
	if st := r.wait(id, time.Minute); st.State != jobs.StateSucceeded {
		t.Fatalf("%s: %s", st.State, st.Error)
	}
	testenv.Eventually(t, 10*time.Second, 10*time.Millisecond, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return finished.Job != ""
	}, "no job_finished event")
	if err := l.stop(); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	want := []EventKind{EventTermStarted, EventJobPlanned, EventJobResumed, EventFirstMerge, EventJobFinished, EventTermEnded}
	if !slices.Equal(kinds, want) {
		t.Errorf("events %v, want %v", kinds, want)
	}
	if finished.Job != id || finished.State != string(jobs.StateSucceeded) || finished.Count != 20 || finished.Err != nil {
		t.Errorf("job_finished event %+v", finished)
	}
}

// A checkpoint's cost sets the job's next checkpoint: at most a tenth of the time goes to it.
func TestDue_AdaptsToCheckpointCost(t *testing.T) {
	ck := &checkpointer{cfg: Config{CheckpointInterval: 200 * time.Millisecond}}
	for _, c := range []struct{ cost, want time.Duration }{
		{time.Millisecond, 200 * time.Millisecond}, // cheap: the configured interval
		{100 * time.Millisecond, time.Second},      // costly: 10 × its cost
		{10 * time.Second, 10 * time.Second},       // capped at 50 × the interval
	} {
		got := time.Until(ck.due(c.cost))
		if got > c.want || got < c.want-time.Second/10 {
			t.Errorf("due after a %v checkpoint in %v, want %v", c.cost, got, c.want)
		}
	}
}

func TestConfig_ValidateReportsEveryProblem(t *testing.T) {
	if err := (Config{}).Validate(); err != nil {
		t.Fatalf("zero config (all defaults): %v", err)
	}
	err := Config{CheckpointInterval: time.Hour, QueueVisibility: time.Second, DispatchBatch: 100, DispatchWindow: 10, StallTimeout: time.Second}.Validate()
	if !errors.Is(err, ErrInvalidConfig) {
		t.Fatalf("err = %v", err)
	}
	for _, want := range []string{"CheckpointInterval", "QueueVisibility", "DispatchWindow", "StallTimeout"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("%q does not name %s", err, want)
		}
	}
}

// gatedStore holds every checkpoint update (not the first write) until the gate opens: a blob
// store that hangs, which the real one cannot do on demand.
type gatedStore struct {
	Store
	gate chan struct{}
	hung atomic.Int32
}

func (g *gatedStore) PutMeta(ctx context.Context, name string, data []byte, meta map[string]string, cond store.Cond) (store.ETag, error) {
	if strings.HasSuffix(name, "/checkpoint") && cond.IfMatch != "" {
		g.hung.Add(1)
		select {
		case <-g.gate:
		case <-ctx.Done():
			return "", ctx.Err()
		}
	}
	return g.Store.PutMeta(ctx, name, data, meta, cond)
}

// Checkpoints are written in the background: a checkpoint write that hangs far longer than the
// stall timeout does not stop the merge loop (the leader stays healthy), and once it completes
// the job finishes exactly.
func TestCoordinator_SlowCheckpointDoesNotStallMerging(t *testing.T) {
	r := newRig(t)
	gs := &gatedStore{Store: r.st, gate: make(chan struct{})}
	c, err := New(Config{Registry: builtin.Registry(), Logger: quietLog(), CheckpointInterval: 20 * time.Millisecond,
		StallTimeout: 300 * time.Millisecond, RescanInterval: time.Second, QueuePoll: 100 * time.Millisecond},
		gs, r.q, connect(t, r.url), store.NewEnv(r.blob))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Lead(ctx, 1) }()
	var open sync.Once
	release := func() { open.Do(func() { close(gs.gate) }) }
	defer func() { release(); cancel(); <-done }()
	r.work(worker.Config{Concurrency: 2})
	id := r.submit("sleep", `{"shards":50,"duration":"1ms"}`)
	testenv.Eventually(t, 20*time.Second, 5*time.Millisecond, func() bool { return gs.hung.Load() > 0 }, "no checkpoint write started")
	for end := time.Now().Add(time.Second); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
		if err := c.Healthy(); err != nil {
			t.Fatalf("a hung checkpoint write stalled the loop: %v", err)
		}
	}
	release()
	st := r.wait(id, 30*time.Second)
	sameJSON(t, st.Result, json.RawMessage(`{"shards":50,"index_sum":1225}`))
}
