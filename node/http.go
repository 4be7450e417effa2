package node

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob"

	"github.com/mapagg/mapagg/bus"
	"github.com/mapagg/mapagg/client"
	"github.com/mapagg/mapagg/coordinator"
	"github.com/mapagg/mapagg/election"
	"github.com/mapagg/mapagg/internal/membership"
	"github.com/mapagg/mapagg/internal/protocol"
	"github.com/mapagg/mapagg/observe"
	"github.com/mapagg/mapagg/queue"
	"github.com/mapagg/mapagg/store"
	"github.com/mapagg/mapagg/worker"
)

// DefaultHTTPAddr is where `worker run` serves metrics, health and the dashboard. All interfaces
// on 8080, because in a container (compose, Kubernetes) Prometheus, the health check and a
// browser reach the worker from outside its network namespace, and each container has its own
// ports. Several workers on one host need an address each: pass 127.0.0.1:0 (a free port, logged
// at start) or 127.0.0.1:<port>.
const DefaultHTTPAddr = ":8080"

// registerHTTPFlags adds the `run` flags of the HTTP server, which set cfg's fields.
func registerHTTPFlags(fs *flagSet, cfg *Config) {
	fs.StringVar(&cfg.HTTPAddr, "http-addr", DefaultHTTPAddr, `address of the HTTP server (/metrics, /healthz, /readyz, dashboard at /); "off" disables it; 127.0.0.1:0 picks a free local port`)
	bindEnv(fs, "http-addr", "HTTP_ADDR")
	fs.BoolVar(&cfg.Pprof, "pprof", false, "serve /debug/pprof/ on the HTTP server")
	bindEnv(fs, "pprof", "PPROF")
	fs.BoolVar(&cfg.DashboardCancel, "dashboard-cancel", false, "let the dashboard cancel jobs (read-only otherwise)")
	bindEnv(fs, "dashboard-cancel", "DASHBOARD_CANCEL")
}

// observer holds a worker's metrics, events, membership and HTTP server.
type observer struct {
	cfg     Config // HTTPAddr, Pprof, DashboardCancel, ID
	id      string
	log     *slog.Logger
	started time.Time
	metrics *observe.Metrics
	events  *observe.Recorder

	worker  atomic.Pointer[worker.Worker]
	elector atomic.Pointer[election.Elector]
	bus     atomic.Pointer[bus.Bus]
	// heartbeats counts refused control messages.
	heartbeats atomic.Pointer[bus.Heartbeats]
	srv        *observe.Server // nil with --http-addr off
	epoch      atomic.Uint64   // the epoch this worker leads, 0 when following
}

func newObserver(cfg Config, log *slog.Logger) *observer {
	id := cfg.ID
	o := &observer{cfg: cfg, id: id, log: log, started: time.Now().UTC(), events: observe.NewRecorder(id)}
	o.metrics = observe.NewMetrics(version(), observe.Sources{
		Worker: func() worker.Stats {
			if w := o.worker.Load(); w != nil {
				return w.Stats()
			}
			return worker.Stats{}
		},
		Elector: func() election.Stats {
			if e := o.elector.Load(); e != nil {
				return e.Stats()
			}
			return election.Stats{}
		},
		QueuedShards: func(ctx context.Context) (uint64, error) {
			if b := o.bus.Load(); b != nil {
				return b.QueuedShards(ctx)
			}
			return 0, errors.New("not connected yet")
		},
		Trust: func() (s observe.TrustStats) {
			if b := o.bus.Load(); b != nil {
				s.Refused, s.CutOffs = b.Refused(), b.Health().Cuts()
			}
			if h := o.heartbeats.Load(); h != nil {
				s.ControlRefused = h.Unverified()
			}
			return s
		},
	})
	return o
}

func version() string {
	if bi, ok := debug.ReadBuildInfo(); ok {
		if v := bi.Main.Version; v != "" && v != "(devel)" {
			return v
		}
		for _, s := range bi.Settings {
			if s.Key == "vcs.revision" && len(s.Value) >= 12 {
				return s.Value[:12]
			}
		}
	}
	return "devel"
}

// hook wires the metrics and event recorder into the configurations (keeping hooks already set).
func (o *observer) hook(ecfg *election.Config, ccfg *coordinator.Config, wcfg *worker.Config) {
	prevE := ecfg.OnEvent
	ecfg.OnEvent = func(ev election.Event) {
		if prevE != nil {
			prevE(ev)
		}
		switch ev.Kind {
		case election.EventElected:
			o.epoch.Store(ev.Term.Epoch)
		case election.EventLost, election.EventSteppedDown:
			o.epoch.Store(0)
		}
		o.metrics.ElectionEvent(ev)
		o.events.Election(ev)
	}
	prevC := ccfg.OnEvent
	ccfg.OnEvent = func(ev coordinator.Event) {
		if prevC != nil {
			prevC(ev)
		}
		o.metrics.CoordinatorEvent(ev)
		o.events.Coordinator(ev)
	}
	ccfg.Metrics = o.metrics
	wcfg.Metrics = o.metrics
}

// newElector builds the elector over a lease API that times renewals.
func (o *observer) newElector(blobClient *azblob.Client, cfg election.Config) (*election.Elector, error) {
	el, err := election.New(o.metrics.TimeRenewals(election.NewAzureAPI(blobClient)), cfg)
	if err == nil {
		o.elector.Store(el)
	}
	return el, err
}

// listen binds the HTTP server before the worker reaches storage and NATS, so /healthz answers
// (and /readyz says "starting") while it waits.
func (o *observer) listen() error {
	if o.cfg.HTTPAddr == "off" {
		return nil
	}
	srv, err := observe.Listen(observe.Config{Addr: o.cfg.HTTPAddr, Pprof: o.cfg.Pprof, DashboardCancel: o.cfg.DashboardCancel,
		Worker: o.id, Metrics: o.metrics, Events: o.events, Logger: o.log})
	if err != nil {
		return err
	}
	o.srv = srv
	o.log.Info("http listening", "addr", srv.Addr().String(), "pprof", o.cfg.Pprof, "dashboard_cancel", o.cfg.DashboardCancel)
	return nil
}

// addr is where the HTTP server listens ("" with --http-addr off).
func (o *observer) addr() string {
	if o.srv == nil {
		return ""
	}
	return o.srv.Addr().String()
}

// serve serves HTTP until ctx ends (nothing with --http-addr off). Its owner waits for it.
func (o *observer) serve(ctx context.Context) {
	if o.srv == nil {
		return
	}
	if err := o.srv.Serve(ctx); err != nil {
		o.log.Error("http server stopped", "err", err)
	}
}

// observed is what the observer reads and serves once the worker reached the cluster.
type observed struct {
	bus            *bus.Bus
	blob           *azblob.Client
	jobs           *store.Container
	queue          *queue.Queue
	leaseContainer string
	coord          *coordinator.Coordinator
	worker         *worker.Worker
	concurrency    int
	types          []string // the node's job types
	keyErr         func() error
}

// start runs membership and events under wg until ctx ends, and attaches the cluster to the
// HTTP server.
func (o *observer) start(ctx context.Context, wg *sync.WaitGroup, c observed) error {
	o.worker.Store(c.worker)
	o.bus.Store(c.bus)
	names := protocol.NewNames(c.bus.Config().Prefix)
	nc := c.bus.Conn()
	watcher, err := membership.Watch(nc, names.Members(), 0, o.log)
	if err != nil {
		return fmt.Errorf("watch membership: %w", err)
	}
	addr := ""
	if o.srv != nil {
		cl := &client.Client{Store: c.jobs, Queue: c.queue, Notify: c.bus}
		err = o.srv.Attach(observe.Backend{
			Members: watcher.Live,
			Ready:   &observe.Readiness{Checks: o.readyChecks(c)},
			Jobs:    &observe.JobCache{Lister: cl},
			Leader: func(ctx context.Context) (*election.LeaderInfo, error) {
				return election.ReadLeader(ctx, c.blob, c.leaseContainer, election.DefaultConfig().Blob)
			},
			Cancel: func(ctx context.Context, id string) error { _, err := cl.Cancel(ctx, id); return err },
		})
		if err != nil {
			watcher.Stop()
			return err
		}
		addr = o.srv.Addr().String()
	}
	types := c.types
	wg.Add(2)
	go func() {
		defer wg.Done()
		defer watcher.Stop()
		membership.Announce(ctx, nc, names.Members(), membership.DefaultInterval, o.log, func() membership.Announcement {
			ep := o.epoch.Load()
			return membership.Announcement{ID: o.id, Version: version(), JobTypes: types, Concurrency: c.concurrency,
				InFlight: o.metrics.InFlight(), StartedAt: o.started, Leader: ep != 0, Epoch: ep, HTTPAddr: addr}
		})
	}()
	go func() {
		defer wg.Done()
		if err := o.events.Run(ctx, nc, names.Events(), o.log); err != nil {
			o.log.Warn("cluster events unavailable", "err", err)
		}
	}()
	return nil
}

// readyProbe is the name of a blob that never exists: a HEAD on it proves the container is
// reachable without reading anything.
const readyProbe = "readyz-probe"

func (o *observer) readyChecks(c observed) []observe.Check {
	return []observe.Check{
		{Name: "storage", Fn: func(ctx context.Context) error {
			_, err := c.jobs.Exists(ctx, readyProbe)
			return err
		}},
		{Name: "nats", Fn: func(ctx context.Context) error {
			// The health prober's round trips: a silent partition shows within a second.
			return c.bus.Health().Err()
		}},
		{Name: "coordinator", Fn: func(context.Context) error { return c.coord.Healthy() }},
		{Name: "cluster key", Fn: func(context.Context) error { return c.keyErr() }},
		{Name: "results", Fn: func(context.Context) error { return c.worker.PublishErr() }},
		{Name: "queue", Fn: func(context.Context) error { return c.coord.IntakeErr() }},
	}
}
