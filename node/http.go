package node

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"runtime/debug"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob"

	"github.com/mapagg/mapagg/client"
	"github.com/mapagg/mapagg/election"
	"github.com/mapagg/mapagg/internal/api"
	"github.com/mapagg/mapagg/internal/audit"
	"github.com/mapagg/mapagg/internal/bus"
	"github.com/mapagg/mapagg/internal/clusterask"
	"github.com/mapagg/mapagg/internal/coordinator"
	"github.com/mapagg/mapagg/internal/joblog"
	"github.com/mapagg/mapagg/internal/membership"
	"github.com/mapagg/mapagg/internal/observe"
	"github.com/mapagg/mapagg/internal/protocol"
	"github.com/mapagg/mapagg/internal/queue"
	"github.com/mapagg/mapagg/internal/telemetry"
	"github.com/mapagg/mapagg/internal/why"
	"github.com/mapagg/mapagg/internal/worker"
	"github.com/mapagg/mapagg/jobs"
	"github.com/mapagg/mapagg/store"
)

// DefaultHTTPAddr is where `worker run` serves metrics, health, the API and the dashboard. All
// interfaces on 8080, because in a container (compose, Kubernetes) Prometheus, the health check
// and a browser reach the worker from outside its network namespace. When it is taken (several
// workers on one host), a worker falls back to a free port, logs it and announces it.
const DefaultHTTPAddr = ":8080"

// registerHTTPFlags adds the `run` flags of the HTTP server, which set cfg's fields.
func registerHTTPFlags(fs *flagSet, cfg *Config) {
	fs.StringVar(&cfg.HTTPAddr, "http-addr", DefaultHTTPAddr, `address of the HTTP server (/metrics, /healthz, /readyz, dashboard at /); "off" disables it; 127.0.0.1:0 picks a free local port`)
	fs.StringVar(&cfg.OTLPEndpoint, "otlp-endpoint", "", "send a job's trace spans (submit, intake, plan, tasks, merges, checkpoints, finish) to this OpenTelemetry collector's OTLP/HTTP base URL, e.g. http://127.0.0.1:4318 (/v1/traces is added); none: tracing off unless OTEL_EXPORTER_OTLP_TRACES_ENDPOINT is set")
	envOnly(fs, telemetry.EnvTracesEndpoint, "OpenTelemetry collector traces URL, used as is (wins over "+telemetry.EnvEndpoint+")")
	fs.BoolVar(&cfg.Pprof, "pprof", false, "serve /debug/pprof/ on the HTTP server")
	fs.BoolVar(&cfg.DashboardCancel, "dashboard-cancel", false, "let the dashboard's own page cancel, retry and delete jobs without the API token (same-origin requests only)")
	fs.StringVar(&cfg.APITokenFile, "api-token-file", "", "file holding the bearer token that authorizes HTTP writes (jobs: submit, cancel, retry, delete; schedules); without it writes are refused")
	fs.StringVar(&cfg.APITokensFile, "api-tokens-file", "", "file of named tokens with roles, one `NAME ROLE TOKEN` a line (read: the audit trail; submit: submit, cancel, retry, schedules; admin: also delete), beside --api-token-file")
	fs.Func("http-hosts", `extra Host names the HTTP server answers, comma-separated (IP addresses, localhost, names without a dot and the host name always work; "*" any; ".example.com" its subdomains)`, func(v string) error {
		cfg.HTTPHosts = nil
		for _, h := range strings.Split(v, ",") {
			if h = strings.TrimSpace(h); h != "" {
				cfg.HTTPHosts = append(cfg.HTTPHosts, h)
			}
		}
		return nil
	})
}

// minTokenLen is the shortest API token accepted: a guessable token is no token.
const minTokenLen = 16

// readToken reads the API token from file ("" for none). Its content never appears in an error.
func readToken(file string) ([]byte, error) {
	if file == "" {
		return nil, nil
	}
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("--api-token-file %s: cannot read it (%v)", file, errors.Unwrap(err))
	}
	tok := bytes.TrimSpace(b)
	if len(tok) < minTokenLen {
		return nil, fmt.Errorf("--api-token-file %s: the token is %d characters; use at least %d (e.g. openssl rand -hex 32 > %s)", file, len(tok), minTokenLen, file)
	}
	return tok, nil
}

// readTokens reads the named tokens of --api-tokens-file ("" for none). No secret appears in an
// error.
func readTokens(file string) ([]api.Token, error) {
	if file == "" {
		return nil, nil
	}
	f, err := os.Open(file)
	if err != nil {
		return nil, fmt.Errorf("--api-tokens-file %s: cannot read it (%v)", file, errors.Unwrap(err))
	}
	defer f.Close()
	toks, err := api.ParseTokens(f)
	if err != nil {
		return nil, fmt.Errorf("--api-tokens-file %s: %w", file, err)
	}
	return toks, nil
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
	token      []byte          // the API token (--api-token-file); nil: writes refused
	tokens     []api.Token     // named tokens with roles (--api-tokens-file)
	epoch      atomic.Uint64   // the epoch this worker leads, 0 when following
	members    atomic.Pointer[membership.Watcher]
	renew      renewHealth // failed renewals and lost terms, for problems
}

// typeHolders names the live workers that announce job type typ (coordinator.Config.TypeHolders).
func (o *observer) typeHolders(typ string) []string {
	var out []string
	for _, m := range o.holding(typ) {
		out = append(out, m.ID)
	}
	return out
}

// typeSlots is how many tasks of job type typ the live workers that have it run at once, their
// concurrency summed (coordinator.Config.Slots); 0 when membership is not known yet.
func (o *observer) typeSlots(typ string) int {
	n := 0
	for _, m := range o.holding(typ) {
		n += max(m.Concurrency, 0)
	}
	return n
}

// holding is the live workers that announce job type typ; none while membership is not known.
func (o *observer) holding(typ string) []membership.Member {
	w := o.members.Load()
	if w == nil {
		return nil
	}
	var out []membership.Member
	for _, m := range w.Peek() { // never waits: the coordinator's loop asks
		if slices.Contains(m.JobTypes, typ) {
			out = append(out, m)
		}
	}
	return out
}

// successors names the ready live workers by id, for the leader's beats (election.Config.Successors).
func (o *observer) successors() []string {
	w := o.members.Load()
	if w == nil {
		return nil
	}
	var out []string
	for _, m := range w.Peek() {
		if m.ID != o.id && len(m.Problems) == 0 && len(out) < election.MaxSuccessors {
			out = append(out, m.ID)
		}
	}
	return out
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
	o.metrics.Registry.MustRegister(worker.NewKeyedCollector(func() *worker.Worker { return o.worker.Load() }))
	return o
}

// version is read once: parsing the build info each announcement (a second) was 3 % of an idle
// simulated member's CPU.
var version = sync.OnceValue(func() string {
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
})

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
		if w := o.members.Load(); w != nil {
			w.Hold(o.epoch.Load() != 0) // the leader listens to membership; followers on demand
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
	if ccfg.TypeHolders == nil {
		ccfg.TypeHolders = o.typeHolders
	}
	if ccfg.Slots == nil {
		ccfg.Slots = o.typeSlots
	}
	if ecfg.Successors == nil {
		ecfg.Successors = o.successors
	}
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
	token, err := readToken(o.cfg.APITokenFile)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	tokens, err := readTokens(o.cfg.APITokensFile)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	ocfg := observe.Config{Addr: o.cfg.HTTPAddr, Pprof: o.cfg.Pprof, DashboardCancel: o.cfg.DashboardCancel,
		APIWrites: len(token) > 0 || len(tokens) > 0, Hosts: o.cfg.HTTPHosts, Worker: o.id, Metrics: o.metrics, Events: o.events, Logger: o.log}
	srv, err := observe.Listen(ocfg)
	if errors.Is(err, syscall.EADDRINUSE) && o.cfg.HTTPAddr == DefaultHTTPAddr {
		// Several workers on one host without configuration: the first keeps the default, the
		// others take a free port on the same interface and announce it.
		host, _, _ := net.SplitHostPort(DefaultHTTPAddr)
		ocfg.Addr = net.JoinHostPort(host, "0")
		if srv, err = observe.Listen(ocfg); err == nil {
			o.log.Warn("default HTTP address taken: listening on a free port instead (set --http-addr to choose)",
				"default", DefaultHTTPAddr, "addr", srv.Addr().String())
		}
	}
	if err != nil {
		return err
	}
	o.srv, o.token, o.tokens = srv, token, tokens
	o.log.Info("http listening", "addr", srv.Addr().String(), "pprof", o.cfg.Pprof, "dashboard_cancel", o.cfg.DashboardCancel,
		"api_writes", len(token) > 0 || len(tokens) > 0, "api_tokens", len(tokens))
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
	programs       []string // the job types that are programs (--program)
	registry       *jobs.Registry
	control        ControlConfig
	natsURL        string
	keyErr         func() error
}

// start runs membership and events under wg until ctx ends, and attaches the cluster to the
// HTTP server.
func (o *observer) start(ctx context.Context, wg *sync.WaitGroup, c observed) error {
	o.worker.Store(c.worker)
	o.bus.Store(c.bus)
	names := protocol.NewNames(c.bus.Config().Prefix)
	nc := c.bus.Conn()
	// Workers announce to every listener; only the leader listens all the time, so membership
	// traffic grows with the cluster, not with its square.
	watcher := membership.WatchOnDemand(nc, names.Members(), 0, time.Minute, o.log)
	o.members.Store(watcher) // before Hold: an election meanwhile finds it and holds it too
	watcher.Hold(o.epoch.Load() != 0)
	addr := ""
	if o.srv != nil {
		if err := o.attach(c, watcher, names.Prefix); err != nil {
			watcher.Stop()
			return err
		}
		addr = o.srv.Addr().String()
	}
	types := c.types
	host, _ := os.Hostname()
	o.events.PublishOnly = o.srv == nil // nobody reads the cluster's events here (no /api/cluster)
	wg.Add(2)
	go func() {
		defer wg.Done()
		defer watcher.Stop()
		membership.Announce(ctx, nc, names.Members(), membership.DefaultInterval, o.log, func() membership.Announcement {
			ep := o.epoch.Load()
			watcher.Hold(ep != 0) // settles a Hold raced by an election event
			return membership.Announcement{ID: o.id, Version: version(), JobTypes: types, Programs: c.programs, Concurrency: c.concurrency,
				InFlight: o.metrics.InFlight(), StartedAt: o.started, Leader: ep != 0, Epoch: ep, HTTPAddr: addr, Host: host, PID: os.Getpid(),
				Problems: o.problems(ctx, c)}
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

// attach hands the HTTP server the cluster: the dashboard's reads and the job API, both over
// one client. The API validates like the CLI: locally for this node's types, by the cluster
// otherwise.
func (o *observer) attach(c observed, watcher *membership.Watcher, prefix string) error {
	cl := &client.Client{Store: c.jobs, Queue: c.queue, Notify: c.bus, Registry: c.registry, Cache: &client.StatusCache{},
		Containers: store.NewEnv(c.blob),
		Validator: &clusterask.Validator{Conn: c.bus.Conn(), URL: c.natsURL, Prefix: prefix, Local: c.registry.Types(),
			Timeout: c.control.Timeout, Window: c.control.Window}}
	jobAPI, err := api.New(api.Config{Jobs: cl, Schedules: cl, Token: o.token, Tokens: o.tokens, DashboardCancel: o.cfg.DashboardCancel,
		Audit: audit.NewLog(c.blob, c.jobs.Name()), Logs: joblog.New(c.blob, c.jobs.Name()), Logger: o.log,
		Why: &why.Asker{Jobs: cl, Conn: c.bus.Conn(), Subject: why.Subject(prefix)}})
	if err != nil {
		return err
	}
	return o.srv.Attach(observe.Backend{
		Members: watcher.Live,
		Ready:   &observe.Readiness{Checks: o.readyChecks(c)},
		Jobs:    &observe.JobCache{Lister: cl},
		Leader: func(ctx context.Context) (*election.LeaderInfo, error) {
			return election.ReadLeader(ctx, c.blob, c.leaseContainer, election.DefaultConfig().Blob)
		},
		API:          jobAPI,
		Schedules:    cl,
		ShardsQueued: c.bus.QueuedShards,
		JobsQueued:   c.queue.Depth,
	})
}

// readyProbe is the name of a blob that never exists: a HEAD on it proves the container is
// reachable without reading anything.
const readyProbe = "readyz-probe"

// problems are the failing readiness checks that cost no I/O (every one but storage's), for the
// announcement: `worker workers` and the dashboard show them.
func (o *observer) problems(ctx context.Context, c observed) []string {
	var out []string
	if el := o.elector.Load(); el != nil {
		if p := o.renew.problem(el.Stats(), time.Now()); p != "" {
			out = append(out, p)
		}
	}
	for _, ch := range o.readyChecks(c) {
		if ch.Name == "storage" {
			continue
		}
		if err := ch.Fn(ctx); err != nil && len(out) < membership.MaxProblems {
			out = append(out, protocol.Clip(ch.Name+": "+err.Error(), membership.MaxProblemLen-32)) // Clip adds "…(N bytes)"
		}
	}
	return out
}

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
