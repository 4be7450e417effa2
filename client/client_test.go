package client_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mapagg/mapagg/builtin"
	"github.com/mapagg/mapagg/client"
	"github.com/mapagg/mapagg/internal/harness/testenv"
	"github.com/mapagg/mapagg/internal/protocol"
	"github.com/mapagg/mapagg/internal/queue"
	"github.com/mapagg/mapagg/jobs"
	"github.com/mapagg/mapagg/store"
)

func TestMain(m *testing.M) { testenv.Main(m) }

type env struct {
	jobs  *store.Container
	queue *queue.Queue
	cl    *client.Client
}

// newEnv returns a client with the built-ins over a fresh container and queue on Azurite.
func newEnv(t testing.TB) *env {
	t.Helper()
	return newEnvNamed(t, testenv.Azurite(t), testenv.Name(t, "jobs"), testenv.Name(t, "q"))
}

// newEnvNamed is newEnv over the container and queue named.
func newEnvNamed(t testing.TB, conn, container, queueName string) *env {
	t.Helper()
	bc, err := store.NewClient(conn)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	c := store.New(bc, container)
	q, err := queue.New(conn, queueName)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Ensure(ctx); err != nil {
		t.Fatal(err)
	}
	if err := q.Ensure(ctx); err != nil {
		t.Fatal(err)
	}
	return &env{jobs: c, queue: q, cl: &client.Client{Store: c, Queue: q, Registry: builtin.Registry()}}
}

// assertNothingWritten checks that no blob and no queue message exist.
func (e *env) assertNothingWritten(t *testing.T) {
	t.Helper()
	ctx := context.Background()
	blobs, err := e.jobs.List(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	if len(blobs) != 0 {
		t.Errorf("a refused job wrote %d blobs, first %s", len(blobs), blobs[0].Name)
	}
	if n, err := e.queue.Depth(ctx); err != nil || n != 0 {
		t.Errorf("queue depth %d (%v), want 0", n, err)
	}
}

// putCheckpoint stores a checkpoint for job id as a leader would.
func (e *env) putCheckpoint(t testing.TB, id string, state jobs.State, done, total int, result, errText string) {
	t.Helper()
	cp := protocol.Checkpoint{Version: protocol.CheckpointVersion, Job: id, Type: "primes", State: state, PlanEpoch: 1, WriterEpoch: 2,
		Total: total, DoneCount: done, Dispatched: total, Result: json.RawMessage(result), Error: errText, UpdatedAt: time.Now().UTC()}
	if state.Terminal() {
		now := time.Now().UTC()
		cp.FinishedAt = &now
	}
	data, err := cp.Encode()
	if err != nil {
		t.Fatal(err)
	}
	md, err := protocol.NewStatusRecord(&cp, nil).Metadata()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.jobs.PutMeta(context.Background(), protocol.CheckpointBlob(id), data, md, store.Cond{}); err != nil {
		t.Fatal(err)
	}
}

func TestClient_Submit_WritesSpecAndQueuesID(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	id, err := e.cl.Submit(ctx, "primes", json.RawMessage(`{"from":0,"to":1000,"shards":4}`))
	if err != nil {
		t.Fatal(err)
	}
	data, _, err := e.jobs.Get(ctx, protocol.SpecBlob(id))
	if err != nil {
		t.Fatal(err)
	}
	spec, err := protocol.ParseSpec(data)
	if err != nil || spec.Type != "primes" || spec.ID != id {
		t.Fatalf("stored spec %+v, %v", spec, err)
	}
	msgs, err := e.queue.Receive(ctx, 10, time.Minute)
	if err != nil || len(msgs) != 1 || msgs[0].Text != id {
		t.Fatalf("queue holds %+v (%v), want one message %s", msgs, err, id)
	}
	st, err := e.cl.Status(ctx, id)
	if err != nil || st.State != jobs.StateQueued || st.Type != "primes" {
		t.Fatalf("Status = %+v, %v; want queued primes", st, err)
	}
}

// recordingValidator is the cluster as the client sees it: answers by type, and counts the asks.
type recordingValidator struct {
	mu    sync.Mutex
	asked []string
	err   map[string]error // nil entry: valid; missing: unknown
}

func (v *recordingValidator) ValidateJob(_ context.Context, typ string, _ json.RawMessage) error {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.asked = append(v.asked, typ)
	if err, ok := v.err[typ]; ok {
		return err
	}
	return &jobs.UnknownTypeError{Type: typ, Known: []string{"squares"}}
}

func TestClient_Submit_RefusedWritesNothing(t *testing.T) {
	paramErr := &jobs.ParamError{Job: "squares", Field: "n", Reason: `"n" must be at least 1`}
	for _, tc := range []struct {
		name, typ, params string
		validator         bool
		want              error
		wantText          string
	}{
		{"local bad params", "primes", `{"from":10,"to":1,"shards":1}`, true, jobs.ErrBadParams, "bad parameters for primes"},
		{"local invalid JSON", "primes", `{"from":`, true, jobs.ErrBadParams, "not valid JSON"},
		{"unknown without validator", "squares", `{}`, false, jobs.ErrUnknownType, `unknown job type "squares"; known: pi, primes, regroup, sleep, wordcount`},
		{"unknown to the cluster", "nope", `{}`, true, jobs.ErrUnknownType, `known: squares`},
		{"cluster refuses params", "squares", `{"n":0}`, true, jobs.ErrBadParams, paramErr.Error()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			v := &recordingValidator{err: map[string]error{"squares": paramErr}}
			if tc.validator {
				e.cl.Validator = v
			}
			_, err := e.cl.Submit(context.Background(), tc.typ, json.RawMessage(tc.params))
			if !errors.Is(err, tc.want) || !strings.Contains(err.Error(), tc.wantText) {
				t.Fatalf("Submit = %v, want %v containing %q", err, tc.want, tc.wantText)
			}
			e.assertNothingWritten(t)
			if tc.typ == "primes" && len(v.asked) != 0 {
				t.Errorf("a type the client has went to the cluster: %v", v.asked)
			}
		})
	}
}

// An unknown output format is refused, naming output_format, before anything is written; a
// known one is stored in the spec, and none leaves the field out (earlier builds read the spec).
func TestClient_Submit_OutputFormat(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	params := json.RawMessage(`{"job":"20261125-120000-0123abcd","by":"value"}`)
	_, err := e.cl.Submit(ctx, "regroup", params, client.WithOutputFormat("csv"))
	var fe *protocol.FieldError
	if !errors.Is(err, client.ErrBadSpec) || !client.Refused(err) || !errors.As(err, &fe) || fe.Field != "output_format" ||
		!strings.Contains(err.Error(), `output_format "csv" is not a format`) {
		t.Fatalf("Submit with format csv = %v; want a refusal naming output_format", err)
	}
	e.assertNothingWritten(t)

	for _, f := range []string{"jsonl.zst", ""} {
		id, err := e.cl.Submit(ctx, "regroup", params, client.WithOutputFormat(f))
		if err != nil {
			t.Fatalf("format %q: %v", f, err)
		}
		spec, err := e.cl.Spec(ctx, id)
		if err != nil || spec.OutputFormat != f {
			t.Fatalf("format %q: Spec = %+v, %v", f, spec, err)
		}
		data, _, err := e.jobs.Get(ctx, protocol.SpecBlob(id))
		if err != nil {
			t.Fatal(err)
		}
		if stored := strings.Contains(string(data), `"output_format"`); stored != (f != "") {
			t.Errorf("format %q: stored spec %s", f, data)
		}
	}
}

func TestClient_Submit_ClusterTypeAccepted(t *testing.T) {
	e := newEnv(t)
	v := &recordingValidator{err: map[string]error{"squares": nil}}
	e.cl.Validator = v
	id, err := e.cl.Submit(context.Background(), "squares", json.RawMessage(`{"n":10}`))
	if err != nil {
		t.Fatal(err)
	}
	if len(v.asked) != 1 || v.asked[0] != "squares" {
		t.Fatalf("validator asked %v, want [squares]", v.asked)
	}
	if st, err := e.cl.Status(context.Background(), id); err != nil || st.Type != "squares" {
		t.Fatalf("Status = %+v, %v", st, err)
	}
}

// failingQueue is a queue that refuses every message (a failure Azurite does not produce on demand).
type failingQueue struct{}

func (failingQueue) Enqueue(context.Context, string) error { return errors.New("queue down") }

func TestClient_Submit_QueueFailureRemovesSpec(t *testing.T) {
	e := newEnv(t)
	e.cl.Queue = failingQueue{}
	if _, err := e.cl.Submit(context.Background(), "pi", json.RawMessage(`{"samples":1000,"shards":2}`)); err == nil || !strings.Contains(err.Error(), "queue job") {
		t.Fatalf("Submit = %v, want a queue error", err)
	}
	e.assertNothingWritten(t)
}

func TestClient_StatusResultWait(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	if _, err := e.cl.Status(ctx, "20261121-000000-00000000"); !errors.Is(err, client.ErrNoSuchJob) {
		t.Fatalf("Status of a missing job = %v, want ErrNoSuchJob", err)
	}
	if _, err := e.cl.Status(ctx, "../x"); !errors.Is(err, protocol.ErrBadID) {
		t.Fatalf("Status of a bad id = %v, want ErrBadID", err)
	}
	id, err := e.cl.Submit(ctx, "primes", json.RawMessage(`{"from":0,"to":100,"shards":4}`))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.cl.Result(ctx, id); !errors.Is(err, client.ErrNotFinished) || !strings.Contains(err.Error(), "queued") {
		t.Fatalf("Result of a queued job = %v, want ErrNotFinished", err)
	}
	e.putCheckpoint(t, id, jobs.StateRunning, 1, 4, "", "")
	st, err := e.cl.Status(ctx, id)
	if err != nil || st.State != jobs.StateRunning || st.ShardsDone != 1 || st.ShardsTotal != 4 || st.Epoch != 2 {
		t.Fatalf("Status = %+v, %v; want running 1/4 epoch 2", st, err)
	}
	if _, err := e.cl.Result(ctx, id); !errors.Is(err, client.ErrNotFinished) || !strings.Contains(err.Error(), "1 of 4") {
		t.Fatalf("Result of a running job = %v", err)
	}
	// Wait reports each change; the job finishes once Wait has seen it running.
	var seen []jobs.State
	final, err := e.cl.Wait(ctx, id, 10*time.Millisecond, func(s client.Status) {
		seen = append(seen, s.State)
		if s.State == jobs.StateRunning {
			e.putCheckpoint(t, id, jobs.StateSucceeded, 4, 4, `{"count":25}`, "")
		}
	})
	if err != nil || final.State != jobs.StateSucceeded || string(final.Result) != `{"count":25}` {
		t.Fatalf("Wait = %+v (result %s), %v", final, final.Result, err)
	}
	if len(seen) != 2 || seen[0] != jobs.StateRunning || seen[1] != jobs.StateSucceeded {
		t.Fatalf("progress saw %v, want [running succeeded]", seen)
	}
	res, err := e.cl.Result(ctx, id)
	if err != nil || string(res) != `{"count":25}` {
		t.Fatalf("Result = %s, %v", res, err)
	}
	if _, err := e.cl.Cancel(ctx, id); err == nil || !strings.Contains(err.Error(), "already succeeded") {
		t.Fatalf("Cancel of a finished job = %v", err)
	}
	// Wait gives up with ctx, returning what it saw.
	id2, err := e.cl.Submit(ctx, "primes", json.RawMessage(`{"from":0,"to":100,"shards":4}`))
	if err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	if st, err := e.cl.Wait(wctx, id2, 10*time.Millisecond, nil); !errors.Is(err, context.DeadlineExceeded) || st.State != jobs.StateQueued {
		t.Fatalf("Wait past its context = %+v, %v", st, err)
	}
	if _, err := e.cl.Wait(ctx, "20261121-000000-00000000", time.Millisecond, nil); !errors.Is(err, client.ErrNoSuchJob) {
		t.Fatalf("Wait for a missing job = %v, want ErrNoSuchJob", err)
	}
}

func TestClient_ResultOfFailedJob(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	id, err := e.cl.Submit(ctx, "primes", json.RawMessage(`{"from":0,"to":100,"shards":4}`))
	if err != nil {
		t.Fatal(err)
	}
	e.putCheckpoint(t, id, jobs.StateFailed, 3, 4, "", "shard 3: boom")
	if _, err := e.cl.Result(ctx, id); err == nil || !strings.Contains(err.Error(), "failed: shard 3: boom") {
		t.Fatalf("Result of a failed job = %v", err)
	}
}

type recordingNotifier struct {
	mu   sync.Mutex
	sent []string
}

func (n *recordingNotifier) Announce(subject string, data []byte) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.sent = append(n.sent, subject+" "+string(data))
	return nil
}

func TestClient_Cancel_WritesMarkerAndHints(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	n := &recordingNotifier{}
	e.cl.Notify = n
	id, err := e.cl.Submit(ctx, "primes", json.RawMessage(`{"from":0,"to":100,"shards":4}`))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.cl.Cancel(ctx, id); err != nil {
		t.Fatal(err)
	}
	if ok, err := e.jobs.Exists(ctx, protocol.CancelBlob(id)); err != nil || !ok {
		t.Fatalf("cancel marker exists = %v, %v", ok, err)
	}
	want := []string{protocol.CtlSubmitted + " " + id, protocol.CtlCancel + " " + id}
	if strings.Join(n.sent, "|") != strings.Join(want, "|") {
		t.Fatalf("hints %q, want %q", n.sent, want)
	}
	if _, err := e.cl.Cancel(ctx, "20261121-000000-00000000"); !errors.Is(err, client.ErrNoSuchJob) {
		t.Fatalf("Cancel of a missing job = %v", err)
	}
}

func TestClient_List(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	if list, err := e.cl.List(ctx, 10); err != nil || len(list) != 0 {
		t.Fatalf("List of nothing = %v, %v", list, err)
	}
	clock := time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC)
	e.cl.Now = func() time.Time { clock = clock.Add(time.Second); return clock }
	var ids []string
	for i := 0; i < 3; i++ {
		id, err := e.cl.Submit(ctx, "pi", json.RawMessage(`{"samples":1000,"shards":2}`))
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	// A folder without a spec (input data) is not a job.
	if _, err := e.jobs.Put(ctx, "input/words.txt", []byte("a b"), store.Cond{}); err != nil {
		t.Fatal(err)
	}
	list, err := e.cl.List(ctx, 2)
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 2 || list[0].ID != ids[1] || list[1].ID != ids[2] {
		t.Fatalf("List(2) = %+v, want the newest two of %v", list, ids)
	}
	if list, err := e.cl.List(ctx, 0); err != nil || len(list) != 3 {
		t.Fatalf("List(0) = %d jobs, %v; want 3", len(list), err)
	}
}

// One corrupt spec or checkpoint does not break the list: that job is shown with its error and
// the others as they are.
func TestClient_List_UnreadableJobShownWithItsError(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	clock := time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC)
	e.cl.Now = func() time.Time { clock = clock.Add(time.Second); return clock }
	var ids []string
	for i := 0; i < 3; i++ {
		id, err := e.cl.Submit(ctx, "pi", json.RawMessage(`{"samples":1000,"shards":2}`))
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	if _, err := e.jobs.Put(ctx, protocol.SpecBlob(ids[0]), []byte(`{"id":`), store.Cond{}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.jobs.Put(ctx, protocol.CheckpointBlob(ids[1]), []byte("not a checkpoint"), store.Cond{}); err != nil {
		t.Fatal(err)
	}
	list, err := e.cl.List(ctx, 0)
	if err != nil {
		t.Fatalf("List with two damaged jobs: %v", err)
	}
	if len(list) != 3 {
		t.Fatalf("List = %d jobs, want 3: %+v", len(list), list)
	}
	for i, want := range []string{"bad job spec", "bad checkpoint", ""} {
		st := list[i]
		if st.ID != ids[i] {
			t.Fatalf("list[%d] is %s, want %s", i, st.ID, ids[i])
		}
		if want == "" {
			if st.State != jobs.StateQueued || st.Unreadable != "" {
				t.Errorf("intact job %s: state %s, unreadable %q", st.ID, st.State, st.Unreadable)
			}
			continue
		}
		if st.State != client.StateUnreadable || !strings.Contains(st.Unreadable, want) {
			t.Errorf("damaged job %s: state %s, unreadable %q; want %s and %q", st.ID, st.State, st.Unreadable, client.StateUnreadable, want)
		}
	}
}

func TestNew_ConfigAndNATS(t *testing.T) {
	conn := testenv.Azurite(t)
	ctx := context.Background()
	if _, err := client.New(ctx, client.Config{}); !errors.Is(err, client.ErrInvalidConfig) {
		t.Fatalf("New without storage = %v, want ErrInvalidConfig", err)
	}
	base := client.Config{Storage: store.Account{ConnectionString: conn}, JobsContainer: testenv.Name(t, "jobs"), Queue: testenv.Name(t, "q"),
		Registry: builtin.Registry(), TypesWindow: 200 * time.Millisecond}
	e := newEnvNamed(t, conn, base.JobsContainer, base.Queue)

	// NATS unreachable: an error, unless optional; then local types still submit.
	cfg := base
	cfg.NATSURL = "nats://127.0.0.1:1"
	if _, err := client.New(ctx, cfg); err == nil || !strings.Contains(err.Error(), "nats://127.0.0.1:1") {
		t.Fatalf("New with NATS down = %v, want an error naming the URL", err)
	}
	cfg.NATSOptional = true
	cl, err := client.New(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cl.Submit(ctx, "squares", json.RawMessage(`{}`)); err == nil || !strings.Contains(err.Error(), "is unreachable") {
		t.Fatalf("a foreign type without NATS = %v", err)
	}
	e.assertNothingWritten(t)
	cl.Close()

	// A real NATS server without workers: a foreign type is refused naming ErrNoWorkers; a
	// local type is submitted and announced.
	cfg = base
	cfg.NATSURL = testenv.NATS(t)
	cl, err = client.New(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if _, err := cl.Submit(ctx, "squares", json.RawMessage(`{}`)); !errors.Is(err, client.ErrNoWorkers) {
		t.Fatalf("a foreign type with no worker = %v, want ErrNoWorkers", err)
	}
	e.assertNothingWritten(t)
	spec, err := cl.Validate(ctx, "primes", json.RawMessage(`{"from":0,"to":10,"shards":1}`))
	if err != nil || spec.Type != "primes" || protocol.CheckID(spec.ID) != nil {
		t.Fatalf("Validate = %+v, %v", spec, err)
	}
	id, err := cl.Submit(ctx, "primes", json.RawMessage(`{"from":0,"to":10,"shards":1}`))
	if err != nil {
		t.Fatal(err)
	}
	if st, err := cl.Status(ctx, id); err != nil || st.State != jobs.StateQueued {
		t.Fatalf("Status = %+v, %v", st, err)
	}
}

func TestClient_Query(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	clock := time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC)
	e.cl.Now = func() time.Time { clock = clock.Add(time.Minute); return clock }
	var ids []string
	for i := range 6 {
		typ, params := "pi", `{"samples":1000,"shards":2}`
		if i%3 == 0 {
			typ, params = "primes", `{"from":0,"to":100,"shards":2}`
		}
		id, err := e.cl.Submit(ctx, typ, json.RawMessage(params))
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	e.putCheckpoint(t, ids[4], jobs.StateFailed, 1, 2, "", "boom")
	if _, err := e.jobs.Put(ctx, protocol.SpecBlob(ids[5]), []byte("{"), store.Cond{}); err != nil {
		t.Fatal(err)
	}
	got := func(f client.Filter) ([]string, string) {
		t.Helper()
		p, err := e.cl.Query(ctx, f)
		if err != nil {
			t.Fatalf("Query(%+v): %v", f, err)
		}
		var out []string
		for _, s := range p.Jobs {
			out = append(out, s.ID)
		}
		return out, p.Next
	}
	eq := func(a []string, b ...string) bool { return strings.Join(a, ",") == strings.Join(b, ",") }
	if l, next := got(client.Filter{Limit: 4}); !eq(l, ids[5], ids[4], ids[3], ids[2]) || next != ids[2] {
		t.Fatalf("first page %v next %q", l, next)
	}
	if l, next := got(client.Filter{Limit: 4, Before: ids[2]}); !eq(l, ids[1], ids[0]) || next != "" {
		t.Fatalf("second page %v next %q", l, next)
	}
	// ids[4]'s status record comes from putCheckpoint, whose fixture is a primes job.
	if l, _ := got(client.Filter{Type: "primes"}); !eq(l, ids[4], ids[3], ids[0]) {
		t.Fatalf("type primes: %v", l)
	}
	if l, _ := got(client.Filter{State: jobs.StateFailed}); !eq(l, ids[4]) {
		t.Fatalf("failed: %v", l)
	}
	if l, _ := got(client.Filter{State: client.StateUnreadable}); !eq(l, ids[5]) {
		t.Fatalf("unreadable: %v", l)
	}
	// Since the submission of ids[3] (a minute after ids[2]'s on this clock).
	st3, err := e.cl.Status(ctx, ids[3])
	if err != nil {
		t.Fatal(err)
	}
	if l, _ := got(client.Filter{Since: st3.SubmittedAt}); !eq(l, ids[5], ids[4], ids[3]) {
		t.Fatalf("since %v: %v", st3.SubmittedAt, l)
	}
	for _, f := range []client.Filter{{Limit: -1}, {Limit: client.MaxQueryLimit + 1}, {State: "done"}, {Before: "../x"}} {
		if _, err := e.cl.Query(ctx, f); err == nil {
			t.Errorf("Query(%+v) accepted", f)
		}
	}
}

// hangingStore hangs every read of one job until its context ends (a hung storage call, which
// Azurite does not produce on demand).
type hangingStore struct {
	client.Store
	job string
}

func (h hangingStore) Get(ctx context.Context, name string) ([]byte, store.ETag, error) {
	if strings.HasPrefix(name, h.job+"/") {
		<-ctx.Done()
		return nil, "", ctx.Err()
	}
	return h.Store.Get(ctx, name)
}

// One job whose reads hang is listed as unreadable; it does not fail or stall the page.
func TestClient_Query_HungJobListedUnreadable(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	var ids []string
	for range 3 {
		id, err := e.cl.Submit(ctx, "pi", json.RawMessage(`{"samples":1000,"shards":2}`))
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	cl := *e.cl
	cl.Store = hangingStore{Store: e.jobs, job: ids[1]}
	qctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	page, err := cl.Query(qctx, client.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	if len(page.Jobs) != 3 {
		t.Fatalf("page has %d jobs, want 3: %+v", len(page.Jobs), page.Jobs)
	}
	for _, st := range page.Jobs {
		hung := st.ID == ids[1]
		if hung != (st.State == client.StateUnreadable) || (hung && !strings.Contains(st.Unreadable, "deadline")) {
			t.Errorf("job %s: state %s %q (hung: %v)", st.ID, st.State, st.Unreadable, hung)
		}
	}
}
