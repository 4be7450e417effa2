package api

import (
	"cmp"
	"context"
	_ "embed"
	"encoding/json"
	"fmt"
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
	// DashboardCancel lets the dashboard's own page cancel, retry and delete jobs without the
	// token (POST /api/jobs/{id}/cancel, /retry, /delete with same-origin proof). Off by default.
	DashboardCancel bool
	// Logger logs each write; default slog.Default().
	Logger *slog.Logger
}

// Validate reports every missing piece.
func (c Config) Validate() error {
	if c.Jobs == nil {
		return fmt.Errorf("%w: Jobs is required", ErrInvalidConfig)
	}
	return nil
}

// Server serves the job API. It is an http.Handler for the routes under /api/v1 and the
// dashboard's actions under /api/jobs/{id}/.
type Server struct {
	cfg Config
	mux *http.ServeMux
}

var _ http.Handler = (*Server)(nil)

// New returns the API over cfg's services.
func New(cfg Config) (*Server, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg.Logger = cmp.Or(cfg.Logger, slog.Default())
	s := &Server{cfg: cfg, mux: http.NewServeMux()}
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
