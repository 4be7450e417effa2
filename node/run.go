package node

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"runtime"
	"sync"
	"time"

	"github.com/mapagg/mapagg/bus"
	"github.com/mapagg/mapagg/coordinator"
	"github.com/mapagg/mapagg/election"
	"github.com/mapagg/mapagg/queue"
	"github.com/mapagg/mapagg/store"
	"github.com/mapagg/mapagg/worker"
)

type runFlags struct {
	common
	id                 string
	leaseDuration      time.Duration
	concurrency        int
	maxAttempts        int
	shardTimeout       time.Duration
	checkpointInterval time.Duration
	retryInterval      time.Duration
	startupTimeout     time.Duration
	mapDelay           time.Duration
	fs                 *flag.FlagSet
}

func newRunFlags() *runFlags {
	f := &runFlags{fs: flag.NewFlagSet("run", flag.ContinueOnError)}
	fs := f.fs
	f.common.register(fs)
	fs.StringVar(&f.id, "id", election.DefaultIdentity(), "this worker's id (default hostname-pid)")
	bindEnv(fs, "id", "WORKER_ID")
	fs.DurationVar(&f.leaseDuration, "lease-duration", 15*time.Second, "leader lease duration, 15s to 60s")
	bindEnv(fs, "lease-duration", "LEASE_DURATION")
	fs.DurationVar(&f.retryInterval, "acquire-interval", time.Second, "how often a follower tries to take the lease")
	bindEnv(fs, "acquire-interval", "ACQUIRE_INTERVAL")
	fs.IntVar(&f.concurrency, "concurrency", runtime.NumCPU(), "shards processed at once")
	bindEnv(fs, "concurrency", "WORKER_CONCURRENCY")
	fs.IntVar(&f.maxAttempts, "max-attempts", 3, "attempts per shard before its job fails")
	bindEnv(fs, "max-attempts", "MAX_ATTEMPTS")
	fs.DurationVar(&f.shardTimeout, "shard-timeout", bus.DefaultConfig().ShardTimeout, "a shard not finished or marked in progress within this is redelivered")
	bindEnv(fs, "shard-timeout", "SHARD_TIMEOUT")
	fs.DurationVar(&f.checkpointInterval, "checkpoint-interval", 200*time.Millisecond, "how often the leader checkpoints running jobs")
	bindEnv(fs, "checkpoint-interval", "CHECKPOINT_INTERVAL")
	fs.DurationVar(&f.startupTimeout, "startup-timeout", 60*time.Second, "how long to wait for storage and NATS at start")
	bindEnv(fs, "startup-timeout", "STARTUP_TIMEOUT")
	fs.DurationVar(&f.mapDelay, "map-delay", 0, "extra time added to every map step, to slow jobs down for failover demos and tests")
	bindEnv(fs, "map-delay", "MAP_DELAY")
	return f
}

func runCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	f := newRunFlags()
	f.fs.SetOutput(stderr)
	if err := parse(f.fs, args); err != nil {
		return usageErr("%v", err)
	}
	if f.fs.NArg() > 0 {
		return usageErr("unexpected arguments %v", f.fs.Args())
	}
	if err := f.check(); err != nil {
		return usageErr("%v", err)
	}
	log, err := f.logger(stderr)
	if err != nil {
		return usageErr("%v", err)
	}
	log = log.With("worker", f.id)

	ecfg := election.DefaultConfig()
	ecfg.Identity, ecfg.Container, ecfg.LeaseDuration, ecfg.RetryInterval = f.id, f.leaseContainer, f.leaseDuration, f.retryInterval
	ecfg.RenewInterval = f.leaseDuration / 3
	ecfg.Logger = log
	if err := ecfg.Validate(); err != nil {
		return usageErr("%v", err)
	}
	ccfg := coordinator.DefaultConfig()
	ccfg.CheckpointInterval, ccfg.Logger = f.checkpointInterval, log
	if err := ccfg.Validate(); err != nil {
		return usageErr("%v", err)
	}
	wcfg := worker.DefaultConfig()
	wcfg.ID, wcfg.Concurrency, wcfg.MaxAttempts, wcfg.MapDelay, wcfg.Logger = f.id, f.concurrency, f.maxAttempts, f.mapDelay, log
	if err := wcfg.Validate(); err != nil {
		return usageErr("%v", err)
	}
	bcfg := bus.Config{Prefix: f.streamPrefix, ShardTimeout: f.shardTimeout}
	if err := bcfg.Validate(); err != nil {
		return usageErr("%v", err)
	}

	blobClient, err := f.blob()
	if err != nil {
		return err
	}
	jobsC := store.New(blobClient, f.jobsContainer)
	q, err := queue.New(f.connStr, f.queueName)
	if err != nil {
		return err
	}
	b, err := connectCluster(ctx, log, f.startupTimeout, f.natsURL, f.id, bcfg, func(ctx context.Context) error {
		if err := jobsC.Ensure(ctx); err != nil {
			return err
		}
		return q.Ensure(ctx)
	})
	if err != nil {
		return err
	}
	defer b.Close()

	env := store.NewEnv(blobClient)
	coord, err := coordinator.New(ccfg, jobsC, q, b, env)
	if err != nil {
		return err
	}
	w, err := worker.New(wcfg, b, jobsC, env)
	if err != nil {
		return err
	}
	ecfg.Healthy = coord.Healthy
	ecfg.OnRelease = func(t election.Term) {
		if err := b.Announce(bus.CtlReleased, []byte(fmt.Sprint(t.Epoch))); err != nil {
			log.Warn("announce release", "err", err)
		}
	}
	el, err := election.NewAzure(blobClient, ecfg)
	if err != nil {
		return err
	}
	stopSub, err := b.Subscribe(bus.CtlReleased, func([]byte) { el.Poke() })
	if err != nil {
		return err
	}
	defer stopSub()

	log.Info("worker started", "nats", f.natsURL, "jobs_container", f.jobsContainer, "queue", f.queueName,
		"lease_duration", f.leaseDuration, "concurrency", f.concurrency)
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		if err := w.Run(ctx); err != nil {
			log.Error("worker stopped", "err", err)
		}
	}()
	go func() {
		defer wg.Done()
		_ = el.Run(ctx, func(lctx context.Context) error {
			term, _ := election.TermFromContext(lctx)
			return coord.Lead(lctx, term.Epoch)
		})
	}()
	wg.Wait()
	st := w.Stats()
	log.Info("worker stopped", "executed", st.Executed, "succeeded", st.Succeeded, "failed", st.Failed, "redelivered", st.Redelivered)
	return nil
}

// connectCluster connects to NATS and prepares streams and storage, retrying while the servers
// come up (a compose cluster starts them side by side).
func connectCluster(ctx context.Context, log *slog.Logger, within time.Duration, url, name string, cfg bus.Config, prepare func(context.Context) error) (*bus.Bus, error) {
	deadline := time.Now().Add(within)
	var last error
	for attempt := 0; ; attempt++ {
		b, err := bus.Connect(url, name, cfg)
		if err == nil {
			octx, cancel := context.WithTimeout(ctx, 15*time.Second)
			err = b.Ensure(octx)
			if err == nil {
				err = prepare(octx)
			}
			cancel()
			if err == nil {
				return b, nil
			}
			b.Close()
		}
		last = err
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("cluster not reachable within %v: %w", within, last)
		}
		if attempt == 0 || attempt%10 == 0 {
			log.Warn("waiting for storage and NATS", "err", err)
		}
		select {
		case <-ctx.Done():
			return nil, errors.Join(ctx.Err(), last)
		case <-time.After(500 * time.Millisecond):
		}
	}
}
