package api

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/mapagg/mapagg/client"
	"github.com/mapagg/mapagg/internal/audit"
	"github.com/mapagg/mapagg/internal/protocol"
)

// AuditLog keeps the audit trail; *audit.Log is one.
type AuditLog interface {
	Record(ctx context.Context, e audit.Entry) error
	List(ctx context.Context, f audit.Filter) (*audit.Page, error)
}

var _ AuditLog = (*audit.Log)(nil)

// auditTimeout bounds recording one entry after its call has been answered.
const auditTimeout = 10 * time.Second

// actor is who a mutating request acts as, set by authorize or dashboardAllowed.
type actor struct {
	mu      sync.Mutex
	name    string
	role    Role
	pattern string
}

func (a *actor) set(name string, role Role, pattern string) {
	if a == nil {
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	a.name, a.role, a.pattern = name, role, pattern
}

type actorKey struct{}

func actorOf(r *http.Request) *actor {
	a, _ := r.Context().Value(actorKey{}).(*actor)
	return a
}

// serve serves one request; an accepted mutating call (any method but GET and HEAD, answered
// below 400 by a caller authorize let in) is recorded in the audit trail after it is answered.
func (s *Server) serve(w http.ResponseWriter, r *http.Request) {
	if r.Method == http.MethodGet || r.Method == http.MethodHead {
		s.mux.ServeHTTP(w, r)
		return
	}
	a := &actor{}
	cw := &captureWriter{ResponseWriter: w}
	s.mux.ServeHTTP(cw, r.WithContext(context.WithValue(r.Context(), actorKey{}, a)))
	a.mu.Lock()
	name, role, pattern := a.name, a.role, a.pattern
	a.mu.Unlock()
	if name == "" || cw.code() >= 400 {
		return
	}
	e := audit.Entry{Actor: name, Action: auditAction(pattern), Status: cw.code(), Remote: r.RemoteAddr}
	if role != RoleNone {
		e.Role = role.String()
	}
	e.Job, e.Schedule = pathValues(pattern, r.URL.Path) // PathValue is the inner request's
	var resp struct{ ID, Name string }
	_ = json.Unmarshal(cw.body.Bytes(), &resp)
	switch {
	case e.Job == "" && protocol.CheckID(resp.ID) == nil:
		e.Job = resp.ID
	case resp.ID != "" && resp.ID != e.Job && protocol.CheckID(resp.ID) == nil:
		e.Created = resp.ID
	}
	if e.Schedule == "" && protocol.CheckScheduleName(resp.Name) == nil {
		e.Schedule = resp.Name
	}
	s.cfg.Logger.Info("api write", "actor", e.Actor, "action", e.Action, "job", e.Job, "created", e.Created, "schedule", e.Schedule, "remote", e.Remote)
	if s.cfg.Audit == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), auditTimeout)
	defer cancel()
	if err := s.cfg.Audit.Record(ctx, e); err != nil {
		s.cfg.Logger.Error("audit entry not recorded", "actor", e.Actor, "action", e.Action, "job", e.Job, "err", err)
	}
}

// pathValues reads {id} and {name} from path by pattern ("POST /api/v1/jobs/{id}/cancel").
func pathValues(pattern, path string) (id, name string) {
	_, p, _ := strings.Cut(pattern, " ")
	ps, xs := strings.Split(p, "/"), strings.Split(path, "/")
	if len(ps) != len(xs) {
		return "", ""
	}
	for i, seg := range ps {
		switch seg {
		case "{id}":
			id = xs[i]
		case "{name}":
			name = xs[i]
		}
	}
	return id, name
}

// auditAction names a write by its route.
func auditAction(pattern string) string {
	switch pattern {
	case "POST " + Prefix + "/jobs":
		return "job.submit"
	case "POST " + Prefix + "/jobs/{id}/cancel", "POST /api/jobs/{id}/cancel":
		return "job.cancel"
	case "POST " + Prefix + "/jobs/{id}/retry", "POST /api/jobs/{id}/retry":
		return "job.retry"
	case "DELETE " + Prefix + "/jobs/{id}", "POST /api/jobs/{id}/delete":
		return "job.delete"
	case "POST " + Prefix + "/schedules":
		return "schedule.add"
	case "DELETE " + Prefix + "/schedules/{name}":
		return "schedule.delete"
	}
	if rest, ok := strings.CutPrefix(pattern, "POST "+Prefix+"/schedules/{name}/"); ok {
		return "schedule." + rest
	}
	return pattern
}

// captureWriter keeps a response's status and its first bytes (the id a submit answers).
type captureWriter struct {
	http.ResponseWriter
	status int
	body   bytes.Buffer
}

func (c *captureWriter) WriteHeader(code int) {
	if c.status == 0 {
		c.status = code
	}
	c.ResponseWriter.WriteHeader(code)
}

func (c *captureWriter) Write(p []byte) (int, error) {
	if c.status == 0 {
		c.status = http.StatusOK
	}
	if room := 4096 - c.body.Len(); room > 0 {
		c.body.Write(p[:min(len(p), room)])
	}
	return c.ResponseWriter.Write(p)
}

func (c *captureWriter) code() int {
	if c.status == 0 {
		return http.StatusOK
	}
	return c.status
}

// Unwrap lets http.ResponseController reach the connection (flushes of a stream).
func (c *captureWriter) Unwrap() http.ResponseWriter { return c.ResponseWriter }

// opsRoutes are the routes of this file (each authorizes itself), for the OpenAPI test.
var opsRoutes = []string{"GET " + Prefix + "/audit", "GET " + Prefix + "/whoami", "GET " + Prefix + "/jobs/{id}/logs"}

// routeOps adds the routes of this file to mux.
func (s *Server) routeOps(mux *http.ServeMux) {
	mux.HandleFunc(opsRoutes[0], s.audit)
	mux.HandleFunc(opsRoutes[1], s.whoami)
	mux.HandleFunc(opsRoutes[2], s.logs)
}

// audit answers GET /api/v1/audit?limit=N&before=ID&job=ID&actor=NAME: the newest entries first.
func (s *Server) audit(w http.ResponseWriter, r *http.Request) {
	if _, ok := s.authorize(w, r, RoleRead); !ok {
		return
	}
	if s.cfg.Audit == nil {
		writeErr(w, http.StatusServiceUnavailable, "this worker keeps no audit trail")
		return
	}
	q := r.URL.Query()
	f := audit.Filter{Before: q.Get("before"), Job: q.Get("job"), Actor: q.Get("actor")}
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 1000 {
			writeErr(w, http.StatusBadRequest, "limit "+strconv.Quote(protocol.Clip(v, 20))+": want a number from 1 to 1000")
			return
		}
		f.Limit = n
	}
	ctx, cancel := context.WithTimeout(r.Context(), callTimeout)
	defer cancel()
	page, err := s.cfg.Audit.List(ctx, f)
	if errors.Is(err, client.ErrBadSpec) {
		writeErr(w, http.StatusBadRequest, err.Error())
		return
	}
	if err != nil {
		writeErr(w, http.StatusBadGateway, protocol.Redact(err.Error()))
		return
	}
	writeJSON(w, http.StatusOK, page)
}

// Whoami is the answer of GET /api/v1/whoami: the bearer token's name, its role and what it may
// do, so that a page shows only the actions its token may take.
type Whoami struct {
	Name string `json:"name"`
	Role string `json:"role"`
	// May lists the actions the role allows: submit, cancel, retry, delete, schedule.
	May []string `json:"may"`
}

func (s *Server) whoami(w http.ResponseWriter, r *http.Request) {
	tok, ok := s.authorize(w, r, RoleRead)
	if !ok {
		return
	}
	out := Whoami{Name: tok.Name, Role: tok.Role.String(), May: []string{}}
	if tok.Role >= RoleSubmit {
		out.May = append(out.May, "submit", "cancel", "retry", "schedule")
	}
	if tok.Role >= RoleAdmin {
		out.May = append(out.May, "delete", "schedule.delete")
	}
	writeJSON(w, http.StatusOK, out)
}
