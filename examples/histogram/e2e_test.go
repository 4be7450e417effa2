package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/mapagg/mapagg/election"
	"github.com/mapagg/mapagg/internal/harness/cluster"
	"github.com/mapagg/mapagg/internal/harness/devserver"
	"github.com/mapagg/mapagg/internal/harness/testenv"
	"github.com/mapagg/mapagg/jobs"
)

// bin is this example, built with the race detector: the worker of the test's cluster. stock is
// the stock worker binary (cmd/worker), which has only the built-in job types: it submits the
// histogram job, checked against the running cluster, as a user of the stock CLI would.
var bin, stock string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "histogram-bin-")
	if err != nil {
		panic(err)
	}
	root, err := devserver.RepoRoot()
	if err != nil {
		panic(err)
	}
	bin = filepath.Join(dir, "histogram")
	cmd := exec.Command("go", "build", "-race", "-o", bin, "./examples/histogram")
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "go build ./examples/histogram: %v\n%s", err, out)
		os.Exit(1)
	}
	if stock, err = cluster.Build(dir, false); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	defer os.RemoveAll(dir)
	testenv.Main(m)
}

// cli runs a command of the STOCK worker binary against cluster c and returns its standard output.
// The stock binary lacks the histogram type: submit validates it with the running workers.
func cli(t *testing.T, c *cluster.Cluster, args ...string) string {
	t.Helper()
	cmd := exec.Command(stock, args...)
	cmd.Env = c.WorkerEnv("cli")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("worker %s: %v\n%s", strings.Join(args, " "), err, stderr.String())
	}
	return strings.TrimSpace(stdout.String())
}

// The example binary runs a three-worker cluster on Azurite and NATS; the stock `worker submit` sends a
// histogram job over blobs, which finishes with the histogram computed directly, also when the
// leader is killed with SIGKILL half-way.
func TestEndToEnd(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a cluster")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	c, err := cluster.Start(ctx, cluster.Options{
		Dir: t.TempDir(), WorkerBin: bin, ConnStr: testenv.Azurite(t), Namespace: testenv.Name(t, "hist"),
		Workers: 3, Concurrency: 1, MapDelay: 150 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		c.Stop()
		if t.Failed() {
			for _, id := range []string{"w1", "w2", "w3"} {
				if p := c.Proc(id); p != nil {
					b, _ := os.ReadFile(p.LogPath)
					t.Logf("--- %s, last lines:\n%s", id, b[max(0, len(b)-3000):])
				}
			}
		}
	})

	container := testenv.Name(t, "data")
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
		st, err := c.Client.Wait(ctx, id, 100*time.Millisecond, nil)
		if err != nil {
			t.Fatal(err)
		}
		if st.State != jobs.StateSucceeded {
			t.Fatalf("job %s %s: %s", id, st.State, st.Error)
		}
		var got Counts
		if err := json.Unmarshal([]byte(cli(t, c, "result", id)), &got); err != nil {
			t.Fatal(err)
		}
		if got != want {
			t.Fatalf("histogram %v, want %v", got, want)
		}
		t.Logf("job %s: %d shards by epoch %d, %d duplicates dropped", id, st.ShardsTotal, st.Epoch, st.Duplicates)
	}

	t.Run("submit", func(t *testing.T) {
		check(t, cli(t, c, "submit", "--type", "histogram", "--params", params))
	})

	t.Run("leader SIGKILL", func(t *testing.T) {
		id := cli(t, c, "submit", "--type", "histogram", "--params", params)
		testenv.Eventually(t, time.Minute, 20*time.Millisecond, func() bool {
			st, err := c.Client.Status(ctx, id)
			return err == nil && st.ShardsDone >= 10
		}, "job %s did not reach 10 merged shards", id)
		old, err := c.Leader(ctx)
		if err != nil || old == nil {
			t.Fatalf("no leader: %v", err)
		}
		if st, _ := c.Client.Status(ctx, id); st != nil && st.State.Terminal() {
			t.Fatalf("job already %s before the kill; the test would prove nothing", st.State)
		}
		if _, err := c.Signal(old.ID, syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		nu, err := c.WaitLeader(ctx, func(l *election.LeaderInfo) bool { return l.Epoch > old.Epoch })
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("SIGKILL of leader %s (epoch %d); %s elected (epoch %d)", old.ID, old.Epoch, nu.ID, nu.Epoch)
		check(t, id)
	})
}
