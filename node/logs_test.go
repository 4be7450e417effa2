package node

import (
	"context"
	"log/slog"
	"strings"
	"testing"

	"github.com/mapagg/mapagg/builtin"
	"github.com/mapagg/mapagg/client"
	"github.com/mapagg/mapagg/internal/joblog"
	"github.com/mapagg/mapagg/internal/queue"
	"github.com/mapagg/mapagg/internal/telemetry"
	"github.com/mapagg/mapagg/internal/telemetry/telemetrytest"
	"github.com/mapagg/mapagg/jobs"
	"github.com/mapagg/mapagg/store"
)

// `worker logs JOB` prints what the job's code logged, with its worker and shard.
func TestLogs_Command(t *testing.T) {
	c := newCluster(t)
	cli := c.node(t, builtin.Registry())
	bc, err := store.NewClient(c.env["AZURE_STORAGE_CONNECTION_STRING"])
	if err != nil {
		t.Fatal(err)
	}
	jobs := store.New(bc, c.env["JOBS_CONTAINER"])
	if err := jobs.Ensure(context.Background()); err != nil {
		t.Fatal(err)
	}
	q, err := queue.New(c.env["AZURE_STORAGE_CONNECTION_STRING"], c.env["JOBS_QUEUE"])
	if err != nil {
		t.Fatal(err)
	}
	if err := q.Ensure(context.Background()); err != nil {
		t.Fatal(err)
	}
	cl := &client.Client{Store: jobs, Queue: q, Registry: builtin.Registry()}
	id, err := cl.Submit(context.Background(), "primes", []byte(`{"from":0,"to":100,"shards":2}`))
	if err != nil {
		t.Fatal(err)
	}
	h := joblog.NewHandler(joblog.New(bc, c.env["JOBS_CONTAINER"]), id, "w1", 1, 2, "", nil)
	slog.New(h).Info("shard parsed", "lines", 10)
	if err := h.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	code, out, errOut := run(t, cli, "logs", id)
	if code != 0 || !strings.Contains(out, "[w1 shard 1 attempt 2] shard parsed") || !strings.Contains(out, `lines="10"`) {
		t.Fatalf("logs: %d %q %q", code, out, errOut)
	}
	if code, out, _ := run(t, cli, "logs", id, "--json"); code != 0 || !strings.Contains(out, `"shard":1`) {
		t.Fatalf("logs --json: %d %s", code, out)
	}
	if code, _, errOut := run(t, cli, "logs", "20261128-000000-00000000"); code != 1 || !strings.Contains(errOut, "20261128-000000-00000000") {
		t.Fatalf("logs of a missing job: %d %s", code, errOut)
	}
}

// loggingJob logs from its Map through env.Logger(); shard 1 panics on its first attempt after
// logging, so its line must reach the log although the attempt failed.
type loggingJob struct{}

type loggingParams struct {
	Shards int `json:"shards" jobs:"required"`
}

func (loggingJob) Split(_ context.Context, _ jobs.Env, p loggingParams) ([]int, error) {
	s := make([]int, p.Shards)
	for i := range s {
		s[i] = i
	}
	return s, nil
}

func (loggingJob) Map(ctx context.Context, env jobs.Env, s int) (int64, error) {
	task, _ := jobs.TaskFrom(ctx)
	env.Logger().Info("mapped a shard", "value", s)
	if s == 1 && task.Attempt == 1 {
		env.Logger().Warn("about to panic")
		panic("shard 1 fails once")
	}
	return int64(s), nil
}

func (loggingJob) Merge(a, b int64) int64 { return a + b }

// A line a job's Map logged through env.Logger() on a real worker is printed by `worker logs
// JOB`, with its worker, shard and attempt; so is the line of an attempt that panicked.
func TestLogs_FromMap(t *testing.T) {
	c := newCluster(t)
	reg := builtin.Registry()
	if err := reg.Register(jobs.Typed("logging", loggingJob{})); err != nil {
		t.Fatal(err)
	}
	c.startWorker(t, reg, "wlog")
	cli := c.node(t, reg)
	code, id, errOut := run(t, cli, "submit", "--type", "logging", "--params", `{"shards":3}`, "--wait", "--quiet", "--poll", "50ms")
	if code != 0 {
		t.Fatalf("submit: %d %s %s", code, id, errOut)
	}
	id = strings.TrimSpace(strings.SplitN(id, "\n", 2)[0])
	code, out, errOut := run(t, cli, "logs", id)
	if code != 0 {
		t.Fatalf("logs: %d %q %q", code, out, errOut)
	}
	for _, want := range []string{
		"[wlog shard 0 attempt 1] mapped a shard",
		"[wlog shard 2 attempt 1] mapped a shard",
		"[wlog shard 1 attempt 1] about to panic",
		"[wlog shard 1 attempt 1] map step panicked",
		"[wlog shard 1 attempt 2] mapped a shard",
		`value="1"`,
	} {
		if !strings.Contains(out, want) {
			t.Errorf("worker logs %s lacks %q:\n%s", id, want, out)
		}
	}
	if strings.Contains(out, "trace_id") {
		t.Errorf("a trace id without tracing:\n%s", out)
	}
}

// With tracing on, every line of a job's log carries the job's trace id (as `worker logs` and
// its --json print it), so a line leads to the trace; without tracing no line has one.
func TestLogs_TraceIDWhenTracing(t *testing.T) {
	col, err := telemetrytest.Start()
	if err != nil {
		t.Fatal(err)
	}
	defer col.Close()
	c := newCluster(t)
	c.env[telemetry.EnvEndpoint] = col.URL
	reg := builtin.Registry()
	if err := reg.Register(jobs.Typed("logging", loggingJob{})); err != nil {
		t.Fatal(err)
	}
	c.startWorker(t, reg, "wtrace")
	cli := c.node(t, reg)
	code, id, errOut := run(t, cli, "submit", "--type", "logging", "--params", `{"shards":3}`, "--wait", "--quiet", "--poll", "50ms")
	if code != 0 {
		t.Fatalf("submit: %d %s %s", code, id, errOut)
	}
	id = strings.TrimSpace(strings.SplitN(id, "\n", 2)[0])
	trace := telemetry.TraceID(id)
	code, out, errOut := run(t, cli, "logs", id)
	if code != 0 || !strings.Contains(out, "[wtrace shard 0 attempt 1] mapped a shard") {
		t.Fatalf("logs: %d %q %q", code, out, errOut)
	}
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		if !strings.HasSuffix(line, " trace_id="+trace) {
			t.Errorf("line without the job's trace id %s: %q", trace, line)
		}
	}
	code, out, _ = run(t, cli, "logs", id, "--json")
	if code != 0 || strings.Count(out, `"trace_id":"`+trace+`"`) != strings.Count(out, "\n") {
		t.Errorf("logs --json: every line should have trace_id %s:\n%s", trace, out)
	}
}
