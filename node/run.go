package node

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/nats-io/nats.go"

	"github.com/mapagg/mapagg/client"
	"github.com/mapagg/mapagg/coordinator"
	"github.com/mapagg/mapagg/election"
	"github.com/mapagg/mapagg/internal/bus"
	"github.com/mapagg/mapagg/internal/joblog"
	"github.com/mapagg/mapagg/internal/membership"
	"github.com/mapagg/mapagg/internal/queue"
	"github.com/mapagg/mapagg/internal/telemetry"
	"github.com/mapagg/mapagg/internal/why"
	"github.com/mapagg/mapagg/store"
	"github.com/mapagg/mapagg/worker"
)

// runFlags maps the flags (and environment) of `run` onto a Config.
type runFlags struct {
	common
	keys keyFlags
	cfg  Config
	fs   *flagSet
}

func (n *Node) newRunFlags() *runFlags {
	f := &runFlags{fs: n.newFlagSet("run")}
	fs, d := f.fs, DefaultConfig()
	f.common.register(fs)
	f.keys.register(fs)
	fs.StringVar(&f.cfg.ID, "id", d.ID, "this worker's id (default hostname-pid)")
	fs.DurationVar(&f.cfg.LeaseDuration, "lease-duration", d.LeaseDuration, "leader lease duration, 15s to 60s")
	fs.DurationVar(&f.cfg.AcquireInterval, "acquire-interval", d.AcquireInterval, "how often a follower tries to take the lease")
	fs.IntVar(&f.cfg.Concurrency, "concurrency", d.Concurrency, "shards processed at once")
	fs.IntVar(&f.cfg.MaxAttempts, "max-attempts", d.MaxAttempts, "attempts per shard before its job fails")
	fs.DurationVar(&f.cfg.ShardTimeout, "shard-timeout", d.ShardTimeout, "a shard not finished or marked in progress within this is redelivered")
	fs.DurationVar(&f.cfg.CheckpointInterval, "checkpoint-interval", d.CheckpointInterval, "how often the leader checkpoints running jobs")
	fs.DurationVar(&f.cfg.StartupTimeout, "startup-timeout", d.StartupTimeout, "how long to wait for storage and NATS at start")
	fs.DurationVar(&f.cfg.MapDelay, "map-delay", 0, "extra time added to every map step, to slow jobs down for failover demos and tests")
	registerHTTPFlags(fs, &f.cfg)
	registerKeyedFlags(fs, &f.cfg)   // keyed.go
	registerProgramFlags(fs, &f.cfg) // programs.go
	fs.DurationVar(&f.cfg.HeartbeatInterval, "heartbeat-interval", d.HeartbeatInterval, "how often the leader publishes a heartbeat on NATS")
	fs.DurationVar(&f.cfg.SuspicionTimeout, "suspicion-timeout", d.SuspicionTimeout, "a follower that hears no heartbeat for this long breaks the silent leader's lease and takes over (at least 4 heartbeat intervals, below the lease)")
	f.cfg.Retention = &Retention{}
	*f.cfg.Retention = DefaultRetention
	fs.Var(f.cfg.Retention, "retention", "delete finished jobs this long after they end: DURATION, or SUCCEEDED,FAILED (failed and cancelled); days as 7d; 0 keeps them")
	fs.DurationVar(&f.cfg.ProbeAfter, "probe-after", 0, "a follower that hears no heartbeat for this long asks NATS whether the leader's process is still connected (0: 1.2 heartbeat intervals)")
	fs.DurationVar(&f.cfg.ProbeConfirm, "probe-confirm", 0, "how long every probe must find the leader's process gone before a follower breaks its lease; keep it above a reconnect (0: 100ms)")
	fs.DurationVar(&f.cfg.WatchEvery, "watch-every", 0, "how often the leader's first successor probes its term, so a crash is seen within it (0: 50ms; negative: off)")
	return f
}

// config is the Config the flags describe.
func (f *runFlags) config(log *slog.Logger) Config {
	c := f.cfg
	c.Storage, c.NATSAuth, c.NATSURL = f.account, f.natsAuth, f.natsURL
	c.StreamReplicas, c.StreamStorage = f.streamReplicas, f.streamStorage
	c.JobsContainer, c.Queue, c.LeaseContainer, c.StreamPrefix = f.jobsContainer, f.queueName, f.leaseContainer, f.streamPrefix
	c.Logger = log
	return c
}

func (n *Node) runCmd(ctx context.Context, args []string, stdout, stderr io.Writer) (err error) {
	f := n.newRunFlags()
	defer func() { err = f.explain(ctx, err) }()
	f.fs.SetOutput(stderr)
	if err := f.fs.parse(args); err != nil {
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
	cfg := f.config(log)
	if cfg.ClusterKeys, err = f.keys.resolve(); err != nil {
		return usageErr("%v", err)
	}
	if err := cfg.Validate(); err != nil {
		return usageErr("%v", err)
	}
	return n.Serve(ctx, cfg)
}

// Serve runs a node until ctx ends: it processes shards of the registry's job types, coordinates
// while it holds the leader lease, and answers the cluster's control requests (validate, types).
// When ctx ends a leader releases its lease. Zero fields of cfg take their defaults; an invalid
// cfg is an error matching ErrInvalidConfig, before anything is touched.
func (n *Node) Serve(ctx context.Context, cfg Config) error {
	cfg.fill()
	if err := cfg.Validate(); err != nil {
		return err
	}
	p := cfg.parts()
	log := p.worker.Logger
	reg, progs, err := programs(ctx, n.opts.Registry, cfg, log) // programs.go
	if err != nil {
		return err
	}
	for _, pr := range progs {
		defer pr.Close() // its session processes end with the node
	}
	p.coordinator.Registry, p.worker.Registry = reg, reg
	// Spans of the jobs this node leads or works on go to the OTLP collector, when one is
	// configured; the tracer travels in ctx to the coordinator and the worker (internal/telemetry).
	tracing, err := telemetry.New(ctx, telemetry.Config{Endpoint: cfg.OTLPEndpoint, Service: "mapagg-worker", Instance: cfg.ID, Logger: log})
	if err != nil {
		return err
	}
	defer func() {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		if err := tracing.Shutdown(sctx); err != nil {
			log.Warn("export the last spans", "err", err)
		}
	}()
	ctx = telemetry.NewContext(ctx, tracing)

	// The HTTP server binds before the node reaches storage and NATS, so /healthz answers (and
	// /readyz says "starting") while it waits; it outlives the work (deferred stop), so /readyz
	// and the dashboard see the stop.
	obs := newObserver(cfg, log)
	obs.hook(&p.election, &p.coordinator, &p.worker)
	if err := obs.listen(); err != nil {
		return err
	}
	var owg sync.WaitGroup
	octx, stopObs := context.WithCancel(context.WithoutCancel(ctx))
	defer func() { stopObs(); owg.Wait() }()
	owg.Add(1)
	go func() { defer owg.Done(); obs.serve(octx) }()

	clients, err := cfg.Storage.Open()
	if err != nil {
		return err
	}
	blobClient := clients.Blob
	// What the storage or an operator loses is created again by whoever finds it missing: each
	// says so in the node's log and events (docs/design.md, "Healing what operators, storage
	// and load break").
	containerRebuilt := func(name, op string) {
		obs.events.Rebuilt("container", fmt.Sprintf("container %s (found missing by %s)", name, op), obs.epoch.Load())
	}
	jobsC := store.New(blobClient, cfg.JobsContainer).WithLogger(log).OnRebuilt(containerRebuilt)
	q, err := queue.Open(clients, cfg.Queue)
	if err != nil {
		return err
	}
	q.WithLogger(log).OnRebuilt(func(name, op string) {
		obs.events.Rebuilt("queue", fmt.Sprintf("queue %s (found missing by %s)", name, op), obs.epoch.Load())
	})
	p.bus.Logger = log
	p.bus.OnRebuilt = func(r bus.Rebuilt) { obs.events.Rebuilt(r.Kind, r.String(), obs.epoch.Load()) }
	natsOpts, err := cfg.NATSAuth.Options()
	if err != nil {
		return err
	}
	if cfg.NATSDialer != nil {
		natsOpts = append(natsOpts, nats.SetCustomDialer(cfg.NATSDialer))
	}
	if p.bus.Keys, err = clusterKeys(ctx, log, cfg, store.New(blobClient, cfg.LeaseContainer)); err != nil {
		return err
	}
	// The leader stamps its key id; a worker with another key neither leads nor consumes.
	wctx, stopWorker := context.WithCancel(ctx)
	defer stopWorker()
	kc := &keyCheck{blob: blobClient, container: cfg.LeaseContainer, keys: p.bus.Keys, log: log, onWrong: stopWorker}
	logRefused := refusedLogger(log)
	p.bus.OnRefused = func(source, subject string, err error) { logRefused(source, subject, err); kc.evidence(err) }
	p.bus.ClusterKeyID = kc.ClusterKeyID
	p.election.Stamp = map[string]string{StampKeyID: p.bus.Keys.Current().ID()}
	p.election.Eligible = kc.Err
	b, err := connectCluster(ctx, log, cfg.StartupTimeout, cfg.NATSURL, cfg.ID, p.bus, natsOpts, func(ctx context.Context) error {
		if err := jobsC.Ensure(ctx); err != nil {
			return err
		}
		return q.Ensure(ctx)
	})
	if err != nil {
		return err
	}
	defer b.Close()
	// A second process with a live worker's id would fight it for the lease: it exits instead.
	releaseID, err := membership.Claim(b.Conn(), b.Config().Prefix, membership.Holder{ID: cfg.ID, Instance: newInstance(),
		StartedAt: obs.started, HTTPAddr: obs.addr()}, time.Second)
	if err != nil {
		log.Error("refusing to start", "err", err)
		return err
	}
	defer releaseID()
	_ = kc.check(ctx)

	// The data plane (a Map's reads, a keyed job's runs and outputs) has a connection pool of its
	// own: lease renewals and checkpoints never wait behind it (store.DataTransport).
	env := store.NewEnv(clients.Data).WithJobsContainer(cfg.JobsContainer).WithLogger(log.With("component", "job"))
	for _, pr := range progs {
		pr.SetEnv(env) // a reduce reads its job's parameters
	}
	coord, err := coordinator.New(p.coordinator, jobsC, q, b, env)
	if err != nil {
		return err
	}
	running := &why.Running{} // the task attempts running here, for "why is my job waiting" (internal/why)
	p.worker.JobLogs = jobLogs(joblog.New(clients.Data, cfg.JobsContainer), cfg.ID, tracing != nil, running)
	w, err := worker.New(p.worker, b, store.New(clients.Data, cfg.JobsContainer).WithLogger(log).OnRebuilt(containerRebuilt), env)
	if err != nil {
		return err
	}
	setMemoryLimit(w.MemoryBudget(), log) // keyed.go
	p.election.Healthy = coord.Healthy
	hb := b.Heartbeats()
	p.election.Heartbeats = hb
	p.election.Prober = b.TermProber() // fast path: a crashed leader's term has no responders
	obs.heartbeats.Store(hb)
	p.election.OnRelease = func(t election.Term) {
		if err := b.Announce(bus.CtlReleased, []byte(fmt.Sprint(t.Epoch))); err != nil {
			log.Warn("announce release", "err", err)
		}
	}
	el, err := obs.newElector(blobClient, p.election)
	if err != nil {
		return err
	}
	stopSub, err := b.Subscribe(bus.CtlReleased, func([]byte) { el.Poke() })
	if err != nil {
		return err
	}
	defer stopSub()
	resp, err := startResponder(b.Conn(), b.Config().Prefix, cfg.ID, reg, programNames(progs), log)
	if err != nil {
		return err
	}
	defer resp.stop()
	tasksSub, err := why.Serve(b.Conn(), why.Subject(b.Config().Prefix), cfg.ID, reg.Types(), running)
	if err != nil {
		return err
	}
	defer func() { _ = tasksSub.Unsubscribe() }()
	stopStatus, err := startStatusServer(ctx, b.Conn(), b.Config().Prefix, &statusServer{id: cfg.ID, blob: blobClient,
		leaseContainer: cfg.LeaseContainer, log: log, cl: &client.Client{Store: jobsC, Queue: q, Cache: &client.StatusCache{}}})
	if err != nil {
		return err
	}
	defer stopStatus()

	log.Info("worker started", "nats", cfg.NATSURL, "nats_auth", cfg.NATSAuth.Describe(), "storage", cfg.Storage.String(),
		"stream_replicas", p.bus.Replicas, "jobs_container", cfg.JobsContainer, "queue", cfg.Queue,
		"lease_duration", cfg.LeaseDuration, "concurrency", cfg.Concurrency, "types", reg.Types(), "programs", programNames(progs))
	if err := obs.start(octx, &owg, observed{bus: b, blob: blobClient, jobs: jobsC, queue: q, leaseContainer: cfg.LeaseContainer,
		coord: coord, worker: w, concurrency: cfg.Concurrency, types: reg.Types(), programs: programNames(progs),
		registry: reg, control: n.opts.Control, natsURL: cfg.NATSURL, keyErr: kc.Err}); err != nil {
		return err
	}
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		if kc.Err() != nil {
			return // wrong cluster key: consume nothing
		}
		if err := w.Run(wctx); err != nil {
			log.Error("worker stopped", "err", err)
		}
	}()
	go func() {
		defer wg.Done()
		_ = el.Run(ctx, func(lctx context.Context) error {
			term, _ := election.TermFromContext(lctx)
			err := coord.Lead(lctx, term.Epoch)
			// The next term's epoch is above every checkpoint's, even if the lease blob's epoch
			// went back in time (coordinator/fence.go).
			el.RaiseEpochFloor(coord.HighestEpochSeen())
			return err
		})
	}()
	wg.Wait()
	st := w.Stats()
	log.Info("worker stopped", "executed", st.Executed, "succeeded", st.Succeeded, "failed", st.Failed, "redelivered", st.Redelivered)
	return nil
}

// connectCluster connects to NATS and prepares streams and storage, retrying while the servers
// come up (a compose cluster starts them side by side).
func connectCluster(ctx context.Context, log *slog.Logger, within time.Duration, url, name string, cfg bus.Config, opts []nats.Option, prepare func(context.Context) error) (*bus.Bus, error) {
	deadline := time.Now().Add(within)
	var last error
	for attempt := 0; ; attempt++ {
		b, err := bus.Connect(url, name, cfg, append(append([]nats.Option(nil), opts...), bus.ConnEvents(log)...)...)
		if bus.Permanent(err) {
			return nil, err // wrong settings or credentials: retrying cannot help
		}
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
		if refusedCredentials(err) {
			return nil, err // a refused key, token or role: retrying cannot help
		}
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

// refusedCredentials reports a storage answer 401 or 403: the credentials are wrong, not the
// network.
func refusedCredentials(err error) bool {
	var re *azcore.ResponseError
	return errors.As(err, &re) && (re.StatusCode == http.StatusUnauthorized || re.StatusCode == http.StatusForbidden)
}
