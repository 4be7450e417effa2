package worker_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/mapagg/mapagg/builtin"
	"github.com/mapagg/mapagg/internal/bus"
	"github.com/mapagg/mapagg/internal/harness/testenv"
	"github.com/mapagg/mapagg/internal/harness/testkeys"
	"github.com/mapagg/mapagg/internal/protocol"
	"github.com/mapagg/mapagg/internal/worker"
	"github.com/mapagg/mapagg/jobs"
	"github.com/mapagg/mapagg/store"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// testJob maps with a function of the test's choosing.
type testJob struct {
	typ string
	fn  func(jobs.Task) ([]byte, error)
}

func (j testJob) Type() string                   { return j.typ }
func (j testJob) Validate(json.RawMessage) error { return nil }
func (j testJob) Split(context.Context, jobs.Env, json.RawMessage) ([][]byte, error) {
	return nil, errors.New("not used")
}
func (j testJob) Map(_ context.Context, _ jobs.Env, t jobs.Task) ([]byte, error) { return j.fn(t) }
func (j testJob) NewAggregate(json.RawMessage) (jobs.Aggregate, error) {
	return nil, errors.New("not used")
}

type rig struct {
	t   *testing.T
	url string
	b   *bus.Bus
	st  *store.Container
}

func newRig(t *testing.T) *rig {
	t.Helper()
	blob, err := store.NewClient(testenv.Azurite(t))
	if err != nil {
		t.Fatal(err)
	}
	st := store.New(blob, testenv.Name(t, "jobs"))
	if err := st.Ensure(context.Background()); err != nil {
		t.Fatal(err)
	}
	url := testenv.NATS(t)
	b, err := bus.Connect(url, t.Name(), bus.Config{Keys: testkeys.Keys()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	if err := b.Ensure(context.Background()); err != nil {
		t.Fatal(err)
	}
	return &rig{t: t, url: url, b: b, st: st}
}

// start runs a worker with the given jobs until the test ends.
func (r *rig) start(cfg worker.Config, js ...jobs.Job) *worker.Worker {
	r.t.Helper()
	reg := jobs.NewRegistry()
	for _, j := range js {
		if err := reg.Register(j); err != nil {
			r.t.Fatal(err)
		}
	}
	if cfg.ID == "" {
		cfg.ID = "w1"
	}
	cfg.Registry, cfg.Logger = reg, slog.New(slog.NewTextHandler(io.Discard, nil))
	w, err := worker.New(cfg, r.b, r.st, nil)
	if err != nil {
		r.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		if err := w.Run(ctx); err != nil {
			r.t.Error(err)
		}
	}()
	r.t.Cleanup(func() { cancel(); wg.Wait() })
	return w
}

func (r *rig) dispatch(typ, job string, n int) {
	r.t.Helper()
	var out []bus.Outgoing
	for i := range n {
		m := protocol.ShardMsg{Kind: protocol.KindAggregate, Job: job, Type: typ, Index: i, Epoch: 1, Shard: []byte(fmt.Sprint(i))}
		data, err := m.Encode()
		if err != nil {
			r.t.Fatal(err)
		}
		out = append(out, bus.Outgoing{Subject: r.b.ShardTypeSubject(typ, job), MsgID: protocol.ShardMsgID(job, i), Data: data})
	}
	if err := r.b.PublishAll(context.Background(), out); err != nil {
		r.t.Fatal(err)
	}
}

// results takes n results off the results stream, as a leader would.
func (r *rig) results(n int) []*protocol.ResultMsg {
	r.t.Helper()
	f, err := r.b.OpenResults(context.Background(), 1, 64)
	if err != nil {
		r.t.Fatal(err)
	}
	defer f.Stop()
	var out []*protocol.ResultMsg
	timeout := time.After(30 * time.Second)
	for len(out) < n {
		select {
		case d := <-f.C:
			ms, err := protocol.DecodeResults(d.Data())
			if err != nil {
				r.t.Fatal(err)
			}
			_ = d.Ack()
			out = append(out, ms...)
		case <-timeout:
			r.t.Fatalf("got %d results, want %d", len(out), n)
		}
	}
	return out
}

func (r *rig) noneQueued() {
	r.t.Helper()
	testenv.Eventually(r.t, 10*time.Second, 20*time.Millisecond, func() bool {
		n, err := r.b.QueuedShards(context.Background())
		return err == nil && n == 0
	}, "shards still queued")
}

// A map step that panics is recovered (the worker lives on) and retried; the retry's result is
// published.
func TestWorker_PanicRecoveredAndRetried(t *testing.T) {
	r := newRig(t)
	w := r.start(worker.Config{RetryBackoff: time.Millisecond}, testJob{typ: "flaky", fn: func(task jobs.Task) ([]byte, error) {
		if task.Attempt == 1 {
			panic("first attempt blows up")
		}
		return []byte("ok"), nil
	}})
	r.dispatch("flaky", "job-panic", 3)
	for _, res := range r.results(3) {
		if res.Error != "" || string(res.Partial) != "ok" || res.Attempt != 2 || res.Worker != "w1" {
			t.Fatalf("result %+v: want partial ok from attempt 2", res)
		}
	}
	r.noneQueued()
	if s := w.Stats(); s.Failed != 3 || s.Redelivered != 3 || s.Succeeded != 3 || s.GaveUp != 0 {
		t.Fatalf("stats %+v", s)
	}
}

// A shard that fails every attempt is reported failed after MaxAttempts, naming the shard, the
// attempts and the last error, and is not redelivered again.
func TestWorker_AttemptLimit(t *testing.T) {
	r := newRig(t)
	var mu sync.Mutex
	runs := 0
	w := r.start(worker.Config{MaxAttempts: 2, RetryBackoff: time.Millisecond}, testJob{typ: "bad", fn: func(task jobs.Task) ([]byte, error) {
		mu.Lock()
		runs++
		mu.Unlock()
		return nil, fmt.Errorf("disk on fire (attempt %d)", task.Attempt)
	}})
	r.dispatch("bad", "job-bad", 1)
	res := r.results(1)[0]
	for _, want := range []string{"shard 0 of job job-bad", "after 2 attempts", "disk on fire (attempt 2)"} {
		if !strings.Contains(res.Error, want) {
			t.Fatalf("error %q does not say %q", res.Error, want)
		}
	}
	r.noneQueued()
	time.Sleep(200 * time.Millisecond)
	mu.Lock()
	defer mu.Unlock()
	if runs != 2 {
		t.Fatalf("map ran %d times, want 2", runs)
	}
	if s := w.Stats(); s.GaveUp != 1 || s.Failed != 2 {
		t.Fatalf("stats %+v", s)
	}
}

// A shard whose map step returns jobs.Permanent fails on its first attempt, not retried, and
// its result names the shard and the error; the job's other shards run as usual.
func TestWorker_PermanentErrorNotRetried(t *testing.T) {
	r := newRig(t)
	var mu sync.Mutex
	runs := map[int]int{}
	w := r.start(worker.Config{MaxAttempts: 3, RetryBackoff: time.Millisecond}, testJob{typ: "parse", fn: func(task jobs.Task) ([]byte, error) {
		mu.Lock()
		runs[task.Index]++
		mu.Unlock()
		if task.Index == 1 {
			return nil, fmt.Errorf("map: %w", jobs.Permanent(errors.New("record 9: unexpected byte 0xff")))
		}
		return []byte("ok"), nil
	}})
	r.dispatch("parse", "job-parse", 3)
	var failed *protocol.ResultMsg
	for _, res := range r.results(3) {
		if res.Error != "" {
			failed = res
		}
	}
	if failed == nil || failed.Index != 1 {
		t.Fatalf("no failed result for shard 1: %+v", failed)
	}
	for _, want := range []string{"shard 1 of job job-parse", "failed permanently (attempt 1, not retried)", "map: record 9: unexpected byte 0xff"} {
		if !strings.Contains(failed.Error, want) {
			t.Fatalf("error %q does not say %q", failed.Error, want)
		}
	}
	r.noneQueued()
	mu.Lock()
	defer mu.Unlock()
	if runs[1] != 1 {
		t.Fatalf("the permanent shard ran %d times, want 1", runs[1])
	}
	if s := w.Stats(); s.GaveUp != 1 || s.Failed != 1 || s.Succeeded != 2 {
		t.Fatalf("stats %+v", s)
	}
}

// A partial above InlinePartialLimit goes to a blob; the result carries its name.
func TestWorker_LargePartialViaBlob(t *testing.T) {
	r := newRig(t)
	big := bytes.Repeat([]byte("partial!"), 1024) // 8 KiB
	r.start(worker.Config{InlinePartialLimit: 1024}, testJob{typ: "big", fn: func(task jobs.Task) ([]byte, error) {
		if task.Index == 1 {
			return []byte("small"), nil
		}
		return big, nil
	}})
	r.dispatch("big", "job-big", 2)
	for _, res := range r.results(2) {
		switch res.Index {
		case 0:
			if res.Ref != protocol.PartialBlob("job-big", 0, 1) || len(res.Partial) != 0 {
				t.Fatalf("large partial: ref %q, %d inline bytes", res.Ref, len(res.Partial))
			}
			data, _, err := r.st.Get(context.Background(), res.Ref)
			if err != nil || !bytes.Equal(data, big) {
				t.Fatalf("blob %s: %d bytes, err %v", res.Ref, len(data), err)
			}
		case 1:
			if res.Ref != "" || string(res.Partial) != "small" {
				t.Fatalf("small partial: ref %q, partial %q", res.Ref, res.Partial)
			}
		}
	}
}

// An undecodable shard message is dead-lettered, not run and not redelivered.
func TestWorker_MalformedShardDeadLettered(t *testing.T) {
	r := newRig(t)
	w := r.start(worker.Config{}, testJob{typ: "t", fn: func(jobs.Task) ([]byte, error) { return nil, nil }})
	if err := r.b.PublishAll(context.Background(), []bus.Outgoing{{Subject: r.b.ShardTypeSubject("t", "junk"), MsgID: "junk/0", Data: []byte("\x00not a shard")}}); err != nil {
		t.Fatal(err)
	}
	r.noneQueued()
	testenv.Eventually(t, 10*time.Second, 20*time.Millisecond, func() bool { return w.Stats().Malformed == 1 }, "malformed shard not counted")
}

// During a rolling upgrade, a worker that lacks a job type never takes (or fails) its shards:
// they wait for a worker that has the type.
func TestWorker_LacksTypeLeavesShardsForOthers(t *testing.T) {
	r := newRig(t)
	ok := func(jobs.Task) ([]byte, error) { return []byte("done"), nil }
	old := r.start(worker.Config{ID: "old"}, testJob{typ: "v1", fn: ok})
	r.dispatch("v2", "job-new", 4)
	time.Sleep(500 * time.Millisecond)
	if s := old.Stats(); s.Executed != 0 {
		t.Fatalf("a worker without type v2 ran %d of its shards", s.Executed)
	}
	r.start(worker.Config{ID: "new"}, testJob{typ: "v1", fn: ok}, testJob{typ: "v2", fn: ok})
	for _, res := range r.results(4) {
		if res.Error != "" || res.Worker != "new" {
			t.Fatalf("result %+v: want done by the new worker", res)
		}
	}
}

// A worker killed while holding shards (here: its connection closed without settling them) gives
// them back within the shard timeout, the default of which is seconds.
func TestWorker_DeadWorkersShardsBackWithinShardTimeout(t *testing.T) {
	r := newRig(t)
	if st := r.b.Config().ShardTimeout; st > 5*time.Second {
		t.Fatalf("default shard timeout %v: a dead worker's shards would wait that long", st)
	}
	dead, err := bus.Connect(r.url, "dead", bus.Config{Keys: testkeys.Keys()})
	if err != nil {
		t.Fatal(err)
	}
	f, err := dead.Shards(context.Background(), bus.ShardOptions{Types: []string{"slow"}, Limit: func() int { return 2 }})
	if err != nil {
		t.Fatal(err)
	}
	r.dispatch("slow", "job-dead", 2)
	for range 2 {
		<-f.C
	}
	dead.Close() // the process dies: no acks, no keep-alive
	start := time.Now()
	r.start(worker.Config{ID: "live"}, testJob{typ: "slow", fn: func(jobs.Task) ([]byte, error) { return []byte("x"), nil }})
	res := r.results(2)
	if res[0].Attempt != 2 {
		t.Fatalf("attempt %d, want 2 (redelivered)", res[0].Attempt)
	}
	t.Logf("a dead worker's shards were back in %v", time.Since(start).Round(time.Millisecond))
}

// Results of shards that finish together travel in one message per job (a batch), and every
// shard is settled once that message is stored.
func TestWorker_BatchesResults(t *testing.T) {
	r := newRig(t)
	release := make(chan struct{})
	w := r.start(worker.Config{Concurrency: 8}, testJob{typ: "gate", fn: func(jobs.Task) ([]byte, error) {
		<-release
		return []byte("p"), nil
	}})
	r.dispatch("gate", "job-batch", 8)
	testenv.Eventually(t, 10*time.Second, 10*time.Millisecond, func() bool { return w.Stats().Executed == 8 }, "8 shards not running")
	close(release)
	f, err := r.b.OpenResults(context.Background(), 1, 64)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Stop()
	seen := map[int]bool{}
	msgs := 0
	timeout := time.After(30 * time.Second)
	for len(seen) < 8 {
		select {
		case d := <-f.C:
			ms, err := protocol.DecodeResults(d.Data())
			if err != nil {
				t.Fatal(err)
			}
			msgs++
			for _, m := range ms {
				if seen[m.Index] || m.Job != "job-batch" || string(m.Partial) != "p" {
					t.Fatalf("result %+v (seen before: %v)", m, seen[m.Index])
				}
				seen[m.Index] = true
			}
			_ = d.Ack()
		case <-timeout:
			t.Fatalf("got %d results", len(seen))
		}
	}
	if msgs >= 8 {
		t.Logf("8 results in %d messages: no batching happened this time (timing)", msgs)
	}
	r.noneQueued()
	testenv.Eventually(t, 10*time.Second, 10*time.Millisecond, func() bool { return w.Stats().Succeeded == 8 }, "shards not all acked")
}

func TestConfig_ValidateReportsEveryProblem(t *testing.T) {
	err := worker.Config{Concurrency: -1, MaxAttempts: 1000, InlinePartialLimit: 10, MapDelay: -time.Second}.Validate()
	if !errors.Is(err, worker.ErrInvalidConfig) {
		t.Fatalf("err = %v", err)
	}
	for _, want := range []string{"ID", "Concurrency", "MaxAttempts", "InlinePartialLimit", "MapDelay"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("%q does not name %s", err, want)
		}
	}
	d := worker.DefaultConfig()
	d.ID = "w"
	if err := d.Validate(); err != nil {
		t.Fatalf("defaults: %v", err)
	}
}

// A message of several shards runs them all; if one fails, the whole message is retried, and
// each shard's result is published once, from the attempt that finished them all.
func TestWorker_ShardBatchRetriedWhole(t *testing.T) {
	r := newRig(t)
	w := r.start(worker.Config{RetryBackoff: time.Millisecond}, testJob{typ: "b", fn: func(task jobs.Task) ([]byte, error) {
		if task.Index == 2 && task.Attempt == 1 {
			return nil, errors.New("transient")
		}
		return []byte(fmt.Sprint(task.Index)), nil
	}})
	data, err := protocol.EncodeShards(protocol.KindAggregate, "job-b", "b", 1, 0, [][]byte{{}, {}, {}, {}})
	if err != nil {
		t.Fatal(err)
	}
	if err := r.b.PublishAll(context.Background(), []bus.Outgoing{{Subject: r.b.ShardTypeSubject("b", "job-b"), MsgID: protocol.ShardMsgID("job-b", 0), Data: data}}); err != nil {
		t.Fatal(err)
	}
	seen := map[int]bool{}
	for _, res := range r.results(4) {
		if seen[res.Index] || res.Attempt != 2 || string(res.Partial) != fmt.Sprint(res.Index) {
			t.Fatalf("result %+v", res)
		}
		seen[res.Index] = true
	}
	r.noneQueued()
	if s := w.Stats(); s.Succeeded != 4 || s.Failed != 1 || s.Redelivered != 1 {
		t.Fatalf("stats %+v", s)
	}
}

// Shards of a job whose checkpoint says it succeeded (a replay after the job ended) are dropped
// before they run: nothing runs, nothing is published or written; other jobs' shards run. The
// checkpoint's status record says so, not a result copy (a small result has none).
func TestWorker_ReplayOfEndedJobDropped(t *testing.T) {
	r := newRig(t)
	cp := &protocol.Checkpoint{Job: "job-ended", Type: "count", State: jobs.StateSucceeded, Total: 50, DoneCount: 50, Result: []byte(`{}`)}
	meta, err := protocol.NewStatusRecord(cp, &protocol.Spec{Type: "count"}).Metadata()
	if err != nil {
		t.Fatal(err)
	}
	data, _ := cp.Encode()
	if _, err := r.st.PutMeta(context.Background(), protocol.CheckpointBlob("job-ended"), data, meta, store.Cond{}); err != nil {
		t.Fatal(err)
	}
	// A running job's checkpoint is no end.
	live := &protocol.Checkpoint{Job: "job-live", Type: "count", State: jobs.StateRunning, Total: 3}
	meta, _ = protocol.NewStatusRecord(live, &protocol.Spec{Type: "count"}).Metadata()
	data, _ = live.Encode()
	if _, err := r.st.PutMeta(context.Background(), protocol.CheckpointBlob("job-live"), data, meta, store.Cond{}); err != nil {
		t.Fatal(err)
	}
	var ran atomic.Int32
	w := r.start(worker.Config{}, testJob{typ: "count", fn: func(jobs.Task) ([]byte, error) { ran.Add(1); return []byte("ok"), nil }})
	r.dispatch("count", "job-ended", 50)
	r.noneQueued()
	if s := w.Stats(); s.Replayed != 50 || s.Executed != 0 || ran.Load() != 0 {
		t.Fatalf("stats %+v, ran %d: want 50 replayed, none run", s, ran.Load())
	}
	r.dispatch("count", "job-live", 3)
	if res := r.results(3); len(res) != 3 || res[0].Job != "job-live" {
		t.Fatalf("results %+v", res)
	}
}

// While the results stream refuses messages (full), the worker holds its shards and retries the
// publish: when space returns the results arrive by themselves, from attempt 1 (an outage does
// not use up attempts).
func TestWorker_PublishFailuresDoNotUseUpAttempts(t *testing.T) {
	r := newRig(t)
	ctx := context.Background()
	js, err := jetstream.New(r.b.Conn())
	if err != nil {
		t.Fatal(err)
	}
	s, err := js.Stream(ctx, "MAPAGG_RESULTS")
	if err != nil {
		t.Fatal(err)
	}
	orig := s.CachedInfo().Config
	full := orig
	full.MaxBytes, full.Discard = 1, jetstream.DiscardNew
	if _, err := js.UpdateStream(ctx, full); err != nil {
		t.Fatal(err)
	}
	w := r.start(worker.Config{MaxAttempts: 2}, testJob{typ: "count", fn: func(jobs.Task) ([]byte, error) { return []byte("ok"), nil }})
	r.dispatch("count", "job-full", 4)
	testenv.Eventually(t, 20*time.Second, 20*time.Millisecond, func() bool { return w.Stats().PublishRetries >= 3 }, "no publish retried")
	if err := w.PublishErr(); err == nil {
		t.Error("PublishErr is nil while results cannot be published")
	}
	time.Sleep(6 * time.Second) // past the shard timeout (5s): the shards stay held, not redelivered
	if _, err := js.UpdateStream(ctx, orig); err != nil {
		t.Fatal(err)
	}
	for _, res := range r.results(4) {
		if res.Attempt != 1 || res.Error != "" {
			t.Fatalf("result %+v: want attempt 1, no error", res)
		}
	}
	r.noneQueued()
	if err := w.PublishErr(); err != nil {
		t.Errorf("PublishErr after the outage: %v", err)
	}
	if st := w.Stats(); st.Redelivered != 0 || st.GaveUp != 0 {
		t.Fatalf("stats %+v: an outage used up attempts", st)
	}
}

// keyable is a test job that also has a keyed form (the built-in wordcount's).
type keyable struct{ testJob }

func (keyable) Keyed() jobs.KeyedJob {
	wordcount, err := builtin.Registry().Lookup("wordcount")
	if err != nil {
		panic(err)
	}
	return jobs.KeyedForm(wordcount)
}
func (keyable) RunsKeyed(json.RawMessage) bool { return false }

// A worker runs a shard by the kind its message says, whatever its bytes: an aggregate job's
// shard may start with anything (the keyed tasks' old magic too), and a keyed task of a type
// that is not keyed fails for good.
func TestWorker_RunsByTheKindNotThePayload(t *testing.T) {
	r := newRig(t)
	echo := func(task jobs.Task) ([]byte, error) { return task.Shard, nil }
	r.start(worker.Config{}, keyable{testJob{typ: "both", fn: echo}}, testJob{typ: "plain", fn: echo})
	magic := []byte{0xFF, 'K', protocol.TaskMap, 1, 'x'}
	var out []bus.Outgoing
	for _, m := range []protocol.ShardMsg{
		{Kind: protocol.KindAggregate, Job: "job-both", Type: "both", Index: 0, Epoch: 1, Shard: magic},
		{Kind: protocol.KindKeyed, Job: "job-plain", Type: "plain", Index: 0, Epoch: 1, Shard: protocol.EncodeKeyedTask(protocol.KeyedTask{Task: protocol.TaskMap, Partitions: 1})},
	} {
		data, err := m.Encode()
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, bus.Outgoing{Subject: r.b.ShardTypeSubject(m.Type, m.Job), MsgID: protocol.ShardMsgID(m.Job, 0), Data: data})
	}
	if err := r.b.PublishAll(context.Background(), out); err != nil {
		t.Fatal(err)
	}
	for _, res := range r.results(2) {
		switch res.Job {
		case "job-both":
			if res.Kind != protocol.KindAggregate || res.Error != "" || !bytes.Equal(res.Partial, magic) {
				t.Fatalf("aggregate shard with the old magic: %+v", res)
			}
		case "job-plain":
			if res.Kind != protocol.KindKeyed || !strings.Contains(res.Error, "not keyed") {
				t.Fatalf("keyed task of a type that is not keyed: %+v", res)
			}
		}
	}
}
