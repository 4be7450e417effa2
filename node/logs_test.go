package node

import (
	"context"
	"log/slog"
	"strings"
	"testing"

	"github.com/mapagg/mapagg/builtin"
	"github.com/mapagg/mapagg/client"
	"github.com/mapagg/mapagg/internal/queue"
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
	h := client.NewJobLogHandler(client.NewJobLog(bc, c.env["JOBS_CONTAINER"]), id, "w1", 1, 2, "", nil)
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
