package rig

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/storage/azqueue"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/mapagg/mapagg/internal/clusterask"
	"github.com/mapagg/mapagg/internal/harness/cluster"
	"github.com/mapagg/mapagg/internal/harness/devserver"
	"github.com/mapagg/mapagg/internal/harness/testworker/badjobs"
	"github.com/mapagg/mapagg/internal/harness/testworker/userjobs"
	"github.com/mapagg/mapagg/jobs"
	"github.com/mapagg/mapagg/store"
)

// Options configure a Rig.
type Options struct {
	// Dir holds the worker binary, server data and logs. Required.
	Dir string
	// WorkerBin is a prebuilt worker binary; "" builds ./cmd/worker into Dir.
	WorkerBin string
	// Shared starts one Azurite and one in-process NATS server for every cluster, each cluster
	// in a namespace of its own. Otherwise every cluster starts its own servers.
	Shared bool
	// ConnStr and NATSURL attach the shared servers to running ones (Shared only).
	ConnStr, NATSURL string
	// NATSBin is the nats-server binary for clusters that run NATS as a process; "" uses
	// devserver.NATSBin.
	NATSBin string
	// Logf prints a progress line.
	Logf func(format string, args ...any)
}

// Rig owns what a run starts: the servers, every cluster and the pids of every process.
// Close stops all of it; it is safe to call more than once.
type Rig struct {
	opts    Options
	bin     string
	connStr string
	natsURL string
	runID   string // prefixes every namespace, so runs against shared servers never collide

	az *devserver.AzuriteServer
	ns *server.Server

	mu       sync.Mutex
	natsBin  string
	testBin  string
	clusters []*cluster.Cluster
	spaces   []string       // namespaces used, for clean-up on attached servers
	pids     map[int]string // every process ever started, by pid → what it was
	closed   bool
}

// New builds the worker (unless given) and starts or attaches to the shared servers.
func New(ctx context.Context, opts Options) (_ *Rig, err error) {
	if opts.Logf == nil {
		opts.Logf = func(string, ...any) {}
	}
	r := &Rig{opts: opts, bin: opts.WorkerBin, connStr: opts.ConnStr, natsURL: opts.NATSURL, natsBin: opts.NATSBin, pids: map[int]string{}}
	var b [3]byte
	_, _ = rand.Read(b[:])
	r.runID = "lt" + hex.EncodeToString(b[:])
	defer func() {
		if err != nil {
			r.Close()
		}
	}()
	if r.bin == "" {
		start := time.Now()
		if r.bin, err = cluster.Build(opts.Dir, false); err != nil {
			return nil, err
		}
		opts.Logf("built the worker binary in %v", time.Since(start).Round(time.Millisecond))
	} else if _, err := os.Stat(r.bin); err != nil {
		return nil, fmt.Errorf("worker binary: %w", err)
	}
	if !opts.Shared {
		return r, ctx.Err()
	}
	if r.connStr == "" {
		start := time.Now()
		if r.az, err = devserver.StartAzurite(filepath.Join(opts.Dir, "azurite")); err != nil {
			return nil, fmt.Errorf("start azurite: %w", err)
		}
		r.connStr = r.az.ConnectionString()
		r.trackAzurite(r.az)
		opts.Logf("azurite on 127.0.0.1:%d (blob), :%d (queue), up in %v", r.az.BlobPort, r.az.QueuePort, time.Since(start).Round(time.Millisecond))
	}
	if r.natsURL == "" {
		if r.ns, err = devserver.StartNATS(filepath.Join(opts.Dir, "nats")); err != nil {
			return nil, fmt.Errorf("start nats: %w", err)
		}
		r.natsURL = r.ns.ClientURL()
		opts.Logf("nats (in-process, JetStream) on %s", r.natsURL)
	}
	return r, ctx.Err()
}

// NATSURL is the shared NATS server's URL ("" unless Shared).
func (r *Rig) NATSURL() string { return r.natsURL }

// RunID prefixes every namespace of this run.
func (r *Rig) RunID() string { return r.runID }

// Spec is what a scenario or a fault asks of its cluster.
type Spec struct {
	Name      string // short, [a-z0-9-]
	WorkerBin string // another worker binary; "" for the rig's
	// TestWorker runs the test worker (internal/harness/testworker: the stock worker plus the bad
	// job types), built on first use.
	TestWorker    bool
	Workers       int // default 3
	Concurrency   int // 0: the worker's default
	ShardTimeout  time.Duration
	MapDelay      time.Duration
	LeaseDuration time.Duration
	Env           []string            // extra environment of every worker
	WorkerEnv     map[string][]string // extra environment of one worker (by id)
	NATSURL       string              // another NATS (a cluster of nodes) instead of the shared one
	// NATSProcess runs the cluster's NATS as a nats-server process of its own, to kill it.
	NATSProcess bool
	// Programs are registered on every worker (NAME=COMMAND, as WORKER_PROGRAMS). The client
	// then asks the cluster to validate their jobs, and Start waits until every worker has them.
	Programs []string
}

// Start starts a cluster for s in a folder of its own under Dir and waits for a leader.
func (r *Rig) Start(ctx context.Context, s Spec) (*cluster.Cluster, error) {
	dir := filepath.Join(r.opts.Dir, s.Name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	if s.TestWorker {
		bin, err := r.testWorker()
		if err != nil {
			return nil, err
		}
		s.WorkerBin = bin
	}
	o := cluster.Options{Dir: dir, WorkerBin: cmp.Or(s.WorkerBin, r.bin), Workers: s.Workers, LeaseDuration: s.LeaseDuration,
		Concurrency: s.Concurrency, ShardTimeout: s.ShardTimeout, MapDelay: s.MapDelay, Env: s.Env, WorkerEnv: s.WorkerEnv}
	if len(s.Programs) > 0 {
		o.Env = append(slices.Clone(s.Env), "WORKER_PROGRAMS="+strings.Join(s.Programs, "\n"))
	}
	if s.TestWorker {
		o.Registry = TestWorkerRegistry()
	}
	// Zero in a spec is the worker's own default, which the cluster spells as negative.
	if o.Concurrency == 0 {
		o.Concurrency = -1
	}
	if o.ShardTimeout == 0 {
		o.ShardTimeout = -1
	}
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return nil, errors.New("shutting down")
	}
	if r.opts.Shared {
		o.Namespace, o.ConnStr, o.NATSURL = r.runID+"-"+s.Name, r.connStr, r.natsURL
		r.spaces = append(r.spaces, o.Namespace)
	}
	r.mu.Unlock()
	if s.NATSURL != "" {
		o.NATSURL = s.NATSURL
	}
	if s.NATSProcess || !r.opts.Shared && s.NATSURL == "" { // a Spec's own NATS wins
		bin, err := r.natsServer()
		if err != nil {
			return nil, err
		}
		o.NATSURL, o.NATSBin = "", bin
	}
	sctx, cancel := context.WithTimeout(ctx, 90*time.Second)
	defer cancel()
	c, err := cluster.Start(sctx, o)
	if err == nil && len(s.Programs) > 0 {
		if err = awaitPrograms(sctx, c, len(s.Programs)); err != nil {
			c.Stop()
		}
	}
	if err != nil {
		return nil, fmt.Errorf("start cluster %s: %w", s.Name, err)
	}
	r.Track(c)
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed { // Close ran while the cluster was starting
		c.Stop()
		return nil, errors.New("shutting down")
	}
	r.clusters = append(r.clusters, c)
	return c, nil
}

// awaitPrograms lets c's client validate the jobs of programs (types it lacks) by asking the
// cluster, and waits until every worker announces its n programs.
func awaitPrograms(ctx context.Context, c *cluster.Cluster, n int) error {
	c.Client.Validator = &clusterask.Validator{Conn: c.Bus.Conn(), Prefix: c.Names().Prefix, Local: c.Client.Registry.Types()}
	for {
		ready := 0
		for _, m := range c.Members() {
			if len(m.Programs) >= n {
				ready++
			}
		}
		if ready >= c.Options().Workers {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%d of %d workers announced their %d programs: %w", ready, c.Options().Workers, n, ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// natsServer returns the nats-server binary, building it on first use when none is given.
func (r *Rig) natsServer() (string, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.natsBin == "" {
		bin, err := devserver.NATSBin(r.opts.Dir)
		if err != nil {
			return "", err
		}
		r.natsBin = bin
	}
	return r.natsBin, nil
}

// testWorker returns the test worker, building it on first use.
func (r *Rig) testWorker() (string, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.testBin == "" {
		root, err := devserver.RepoRoot()
		if err != nil {
			return "", err
		}
		start := time.Now()
		if r.testBin, err = cluster.BuildPackage(r.opts.Dir, root, "./internal/harness/testworker", false); err != nil {
			return "", err
		}
		r.opts.Logf("built the test worker in %v", time.Since(start).Round(time.Millisecond))
	}
	return r.testBin, nil
}

// TestWorkerRegistry holds the test worker's job types: the built-ins, the bad ones and the
// user jobs (internal/harness/testworker).
func TestWorkerRegistry() *jobs.Registry {
	reg := badjobs.Registry()
	if err := userjobs.Register(reg); err != nil {
		panic(err) // distinct, valid names
	}
	return reg
}

// Stop stops one cluster now (its namespace is cleaned up by Close).
func (r *Rig) Stop(c *cluster.Cluster) {
	r.Track(c)
	r.mu.Lock()
	for i, x := range r.clusters {
		if x == c {
			r.clusters = append(r.clusters[:i], r.clusters[i+1:]...)
			break
		}
	}
	r.mu.Unlock()
	c.Stop()
}

// Close stops every cluster and the servers the rig started. On attached servers it deletes
// what the run created (containers, queues, streams) in its namespaces.
func (r *Rig) Close() {
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return
	}
	r.closed = true
	cs, spaces := r.clusters, r.spaces
	r.clusters = nil
	r.mu.Unlock()

	var wg sync.WaitGroup
	for _, c := range cs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r.Track(c)
			c.Stop()
		}()
	}
	wg.Wait()
	if r.opts.Shared && (r.az == nil || r.ns == nil) && len(spaces) > 0 {
		r.cleanAttached(spaces)
	}
	if r.ns != nil {
		r.ns.Shutdown()
		r.ns.WaitForShutdown()
		r.ns = nil
	}
	if r.az != nil {
		r.az.Stop()
		r.az = nil
	}
}

// cleanAttached removes the run's namespaces from servers it did not start (best effort).
func (r *Rig) cleanAttached(spaces []string) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if r.az == nil {
		if bc, err := store.NewClient(r.connStr); err == nil {
			for _, ns := range spaces {
				for _, c := range []string{ns + "-jobs", ns + "-leader"} {
					_, _ = bc.DeleteContainer(ctx, c, nil)
				}
			}
		}
		for _, ns := range spaces {
			if qc, err := azqueue.NewQueueClientFromConnectionString(r.connStr, ns+"-jobs", nil); err == nil {
				_, _ = qc.Delete(ctx, nil)
			}
		}
	}
	if r.ns == nil {
		nc, err := nats.Connect(r.natsURL, nats.Name("rig-cleanup"))
		if err != nil {
			return
		}
		defer nc.Close()
		js, err := jetstream.New(nc)
		if err != nil {
			return
		}
		for _, ns := range spaces {
			up := strings.ToUpper(strings.ReplaceAll(ns, "-", ""))
			for _, s := range []string{"_SHARDS", "_RESULTS", "_DEAD"} {
				_ = js.DeleteStream(ctx, up+s)
			}
		}
	}
}

// Track remembers the pids of every process c runs now (call it after a fault restarts one).
func (r *Rig) Track(c *cluster.Cluster) {
	if az := c.Azurite(); az != nil {
		r.trackAzurite(az)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if np := c.NATSProcess(); np != nil && np.PID() != 0 {
		r.pids[np.PID()] = "nats-server"
	}
	for _, id := range c.Running() {
		if p := c.Proc(id); p != nil {
			r.pids[p.PID] = "worker " + id
		}
	}
}

// TrackPID remembers a process a scenario started itself (what names it in LeftRunning).
func (r *Rig) TrackPID(pid int, what string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.pids[pid] = what
}

func (r *Rig) trackAzurite(az *devserver.AzuriteServer) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, s := range []devserver.Service{devserver.Blob, devserver.Queue} {
		if pid := az.PID(s); pid != 0 {
			r.pids[pid] = s.String()
		}
	}
}

// LeftRunning lists the processes the rig ever started that still exist.
func (r *Rig) LeftRunning() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for pid, what := range r.pids {
		if syscall.Kill(pid, 0) == nil {
			out = append(out, fmt.Sprintf("%s (pid %d) still running", what, pid))
		}
	}
	sort.Strings(out)
	return out
}
