package api

import (
	"cmp"
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"time"

	"github.com/mapagg/mapagg/internal/protocol"
)

// Prefix is where the versioned HTTP API lives.
const Prefix = "/api/v1"

// callTimeout bounds one request's calls to storage (not an output stream: MaxOutputStream).
const callTimeout = 30 * time.Second

// Config configures the job API.
type Config struct {
	// Jobs serves /api/v1/jobs and the dashboard's actions; *client.Client is one. Required.
	Jobs JobService
	// Schedules serves /api/v1/schedules; *client.Client is one. Nil answers 503.
	Schedules ScheduleService
	// Token authorizes writes sent with "Authorization: Bearer <token>", compared in constant
	// time; it is an admin named AdminTokenName. Empty, with no Tokens: writes are refused.
	Token []byte
	// Tokens are named tokens with roles (--api-tokens-file, ParseTokens), beside Token.
	Tokens []Token
	// Audit records each accepted mutating call and serves GET /api/v1/audit. Nil: calls are
	// only logged, and the route answers 503.
	Audit AuditLog
	// Logs serves GET /api/v1/jobs/{id}/logs. Nil: the route answers 503.
	Logs JobLogReader
	// Why serves GET /api/v1/jobs/{id}/why (what a job waits for). Nil: the route answers 503.
	Why Explainer
	// DashboardCancel lets the dashboard's own page cancel, retry and delete jobs without the
	// token (POST /api/jobs/{id}/cancel, /retry, /delete with same-origin proof). Off by default.
	DashboardCancel bool
	// Logger logs each write; default slog.Default().
	Logger *slog.Logger
	// BodyTimeout bounds reading a request's body from its first byte: a body sent slowly is cut
	// off (the connection is closed). Default 10s.
	BodyTimeout time.Duration
	// Lists bounds the job listings (GET /api/v1/jobs) this worker runs at once; one that waits
	// ListWait for a turn is refused with 503 and Retry-After. Default 16.
	Lists int
	// ListWait is how long a listing waits for a turn. Default 100ms.
	ListWait time.Duration
	// ListTimeout bounds one listing; one that takes longer is answered 503 with Retry-After.
	// Default 900ms, so that a listing is answered or refused within a second.
	ListTimeout time.Duration
}

// withDefaults sets every zero field to its default.
func (c Config) withDefaults() Config {
	c.Logger = cmp.Or(c.Logger, slog.Default())
	c.BodyTimeout = cmp.Or(c.BodyTimeout, 10*time.Second)
	c.Lists = cmp.Or(c.Lists, 16)
	c.ListWait = cmp.Or(c.ListWait, 100*time.Millisecond)
	c.ListTimeout = cmp.Or(c.ListTimeout, 900*time.Millisecond)
	return c
}

// Validate reports every missing piece.
func (c Config) Validate() error {
	if c.Jobs == nil {
		return fmt.Errorf("%w: Jobs is required", ErrInvalidConfig)
	}
	if c.BodyTimeout < 0 || c.Lists < 0 || c.ListWait < 0 || c.ListTimeout < 0 {
		return fmt.Errorf("%w: BodyTimeout, Lists, ListWait and ListTimeout must not be negative (0 for the defaults)", ErrInvalidConfig)
	}
	return nil
}

// Server serves the job API. It is an http.Handler for the routes under /api/v1 and the
// dashboard's actions under /api/jobs/{id}/.
type Server struct {
	cfg   Config
	mux   *http.ServeMux
	lists gate
	whys  whyCache // recent answers of GET /jobs/{id}/why
}

var _ http.Handler = (*Server)(nil)

// New returns the API over cfg's services.
func New(cfg Config) (*Server, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	s := &Server{cfg: cfg, mux: http.NewServeMux(), lists: newGate(cfg.Lists, cfg.ListWait)}
	s.route(s.mux)
	return s, nil
}

// ServeHTTP serves one request.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) { s.serve(w, r) }

// route is one API endpoint; the OpenAPI test checks the document against this table.
type route struct {
	method, path string
	write        bool // needs the bearer token
	handle       func(s *Server, w http.ResponseWriter, r *http.Request)
}

var routes = []route{
	{"POST", Prefix + "/jobs", true, (*Server).submit},
	{"GET", Prefix + "/jobs", false, (*Server).list},
	{"GET", Prefix + "/jobs/{id}", false, (*Server).job},
	{"GET", Prefix + "/jobs/{id}/result", false, (*Server).result},
	{"GET", Prefix + "/jobs/{id}/output", false, (*Server).output},
	{"GET", Prefix + "/jobs/{id}/why", false, (*Server).why},
	{"POST", Prefix + "/jobs/{id}/cancel", true, (*Server).cancel},
	{"DELETE", Prefix + "/jobs/{id}", true, (*Server).delete},
	{"POST", Prefix + "/jobs/{id}/retry", true, (*Server).retry},
	{"GET", Prefix + "/schedules", false, (*Server).schedules},
	{"POST", Prefix + "/schedules", true, (*Server).addSchedule},
	{"GET", Prefix + "/schedules/{name}", false, (*Server).schedule},
	{"DELETE", Prefix + "/schedules/{name}", true, (*Server).deleteSchedule},
	{"POST", Prefix + "/schedules/{name}/pause", true, (*Server).pauseSchedule},
	{"POST", Prefix + "/schedules/{name}/resume", true, (*Server).resumeSchedule},
	{"POST", Prefix + "/schedules/{name}/trigger", true, (*Server).triggerSchedule},
}

//go:embed openapi.json
var openAPIDoc []byte

// route adds the API's routes and the dashboard's actions to mux.
func (s *Server) route(mux *http.ServeMux) {
	for _, rt := range routes {
		mux.HandleFunc(rt.method+" "+rt.path, func(w http.ResponseWriter, r *http.Request) {
			if rt.write && !s.authorized(w, r) {
				return
			}
			if id := r.PathValue("id"); id != "" {
				if err := protocol.CheckID(id); err != nil {
					writeErr(w, http.StatusBadRequest, err.Error())
					return
				}
			}
			if name := r.PathValue("name"); name != "" {
				if err := protocol.CheckScheduleName(name); err != nil {
					writeErr(w, http.StatusBadRequest, err.Error())
					return
				}
			}
			if r.ContentLength != 0 {
				// A body sent slowly holds a connection and a goroutine: cut it off. The
				// deadline ends with the body, so a slow answer is not cut (an output may
				// stream for long).
				rc := http.NewResponseController(w)
				if rc.SetReadDeadline(time.Now().Add(s.cfg.BodyTimeout)) == nil {
					r.Body = &timedBody{ReadCloser: r.Body, rc: rc}
				}
			}
			ctx, cancel := context.WithTimeout(r.Context(), callTimeout)
			defer cancel()
			rt.handle(s, w, r.WithContext(ctx))
		})
	}
	mux.HandleFunc("GET "+Prefix+"/openapi.json", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(openAPIDoc)
	})
	mux.HandleFunc("GET "+Prefix+"/", func(w http.ResponseWriter, r *http.Request) {
		writeErr(w, http.StatusNotFound, fmt.Sprintf("no API route %s %s: see %s/openapi.json", r.Method, protocol.Clip(r.URL.Path, 80), Prefix))
	})
	s.routeOps(mux)
	mux.HandleFunc("POST /api/jobs/{id}/cancel", s.dashboardCancel)
	mux.HandleFunc("POST /api/jobs/{id}/retry", func(w http.ResponseWriter, r *http.Request) {
		s.dashboardJob(w, r, "retrying", (*Server).retry)
	})
	mux.HandleFunc("POST /api/jobs/{id}/delete", func(w http.ResponseWriter, r *http.Request) {
		s.dashboardJob(w, r, "deleting", (*Server).delete)
	})
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

// timedBody clears the connection's read deadline once the body has been read to its end:
// afterwards the server's own read of the next request must not time out while the handler still
// works. A body that failed keeps it, so the server gives up the rest of it and closes.
type timedBody struct {
	io.ReadCloser
	rc   *http.ResponseController
	done bool
}

func (b *timedBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if errors.Is(err, io.EOF) && !b.done {
		b.done = true
		_ = b.rc.SetReadDeadline(time.Time{})
	}
	return n, err
}

// busy refuses a request for now: 503 with Retry-After, so a client backs off instead of
// piling on.
func busy(w http.ResponseWriter, msg string) {
	w.Header().Set("Retry-After", "1")
	writeErr(w, http.StatusServiceUnavailable, msg+"; retry after a second")
}

// gate admits a bounded number of callers at once; a caller that waits longer than wait for a
// turn is refused, so that under a flood every request is answered or refused quickly instead of
// queueing on storage.
type gate struct {
	slots chan struct{}
	wait  time.Duration
}

func newGate(n int, wait time.Duration) gate {
	return gate{slots: make(chan struct{}, n), wait: wait}
}

// enter takes a turn, or reports false after wait (or when ctx ends).
func (g gate) enter(ctx context.Context) (release func(), ok bool) {
	select {
	case g.slots <- struct{}{}:
		return func() { <-g.slots }, true
	default:
	}
	t := time.NewTimer(g.wait)
	defer t.Stop()
	select {
	case g.slots <- struct{}{}:
		return func() { <-g.slots }, true
	case <-t.C:
		return nil, false
	case <-ctx.Done():
		return nil, false
	}
}
