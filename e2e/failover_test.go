// Package e2e runs the real binary: Azurite, a NATS server with JetStream and `worker run`
// processes (built with the race detector), killed with real signals. Every test asserts the
// exact final result, not just that a job finished.
package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/mapagg/mapagg/client"
	"github.com/mapagg/mapagg/election"
	"github.com/mapagg/mapagg/internal/harness/cluster"
	"github.com/mapagg/mapagg/internal/harness/testenv"
	"github.com/mapagg/mapagg/jobs"
)

var workerBin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "e2e-bin-")
	if err != nil {
		panic(err)
	}
	if workerBin, err = cluster.Build(dir, true); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	defer os.RemoveAll(dir)
	testenv.Main(m)
}

const (
	lease        = 15 * time.Second
	acquireEvery = time.Second
	// primes below 2·10^7, the job of the issue; the answer is a public fact.
	primesParams = `{"from":0,"to":20000000,"shards":200}`
	primesWant   = 1270607
)

func start(t *testing.T, opts cluster.Options) *cluster.Cluster {
	t.Helper()
	opts.Dir = t.TempDir()
	opts.WorkerBin = workerBin
	opts.ConnStr = testenv.Azurite(t)
	opts.Namespace = testenv.Name(t, "e2e")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, err := cluster.Start(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		c.Stop()
		if t.Failed() {
			for _, p := range []string{"w1", "w2", "w3"} {
				if pr := c.Proc(p); pr != nil {
					b, _ := os.ReadFile(pr.LogPath)
					t.Logf("--- %s (%s), last lines:\n%s", p, filepath.Base(pr.LogPath), tail(b, 3000))
				}
			}
		}
	})
	return c
}

func tail(b []byte, n int) []byte {
	if len(b) > n {
		return b[len(b)-n:]
	}
	return b
}

func leader(t *testing.T, c *cluster.Cluster) *election.LeaderInfo {
	t.Helper()
	// A lease just acquired reads as held with no leader until the winner stamps its epoch.
	var l *election.LeaderInfo
	var err error
	testenv.Eventually(t, 30*time.Second, 20*time.Millisecond, func() bool {
		l, err = c.Leader(context.Background())
		return err == nil && l != nil && l.Epoch > 0
	}, "no leader: %v", err)
	return l
}

// primesAt40Percent submits the primes job, waits until 80 of its 200 shards are merged
// and returns it with the leader of that moment.
func primesAt40Percent(t *testing.T, c *cluster.Cluster) (string, *election.LeaderInfo) {
	t.Helper()
	id, err := c.Client.Submit(context.Background(), "primes", json.RawMessage(primesParams))
	if err != nil {
		t.Fatal(err)
	}
	waitDone(t, c, id, 80)
	return id, leader(t, c)
}

// waitDone waits until the job has at least n shards merged.
func waitDone(t *testing.T, c *cluster.Cluster, id string, n int) {
	t.Helper()
	testenv.Eventually(t, 2*time.Minute, 20*time.Millisecond, func() bool {
		st, err := c.Client.Status(context.Background(), id)
		return err == nil && st.ShardsDone >= n
	}, "job %s did not reach %d merged shards", id, n)
}

func finish(t *testing.T, c *cluster.Cluster, id string) *client.Status {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	st, err := c.Client.Wait(ctx, id, 100*time.Millisecond, nil)
	if err != nil {
		t.Fatalf("job %s: %v", id, err)
	}
	if st.State != jobs.StateSucceeded {
		t.Fatalf("job %s %s: %s", id, st.State, st.Error)
	}
	return st
}

func primesCount(t *testing.T, st *client.Status) int {
	t.Helper()
	var r struct {
		Count int `json:"count"`
	}
	if err := json.Unmarshal(st.Result, &r); err != nil {
		t.Fatalf("result %s: %v", st.Result, err)
	}
	return r.Count
}

// newLeader waits for a leader other than old with a higher epoch and returns it with the time
// from `since` to its election (from its log).
func newLeader(t *testing.T, c *cluster.Cluster, old *election.LeaderInfo, since time.Time, within time.Duration) (*election.LeaderInfo, time.Duration) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), within+5*time.Second)
	defer cancel()
	ev, err := c.WaitEvent(ctx, func(e cluster.Event) bool { return e.Kind == cluster.Elected && e.Epoch > old.Epoch })
	if err != nil {
		t.Fatalf("no leader after epoch %d: %v", old.Epoch, err)
	}
	took := ev.Time.Sub(since)
	if ev.Worker == old.ID {
		t.Fatalf("the killed leader %s was elected again", old.ID)
	}
	if took > within {
		t.Fatalf("new leader %s (epoch %d) %v after the old one went; the bound is %v", ev.Worker, ev.Epoch, took, within)
	}
	l, err := c.WaitLeader(ctx, func(l *election.LeaderInfo) bool { return l.Epoch >= ev.Epoch })
	if err != nil {
		t.Fatal(err)
	}
	return l, took
}

// A leader killed with SIGKILL at about 40% of a job is replaced within the lease duration plus
// one acquire retry, and the job finishes with the exact answer.
func TestFailover_LeaderSIGKILLAt40Percent(t *testing.T) {
	c := start(t, cluster.Options{Workers: 3, Concurrency: 1, MapDelay: 100 * time.Millisecond, LeaseDuration: lease})
	id, old := primesAt40Percent(t, c)
	at, err := c.Signal(old.ID, syscall.SIGKILL)
	if err != nil {
		t.Fatal(err)
	}
	nu, took := newLeader(t, c, old, at, lease+acquireEvery+time.Second)
	t.Logf("SIGKILL of %s (epoch %d) → %s (epoch %d) elected after %v", old.ID, old.Epoch, nu.ID, nu.Epoch, took)
	if _, err := c.StartWorker(old.ID); err != nil { // the cluster keeps its size
		t.Fatal(err)
	}
	st := finish(t, c, id)
	if got := primesCount(t, st); got != primesWant {
		t.Fatalf("primes below 2·10^7 = %d, want %d", got, primesWant)
	}
	t.Logf("done by epoch %d; %d results dropped as duplicates", st.Epoch, st.Duplicates)
}

// The first leader is killed mid-job, and so is the second, just after it merged its first
// results; the third finishes the job with the exact answer.
func TestFailover_TwoLeadersSIGKILLed(t *testing.T) {
	c := start(t, cluster.Options{Workers: 3, Concurrency: 1, MapDelay: 300 * time.Millisecond, LeaseDuration: lease})
	id, first := primesAt40Percent(t, c)
	at, err := c.Signal(first.ID, syscall.SIGKILL)
	if err != nil {
		t.Fatal(err)
	}
	second, _ := newLeader(t, c, first, at, lease+acquireEvery+time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := c.WaitEvent(ctx, func(e cluster.Event) bool { return e.Kind == cluster.FirstMerge && e.Epoch == second.Epoch }); err != nil {
		t.Fatal(err)
	}
	if st, _ := c.Client.Status(ctx, id); st != nil && st.State.Terminal() {
		t.Fatalf("job already %s before the second kill; the test would prove nothing", st.State)
	}
	at2, err := c.Signal(second.ID, syscall.SIGKILL)
	if err != nil {
		t.Fatal(err)
	}
	third, took := newLeader(t, c, second, at2, lease+acquireEvery+time.Second)
	t.Logf("leaders: %s(%d) → %s(%d) → %s(%d), last takeover %v", first.ID, first.Epoch, second.ID, second.Epoch, third.ID, third.Epoch, took)
	for _, w := range []string{first.ID, second.ID} {
		if _, err := c.StartWorker(w); err != nil {
			t.Fatal(err)
		}
	}
	st := finish(t, c, id)
	if got := primesCount(t, st); got != primesWant {
		t.Fatalf("primes below 2·10^7 = %d, want %d", got, primesWant)
	}
}

// A leader stopped with SIGTERM hands over: a new leader within 1 s, and the exact answer.
func TestHandover_LeaderSIGTERM(t *testing.T) {
	c := start(t, cluster.Options{Workers: 3, Concurrency: 1, MapDelay: 100 * time.Millisecond, LeaseDuration: lease})
	id, old := primesAt40Percent(t, c)
	at := time.Now()
	if _, err := c.Signal(old.ID, syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := c.Proc(old.ID).Err(); err != nil {
		t.Fatalf("the stopped leader exited with %v, want status 0", err)
	}
	nu, took := newLeader(t, c, old, at, time.Second)
	t.Logf("SIGTERM of %s → %s (epoch %d) elected after %v", old.ID, nu.ID, nu.Epoch, took)
	st := finish(t, c, id)
	if got := primesCount(t, st); got != primesWant {
		t.Fatalf("primes below 2·10^7 = %d, want %d", got, primesWant)
	}
}

// A follower killed while it runs shards has them redelivered after the shard timeout; the
// result is exact.
func TestFailover_WorkerKilledMidShard(t *testing.T) {
	c := start(t, cluster.Options{Workers: 3, Concurrency: 2, ShardTimeout: 3 * time.Second, LeaseDuration: lease})
	id, err := c.Client.Submit(context.Background(), "sleep", json.RawMessage(`{"shards":60,"duration":"400ms"}`))
	if err != nil {
		t.Fatal(err)
	}
	waitDone(t, c, id, 6)
	l := leader(t, c)
	victim := "w1"
	if l.ID == victim {
		victim = "w2"
	}
	if _, err := c.Signal(victim, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	st := finish(t, c, id)
	var r struct {
		Shards   int `json:"shards"`
		IndexSum int `json:"index_sum"`
	}
	if err := json.Unmarshal(st.Result, &r); err != nil {
		t.Fatal(err)
	}
	if r.Shards != 60 || r.IndexSum != 60*59/2 {
		t.Fatalf("result %s, want 60 shards with index_sum %d", st.Result, 60*59/2)
	}
}
