// Package clustertest runs a real cluster of your own worker binary in a test.
//
// Start builds the worker from its main package, starts Azurite, a NATS server with JetStream
// and N worker processes on 127.0.0.1, and waits for a leader. The test then submits jobs,
// waits for them and kills the leader with SIGKILL, as a failure would. When the test ends
// every process is stopped by its pid. It is to a mapagg job what net/http/httptest is to a
// handler:
//
//	func TestHistogram(t *testing.T) {
//		c := clustertest.Start(t, clustertest.Options{Main: ".", Registry: registry})
//		id, err := c.Client().Submit(ctx, "histogram", params)
//		...
//		old, nu, err := c.KillLeader(ctx) // mid-job: the result must not change
//		st, err := c.Wait(ctx, id)
//	}
//
// Azurite comes from this module's Azurite/node_modules (make azurite) or from PATH
// (npm install -g azurite). Worker processes get a parent-death signal, so they stop with the
// test binary even if it is killed.
package clustertest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob"

	"github.com/mapagg/mapagg/client"
	"github.com/mapagg/mapagg/election"
	"github.com/mapagg/mapagg/internal/harness/cluster"
	"github.com/mapagg/mapagg/jobs"
)

// Options configure a test cluster. Zero fields take their defaults.
type Options struct {
	// Main is the worker's main package, as `go build` takes it from the test's folder: "."
	// for the package under test, or an import path. Required unless Bin is set.
	Main string
	// Bin is a worker binary built already (see Build); it wins over Main.
	Bin string
	// Registry holds the job types the cluster's client validates before a submit: those of
	// the worker binary. Default: the built-in types.
	Registry *jobs.Registry
	// Workers is the number of worker processes. Default 3.
	Workers int
	// Concurrency is the shards a worker runs at once. Default 2.
	Concurrency int
	// MapDelay slows every map step, so a job lasts long enough to kill its leader. Default 0.
	MapDelay time.Duration
	// LeaseDuration is the leader's lease, 15s to 60s. Default 15s.
	LeaseDuration time.Duration
	// Env adds environment variables (KEY=VALUE) to every worker.
	Env []string
	// Timeout bounds the start: build, servers and the first election. Default 3 minutes.
	Timeout time.Duration
}

// Cluster is a running test cluster.
type Cluster struct {
	c *cluster.Cluster
}

// Leader is a term of the cluster's leadership: the worker and its epoch.
type Leader struct {
	Worker string
	Epoch  uint64
}

// Start starts a cluster for t and stops it when t ends. It fails t when the cluster does not
// come up, saying why.
func Start(t testing.TB, opts Options) *Cluster {
	t.Helper()
	c, err := start(t.TempDir(), opts)
	if err != nil {
		t.Fatalf("clustertest: %v", err)
	}
	t.Cleanup(func() {
		c.Stop()
		if t.Failed() {
			c.dumpLogs(t)
		}
	})
	return c
}

func start(dir string, opts Options) (*Cluster, error) {
	if opts.Timeout == 0 {
		opts.Timeout = 3 * time.Minute
	}
	ctx, cancel := context.WithTimeout(context.Background(), opts.Timeout)
	defer cancel()
	bin := opts.Bin
	if bin == "" {
		if opts.Main == "" {
			return nil, errors.New("Options.Main (the worker's main package) or Options.Bin is required")
		}
		var err error
		if bin, err = build(dir, opts.Main); err != nil {
			return nil, err
		}
	}
	c, err := cluster.Start(ctx, cluster.Options{Dir: dir, WorkerBin: bin, Workers: opts.Workers, Concurrency: opts.Concurrency,
		MapDelay: opts.MapDelay, LeaseDuration: opts.LeaseDuration, Env: opts.Env, Registry: opts.Registry})
	if err != nil {
		return nil, fmt.Errorf("start the cluster (logs in %s): %w", dir, err)
	}
	return &Cluster{c: c}, nil
}

// Build compiles the main package pkg (as `go build` takes it from the test's folder) for t,
// with the race detector when the test runs with it, and returns the binary's path. Use it for
// a second binary, such as the stock CLI (github.com/mapagg/mapagg/cmd/worker).
func Build(t testing.TB, pkg string) string {
	t.Helper()
	bin, err := build(t.TempDir(), pkg)
	if err != nil {
		t.Fatalf("clustertest: %v", err)
	}
	return bin
}

func build(dir, pkg string) (string, error) {
	wd, err := os.Getwd()
	if err != nil {
		return "", err
	}
	return cluster.BuildPackage(dir, wd, pkg, raceEnabled)
}

// Client submits and inspects jobs on the cluster.
func (c *Cluster) Client() *client.Client { return c.c.Client }

// Blob is the cluster's blob storage, for a job's input data.
func (c *Cluster) Blob() *azblob.Client { return c.c.Blob() }

// Env is the environment of a worker of this cluster: run the worker binary's other commands
// (submit, status, result) with it to reach the cluster.
func (c *Cluster) Env() []string { return c.c.WorkerEnv("cli") }

// Wait polls job id until it ends (succeeded, failed or cancelled) or ctx ends.
func (c *Cluster) Wait(ctx context.Context, id string) (*client.Status, error) {
	return c.c.Client.Wait(ctx, id, 100*time.Millisecond, nil)
}

// Leader reads who leads now.
func (c *Cluster) Leader(ctx context.Context) (Leader, error) {
	l, err := c.c.Leader(ctx)
	if err != nil {
		return Leader{}, err
	}
	if l == nil {
		return Leader{}, errors.New("nobody holds the lease")
	}
	return Leader{Worker: l.ID, Epoch: l.Epoch}, nil
}

// KillLeader kills the leader with SIGKILL, as a crash would, and starts it again as a new
// process. It waits for the next leader, and returns the old one and the new one.
func (c *Cluster) KillLeader(ctx context.Context) (old, next Leader, err error) {
	if old, err = c.Leader(ctx); err != nil {
		return old, next, err
	}
	if _, err := c.c.Signal(old.Worker, syscall.SIGKILL); err != nil {
		return old, next, err
	}
	if _, err := c.c.StartWorker(old.Worker); err != nil {
		return old, next, err
	}
	l, err := c.c.WaitLeader(ctx, func(l *election.LeaderInfo) bool { return l.Epoch > old.Epoch })
	if err != nil {
		return old, next, err
	}
	return old, Leader{Worker: l.ID, Epoch: l.Epoch}, nil
}

// PIDs lists the process ids of the running workers, by worker id.
func (c *Cluster) PIDs() map[string]int {
	out := map[string]int{}
	for _, id := range c.c.Running() {
		if p := c.c.Proc(id); p != nil {
			out[id] = p.PID
		}
	}
	return out
}

// Stop stops every worker (SIGTERM, then SIGKILL) and the servers, by pid. It is safe to call
// more than once; Start's cleanup calls it.
func (c *Cluster) Stop() { c.c.Stop() }

// dumpLogs shows the end of every worker's log in t's output.
func (c *Cluster) dumpLogs(t testing.TB) {
	for i := 1; i <= c.c.Options().Workers; i++ {
		id := fmt.Sprintf("w%d", i)
		if p := c.c.Proc(id); p != nil {
			b, _ := os.ReadFile(p.LogPath)
			t.Logf("--- %s, last lines of %s:\n%s", id, p.LogPath, b[max(0, len(b)-3000):])
		}
	}
}
