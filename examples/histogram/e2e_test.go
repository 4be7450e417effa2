package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/mapagg/mapagg/clustertest"
	"github.com/mapagg/mapagg/jobs"
)

// The example binary runs a three-worker cluster; the job is submitted by the stock CLI and by
// the Go client. It finishes with the histogram computed directly, also when the leader is
// killed with SIGKILL half-way. It uses only public packages: a job author can copy it.
func TestEndToEnd(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a cluster")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	reg := jobs.NewRegistry()
	if err := reg.Register(histogram); err != nil {
		t.Fatal(err)
	}
	// This package's main is the worker; Registry lets the Go client validate histogram jobs.
	c := clustertest.Start(t, clustertest.Options{Main: ".", Registry: reg, Concurrency: 1, MapDelay: 150 * time.Millisecond})
	// The stock binary lacks the histogram type: its submit validates it with the running workers.
	stock := clustertest.Build(t, "github.com/mapagg/mapagg/cmd/worker")
	cli := func(t *testing.T, args ...string) string {
		t.Helper()
		cmd := exec.Command(stock, args...)
		cmd.Env = c.Env()
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		if err := cmd.Run(); err != nil {
			t.Fatalf("worker %s: %v\n%s", strings.Join(args, " "), err, stderr.String())
		}
		return strings.TrimSpace(stdout.String())
	}

	const container = "data"
	if _, err := c.Blob().CreateContainer(ctx, container, nil); err != nil {
		t.Fatal(err)
	}
	var want Counts
	for i := range 4 {
		data, w := numbers(uint64(i), 2000)
		if _, err := c.Blob().UploadBuffer(ctx, container, fmt.Sprintf("latency/%d.txt", i), data, nil); err != nil {
			t.Fatal(err)
		}
		want = Histogram{}.Merge(want, w)
	}
	// About 13 KB a blob: 24 shards of 2 KiB.
	params := fmt.Sprintf(`{"container": %q, "prefix": "latency/", "shard_bytes": 2048}`, container)

	check := func(t *testing.T, id string) {
		t.Helper()
		st, err := c.Wait(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if st.State != jobs.StateSucceeded {
			t.Fatalf("job %s %s: %s", id, st.State, st.Error)
		}
		var got Counts
		if err := json.Unmarshal([]byte(cli(t, "result", id)), &got); err != nil {
			t.Fatal(err)
		}
		if got != want {
			t.Fatalf("histogram %v, want %v", got, want)
		}
		t.Logf("job %s: %d shards by epoch %d, %d duplicates dropped", id, st.ShardsTotal, st.Epoch, st.Duplicates)
	}

	t.Run("submit", func(t *testing.T) {
		check(t, cli(t, "submit", "--type", "histogram", "--params", params))
	})

	t.Run("leader SIGKILL", func(t *testing.T) {
		id, err := c.Client().Submit(ctx, "histogram", json.RawMessage(params))
		if err != nil {
			t.Fatal(err)
		}
		for {
			st, err := c.Client().Status(ctx, id)
			if err == nil && st.State.Terminal() {
				t.Fatalf("job already %s before the kill; the test would prove nothing", st.State)
			}
			if err == nil && st.ShardsDone >= 10 {
				break
			}
			if ctx.Err() != nil {
				t.Fatalf("job %s did not reach 10 merged shards: %v", id, ctx.Err())
			}
			time.Sleep(20 * time.Millisecond)
		}
		old, next, err := c.KillLeader(ctx)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("SIGKILL of leader %s (epoch %d); %s elected (epoch %d)", old.Worker, old.Epoch, next.Worker, next.Epoch)
		check(t, id)
	})
}
