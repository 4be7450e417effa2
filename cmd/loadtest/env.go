package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/storage/azqueue"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/mapagg/mapagg/internal/harness/cluster"
	"github.com/mapagg/mapagg/internal/harness/devserver"
	"github.com/mapagg/mapagg/store"
)

// env owns what a run starts: the servers (unless attached), the worker binary and every
// cluster. close stops all of it; it is safe to call more than once and from a deferred call
// after a failure or Ctrl-C.
type env struct {
	cfg     *Config
	dir     string
	bin     string
	connStr string
	natsURL string
	runID   string // prefixes every namespace, so runs against shared servers never collide
	log     *progress

	az *devserver.AzuriteServer
	ns *server.Server

	mu       sync.Mutex
	clusters []*cluster.Cluster
	spaces   []string // namespaces used, for clean-up on attached servers
	closed   bool
}

// newEnv builds the worker (unless given) and starts or attaches to the servers.
func newEnv(ctx context.Context, cfg *Config, log *progress) (_ *env, err error) {
	e := &env{cfg: cfg, dir: cfg.Dir, bin: cfg.WorkerBin, connStr: cfg.ConnStr, natsURL: cfg.NATSURL, log: log}
	var b [3]byte
	_, _ = rand.Read(b[:])
	e.runID = "lt" + hex.EncodeToString(b[:])
	defer func() {
		if err != nil {
			e.close()
		}
	}()
	if e.bin == "" {
		start := time.Now()
		if e.bin, err = cluster.Build(e.dir, false); err != nil {
			return nil, err
		}
		log.Logf("built the worker binary in %v", time.Since(start).Round(time.Millisecond))
	} else if _, err := os.Stat(e.bin); err != nil {
		return nil, fmt.Errorf("worker binary: %w", err)
	}
	if e.connStr == "" {
		start := time.Now()
		dir := filepath.Join(e.dir, "azurite")
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return nil, err
		}
		if e.az, err = devserver.StartAzurite(dir); err != nil {
			return nil, fmt.Errorf("start azurite: %w", err)
		}
		e.connStr = e.az.ConnectionString()
		log.Logf("azurite on 127.0.0.1:%d (blob), :%d (queue), up in %v", e.az.BlobPort, e.az.QueuePort, time.Since(start).Round(time.Millisecond))
	}
	if e.natsURL == "" {
		if e.ns, err = devserver.StartNATS(filepath.Join(e.dir, "nats")); err != nil {
			return nil, fmt.Errorf("start nats: %w", err)
		}
		e.natsURL = e.ns.ClientURL()
		log.Logf("nats (in-process, JetStream) on %s", e.natsURL)
	}
	return e, ctx.Err()
}

// clusterSpec is what a scenario asks of its cluster.
type clusterSpec struct {
	name          string // short, [a-z0-9]
	workers       int    // 0: Config.Workers
	concurrency   int    // 0: the worker's default
	mapDelay      time.Duration
	leaseDuration time.Duration
	shardTimeout  time.Duration       // 0: the worker's default
	env           []string            // extra environment of every worker
	workerEnv     map[string][]string // extra environment of one worker (by id)
	natsURL       string              // another NATS (a child process, a cluster) instead of the shared one
}

// startCluster starts Workers worker processes in a namespace of their own on the shared servers
// and waits for a leader.
func (e *env) startCluster(ctx context.Context, s clusterSpec) (*cluster.Cluster, error) {
	ns := e.runID + "-" + s.name
	dir := filepath.Join(e.dir, s.name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	e.mu.Lock()
	if e.closed {
		e.mu.Unlock()
		return nil, errors.New("shutting down")
	}
	e.spaces = append(e.spaces, ns)
	e.mu.Unlock()
	sctx, cancel := context.WithTimeout(ctx, 90*time.Second)
	defer cancel()
	natsURL := e.natsURL
	if s.natsURL != "" {
		natsURL = s.natsURL
	}
	// Zero in a spec is the worker's own default, which the harness spells as negative.
	conc, timeout := s.concurrency, s.shardTimeout
	if conc == 0 {
		conc = -1
	}
	if timeout == 0 {
		timeout = -1
	}
	workers := e.cfg.Workers
	if s.workers > 0 {
		workers = s.workers
	}
	c, err := cluster.Start(sctx, cluster.Options{
		Dir: dir, WorkerBin: e.bin, Workers: workers, Namespace: ns,
		LeaseDuration: s.leaseDuration, Concurrency: conc, ShardTimeout: timeout,
		MapDelay: s.mapDelay, ConnStr: e.connStr, NATSURL: natsURL, Env: s.env, WorkerEnv: s.workerEnv,
	})
	if err != nil {
		return nil, fmt.Errorf("start cluster %s: %w", s.name, err)
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed { // close ran while we were starting
		c.Stop()
		return nil, errors.New("shutting down")
	}
	e.clusters = append(e.clusters, c)
	return c, nil
}

// stopCluster stops one cluster now (its namespace is cleaned up by close).
func (e *env) stopCluster(c *cluster.Cluster) {
	e.mu.Lock()
	for i, x := range e.clusters {
		if x == c {
			e.clusters = append(e.clusters[:i], e.clusters[i+1:]...)
			break
		}
	}
	e.mu.Unlock()
	c.Stop()
}

// close stops every cluster and the servers it started. On attached servers it deletes what the
// run created (containers, queues' containers, streams) in its namespaces.
func (e *env) close() {
	e.mu.Lock()
	if e.closed {
		e.mu.Unlock()
		return
	}
	e.closed = true
	cs := e.clusters
	e.clusters = nil
	spaces := e.spaces
	e.mu.Unlock()

	var wg sync.WaitGroup
	for _, c := range cs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c.Stop()
		}()
	}
	wg.Wait()
	if (e.az == nil || e.ns == nil) && len(spaces) > 0 {
		e.cleanAttached(spaces)
	}
	if e.ns != nil {
		e.ns.Shutdown()
		e.ns.WaitForShutdown()
		e.ns = nil
	}
	if e.az != nil {
		e.az.Stop()
		e.az = nil
	}
}

// cleanAttached removes the run's namespaces from servers it did not start (best effort).
func (e *env) cleanAttached(spaces []string) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if e.az == nil {
		if bc, err := store.NewClient(e.connStr); err == nil {
			for _, ns := range spaces {
				for _, c := range []string{ns + "-jobs", ns + "-leader"} {
					_, _ = bc.DeleteContainer(ctx, c, nil)
				}
			}
		}
		for _, ns := range spaces {
			if qc, err := azqueue.NewQueueClientFromConnectionString(e.connStr, ns+"-jobs", nil); err == nil {
				_, _ = qc.Delete(ctx, nil)
			}
		}
	}
	if e.ns == nil {
		nc, err := nats.Connect(e.natsURL, nats.Name("loadtest-cleanup"))
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
