package observe

import (
	"bytes"
	"cmp"
	"context"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/mapagg/mapagg/election"
	"github.com/mapagg/mapagg/internal/membership"
	"github.com/mapagg/mapagg/internal/protocol"
)

//go:embed dashboard
var dashboardFS embed.FS

// Config configures a worker's HTTP server.
type Config struct {
	// Addr is the listen address, e.g. ":8080" in a container or "127.0.0.1:0" locally. Required.
	Addr string
	// Pprof serves /debug/pprof/ (off by default: it exposes internals and costs CPU when used).
	Pprof bool
	// DashboardCancel and APIWrites tell the dashboard which buttons to offer: cancel, retry and
	// delete without a token (--dashboard-cancel), or with one (a token is configured). The job
	// API (Backend.API) enforces both; these only show them.
	DashboardCancel bool
	APIWrites       bool
	// Hosts are the extra Host names the server answers besides IP literals, localhost, names
	// without a dot and the machine's host name ("*": any; ".example.com": its subdomains too).
	// Other names are refused, against DNS rebinding.
	Hosts []string
	// Worker is this worker's id.
	Worker string

	Metrics *Metrics
	Events  *Recorder
	Logger  *slog.Logger
}

// Backend is what the server reads once the worker has reached storage and NATS (Attach).
type Backend struct {
	Ready *Readiness
	Jobs  *JobCache
	// Members lists the live workers (membership.Watcher.Live).
	Members func() []membership.Member
	// Leader reads the lease blob: who leads, by record.
	Leader func(ctx context.Context) (*election.LeaderInfo, error)
	// API serves every path under /api/ but the dashboard's reads above (the job API: /api/v1
	// and the dashboard's actions); nil answers 503.
	API http.Handler
	// Schedules lists the schedules for the dashboard; nil shows none.
	Schedules ScheduleLister
	// ShardsQueued is the shard stream's depth; JobsQueued the intake queue's. Optional.
	ShardsQueued func(ctx context.Context) (uint64, error)
	JobsQueued   func(ctx context.Context) (int, error)
}

// ErrInvalidConfig is matched by every error Config.Validate returns.
var ErrInvalidConfig = errors.New("observe: invalid config")

// Validate reports every missing piece.
func (c Config) Validate() error {
	var errs []error
	if c.Addr == "" {
		errs = append(errs, errors.New("no listen address: set --http-addr (e.g. :8080, or 127.0.0.1:0 for a random local port)"))
	}
	if c.Metrics == nil || c.Events == nil {
		errs = append(errs, errors.New("Metrics and Events are required"))
	}
	if len(errs) > 0 {
		return fmt.Errorf("%w: %w", ErrInvalidConfig, errors.Join(errs...))
	}
	return nil
}

// Server is a worker's HTTP server. It serves /healthz, /metrics and /api/events from the start;
// /readyz, /api/cluster, /api/jobs and the job API answer 503 "starting" until Attach.
type Server struct {
	cfg     Config
	ln      net.Listener
	srv     *http.Server
	backend atomic.Pointer[Backend]
	leader  cachedLeader
	depth   cachedDepth
	scheds  cachedSchedules
	// chartsCache holds /api/charts.
	chartsCache cachedCharts
}

// Attach hands the server what it needs to answer readiness, cluster and job requests.
func (s *Server) Attach(b Backend) error {
	if b.Ready == nil || b.Jobs == nil || b.Members == nil || b.Leader == nil {
		return errors.New("observe: Attach needs Ready, Jobs, Members and Leader")
	}
	s.leader.mu.Lock()
	s.leader.read = b.Leader
	s.leader.mu.Unlock()
	s.backend.Store(&b)
	return nil
}

// attached returns the backend, or answers 503 and returns nil while the worker starts.
func (s *Server) attached(w http.ResponseWriter) *Backend {
	b := s.backend.Load()
	if b == nil {
		writeJSON(w, http.StatusServiceUnavailable, map[string]any{"ok": false, "worker": s.cfg.Worker,
			"error": "starting: waiting for storage and NATS", "checks": []CheckResult{{Name: "startup", Error: "waiting for storage and NATS"}}})
	}
	return b
}

// Listen binds the address (so the caller can log the real port before serving).
func Listen(cfg Config) (*Server, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg.Logger = cmp.Or(cfg.Logger, slog.Default())
	ln, err := net.Listen("tcp", cfg.Addr)
	if err != nil {
		return nil, fmt.Errorf("observe: listen on %s: %w (choose another --http-addr)", cfg.Addr, err)
	}
	s := &Server{cfg: cfg, ln: ln}
	s.srv = &http.Server{Handler: s.Handler(), ReadHeaderTimeout: 5 * time.Second, MaxHeaderBytes: 64 << 10}
	return s, nil
}

// Addr is the address the server listens on.
func (s *Server) Addr() net.Addr { return s.ln.Addr() }

// Serve serves until ctx ends, then shuts down within 2 s.
func (s *Server) Serve(ctx context.Context) error {
	// Requests see ctx's values (a node's tracer: a submit's span), not its end.
	base := context.WithoutCancel(ctx)
	s.srv.BaseContext = func(net.Listener) context.Context { return base }
	done := make(chan error, 1)
	go func() { done <- s.srv.Serve(s.ln) }()
	select {
	case err := <-done:
		return fmt.Errorf("observe: serve: %w", err)
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_ = s.srv.Shutdown(sctx)
	<-done
	return nil
}

// Handler returns the server's routes.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(s.cfg.Metrics.Registry, promhttp.HandlerOpts{Registry: s.cfg.Metrics.Registry}))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, map[string]any{"ok": true, "worker": s.cfg.Worker})
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		b := s.attached(w)
		if b == nil {
			return
		}
		res, ok := b.Ready.Check(r.Context())
		code := http.StatusOK
		if !ok {
			code = http.StatusServiceUnavailable
		}
		writeJSON(w, code, map[string]any{"ok": ok, "worker": s.cfg.Worker, "checks": res})
	})
	mux.HandleFunc("GET /api/events", s.events)
	mux.HandleFunc("GET /api/cluster", s.cluster)
	mux.HandleFunc("GET /api/jobs", s.jobs)
	mux.HandleFunc("GET /api/schedules", s.scheduleList)
	mux.HandleFunc("GET /api/charts", s.charts)
	mux.HandleFunc("/api/", s.api)
	if s.cfg.Pprof {
		// With methods: a method-less pattern would conflict with "/api/".
		mux.HandleFunc("GET /debug/pprof/", pprof.Index)
		mux.HandleFunc("GET /debug/pprof/cmdline", pprof.Cmdline)
		mux.HandleFunc("GET /debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("GET /debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("POST /debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("GET /debug/pprof/trace", pprof.Trace)
	}
	static, _ := fs.Sub(dashboardFS, "dashboard")
	files := http.FileServerFS(static)
	mux.HandleFunc("GET /jobs/{id}", s.jobPage(static))
	// The dashboard's pages: each loads by itself (bookmarks, links in alerts).
	for _, p := range pages {
		mux.HandleFunc("GET /"+p, s.page(static))
	}
	// Without a method, as "/api/" is: "GET /" and "/api/" would conflict.
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			http.Error(w, http.StatusText(http.StatusMethodNotAllowed), http.StatusMethodNotAllowed)
			return
		}
		files.ServeHTTP(w, r)
	})
	return s.checkHost(mux)
}

// jobPage serves the dashboard at /jobs/{id}, a job's own address (for bookmarks, alerts and
// chat): the page's relative links resolve against the root through a <base>, and the page
// opens the job itself.
func (s *Server) jobPage(static fs.FS) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if err := protocol.CheckID(r.PathValue("id")); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		page, err := fs.ReadFile(static, "index.html")
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		page = bytes.Replace(page, []byte("<head>"), []byte(`<head>`+"\n"+`<base href="../">`), 1)
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		w.Header().Set("Cache-Control", "no-store")
		_, _ = w.Write(page)
	}
}

// pages are the dashboard's pages besides the overview (/) and a job's (/jobs/{id}).
var pages = []string{"jobs", "schedules", "workers", "epochs"}

// page serves the dashboard at one of pages; the script shows that page's parts.
func (s *Server) page(static fs.FS) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		page, err := fs.ReadFile(static, "index.html")
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		w.Header().Set("Cache-Control", "no-store")
		_, _ = w.Write(page)
	}
}

// api hands a request to the job API once it is attached.
func (s *Server) api(w http.ResponseWriter, r *http.Request) {
	b := s.attached(w)
	if b == nil {
		return
	}
	if b.API == nil {
		writeErr(w, http.StatusServiceUnavailable, "the job API is not available on this worker")
		return
	}
	b.API.ServeHTTP(w, r)
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}

func writeErr(w http.ResponseWriter, code int, msg string) {
	writeJSON(w, code, map[string]string{"error": msg})
}

// events serves this worker's own events (?since=SEQ for those after SEQ).
func (s *Server) events(w http.ResponseWriter, r *http.Request) {
	var since uint64
	if v := r.URL.Query().Get("since"); v != "" {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			writeErr(w, http.StatusBadRequest, fmt.Sprintf("since=%q: want the seq of the last event seen (a whole number)", v))
			return
		}
		since = n
	}
	writeJSON(w, http.StatusOK, map[string]any{"worker": s.cfg.Worker, "events": s.cfg.Events.Own(since)})
}

// LeaderView is the leader in /api/cluster: election.LeaderInfo in the API's snake_case.
type LeaderView struct {
	ID    string            `json:"id"`
	Epoch uint64            `json:"epoch"`
	Since time.Time         `json:"since"`
	Stamp map[string]string `json:"stamp,omitempty"`
}

func leaderView(l *election.LeaderInfo) *LeaderView {
	if l == nil {
		return nil
	}
	return &LeaderView{ID: l.ID, Epoch: l.Epoch, Since: l.Since, Stamp: l.Stamp}
}

// ClusterView is the body of /api/cluster.
type ClusterView struct {
	Worker    string              `json:"worker"` // the worker that answered
	Leader    *LeaderView         `json:"leader"` // by the lease blob; null when nobody holds it
	LeaderErr string              `json:"leader_error,omitempty"`
	Members   []membership.Member `json:"members"`
	Events    []membership.Event  `json:"events"`         // the cluster's events heard since this worker started
	Cancel    bool                `json:"cancel_enabled"` // the dashboard may cancel without the token
	Writes    bool                `json:"api_writes"`     // an API token is configured
	// ShardsQueued and JobsQueued are the shard stream's and the intake queue's depth (null
	// when unknown).
	ShardsQueued *uint64   `json:"shards_queued"`
	JobsQueued   *int      `json:"jobs_queued"`
	Now          time.Time `json:"now"`
}

func (s *Server) cluster(w http.ResponseWriter, r *http.Request) {
	b := s.attached(w)
	if b == nil {
		return
	}
	l, err := s.leader.get(r.Context())
	v := ClusterView{Worker: s.cfg.Worker, Leader: leaderView(l), Members: b.Members(), Events: s.cfg.Events.Cluster(),
		Cancel: s.cfg.DashboardCancel, Writes: s.cfg.APIWrites, Now: time.Now().UTC()}
	if err != nil {
		v.LeaderErr = protocol.Redact(err.Error())
	}
	v.ShardsQueued, v.JobsQueued = s.depth.get(r.Context(), b)
	writeJSON(w, http.StatusOK, v)
}

// cachedDepth reads the queues' depths at most once a second.
type cachedDepth struct {
	mu     sync.Mutex
	at     time.Time
	shards *uint64
	jobs   *int
}

func (c *cachedDepth) get(ctx context.Context, b *Backend) (*uint64, *int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.at.IsZero() && time.Since(c.at) < time.Second {
		return c.shards, c.jobs
	}
	rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	c.shards, c.jobs = nil, nil
	if b.ShardsQueued != nil {
		if n, err := b.ShardsQueued(rctx); err == nil {
			c.shards = &n
		}
	}
	if b.JobsQueued != nil {
		if n, err := b.JobsQueued(rctx); err == nil {
			c.jobs = &n
		}
	}
	c.at = time.Now()
	return c.shards, c.jobs
}

func (s *Server) jobs(w http.ResponseWriter, r *http.Request) {
	b := s.attached(w)
	if b == nil {
		return
	}
	jobs, err := b.Jobs.Jobs(r.Context())
	body := map[string]any{"jobs": jobs}
	if err != nil {
		body["error"] = protocol.Redact(err.Error())
	}
	writeJSON(w, http.StatusOK, body)
}

// cachedLeader reads the lease blob at most once a second.
type cachedLeader struct {
	read func(ctx context.Context) (*election.LeaderInfo, error)
	mu   sync.Mutex
	at   time.Time
	l    *election.LeaderInfo
	err  error
}

func (c *cachedLeader) get(ctx context.Context) (*election.LeaderInfo, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.at.IsZero() || time.Since(c.at) > time.Second {
		rctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		c.l, c.err = c.read(rctx)
		cancel()
		c.at = time.Now()
	}
	return c.l, c.err
}
