package observe

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/mapagg/mapagg/client"
	"github.com/mapagg/mapagg/internal/protocol"
	"github.com/mapagg/mapagg/jobs"
)

// APIPrefix is where the versioned HTTP API lives.
const APIPrefix = "/api/v1"

// MaxAPIBody bounds a request body: a spec at its limit plus room for the envelope.
const MaxAPIBody = jobs.MaxSpecBytes + 4<<10

// SubmitRequest is the body of POST /api/v1/jobs.
type SubmitRequest struct {
	Type   string          `json:"type"`
	Params json.RawMessage `json:"params,omitempty"`
	// After lists jobs this one waits for; Priority orders it against other jobs. The JobService
	// (client.Submit) checks every field; the API checks nothing again.
	After    []string `json:"after,omitempty"`
	Priority *int     `json:"priority,omitempty"`
}

// JobService is what the API does with jobs; node backs it with a client.Client.
type JobService interface {
	// Submit validates and writes a job; a refused job writes nothing.
	Submit(ctx context.Context, req SubmitRequest) (string, error)
	Status(ctx context.Context, id string) (*client.Status, error)
	Spec(ctx context.Context, id string) (*client.Spec, error)
	Query(ctx context.Context, f client.Filter) (*client.Page, error)
	Result(ctx context.Context, id string) (json.RawMessage, error)
	Cancel(ctx context.Context, id string) (*client.Status, error)
	// Delete removes an ended job and everything it left (client.ErrRunning: not ended).
	Delete(ctx context.Context, id string) error
	// Retry submits a failed or cancelled job again under a new id.
	Retry(ctx context.Context, id string) (string, error)
	// History reads a job's attempts and checkpoint, metadata only.
	History(ctx context.Context, id string) (*client.History, error)
}

// ErrRefused marks a request the JobService refuses as malformed (HTTP 400).
var ErrRefused = errors.New("refused")

// route is one API endpoint; the OpenAPI test checks the document against this table.
type route struct {
	method, path string
	write        bool // needs the bearer token
	handle       func(s *Server, w http.ResponseWriter, r *http.Request, api JobService)
}

var apiRoutes = []route{
	{"POST", APIPrefix + "/jobs", true, (*Server).apiSubmit},
	{"GET", APIPrefix + "/jobs", false, (*Server).apiList},
	{"GET", APIPrefix + "/jobs/{id}", false, (*Server).apiJob},
	{"GET", APIPrefix + "/jobs/{id}/result", false, (*Server).apiResult},
	{"GET", APIPrefix + "/jobs/{id}/output", false, (*Server).apiOutput},
	{"POST", APIPrefix + "/jobs/{id}/cancel", true, (*Server).apiCancel},
	{"DELETE", APIPrefix + "/jobs/{id}", true, (*Server).apiDelete},
	{"POST", APIPrefix + "/jobs/{id}/retry", true, (*Server).apiRetry},
	{"GET", APIPrefix + "/schedules", false, (*Server).apiSchedules},
	{"POST", APIPrefix + "/schedules", true, (*Server).apiAddSchedule},
	{"GET", APIPrefix + "/schedules/{name}", false, (*Server).apiSchedule},
	{"DELETE", APIPrefix + "/schedules/{name}", true, (*Server).apiDeleteSchedule},
	{"POST", APIPrefix + "/schedules/{name}/pause", true, (*Server).apiPauseSchedule},
	{"POST", APIPrefix + "/schedules/{name}/resume", true, (*Server).apiResumeSchedule},
	{"POST", APIPrefix + "/schedules/{name}/trigger", true, (*Server).apiTriggerSchedule},
}

//go:embed openapi.json
var openAPIDoc []byte

// routeAPI adds the API's routes to mux.
func (s *Server) routeAPI(mux *http.ServeMux) {
	for _, rt := range apiRoutes {
		mux.HandleFunc(rt.method+" "+rt.path, func(w http.ResponseWriter, r *http.Request) {
			if rt.write && !s.authorized(w, r) {
				return
			}
			api := s.jobAPI(w)
			if api == nil {
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
			s.handleAPI(rt, w, r, api)
		})
	}
	mux.HandleFunc("GET "+APIPrefix+"/openapi.json", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(openAPIDoc)
	})
	mux.HandleFunc("GET "+APIPrefix+"/", func(w http.ResponseWriter, r *http.Request) {
		writeErr(w, http.StatusNotFound, fmt.Sprintf("no API route %s %s: see %s/openapi.json", r.Method, protocol.Clip(r.URL.Path, 80), APIPrefix))
	})
}

// handleAPI runs one route under a time bound.
func (s *Server) handleAPI(rt route, w http.ResponseWriter, r *http.Request, api JobService) {
	ctx, cancel := context.WithTimeout(r.Context(), 30*time.Second)
	defer cancel()
	rt.handle(s, w, r.WithContext(ctx), api)
}

// authorized checks the bearer token of a write, answering 401 or 403 when it fails.
func (s *Server) authorized(w http.ResponseWriter, r *http.Request) bool {
	if len(s.cfg.APIToken) == 0 {
		writeErr(w, http.StatusForbidden, "writes are disabled on this worker: start it with --api-token-file FILE (env API_TOKEN_FILE), "+
			"FILE holding a secret token, and send the header Authorization: Bearer <token>")
		return false
	}
	got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if !ok {
		w.Header().Set("WWW-Authenticate", `Bearer realm="mapagg"`)
		writeErr(w, http.StatusUnauthorized, "this request changes state: send the header Authorization: Bearer <token>, the token in the worker's --api-token-file")
		return false
	}
	if !s.tokenMatches(strings.TrimSpace(got)) {
		w.Header().Set("WWW-Authenticate", `Bearer realm="mapagg", error="invalid_token"`)
		writeErr(w, http.StatusUnauthorized, "the bearer token does not match the one in the worker's --api-token-file (API_TOKEN_FILE)")
		return false
	}
	return true
}

// tokenMatches compares in constant time; hashing first hides the token's length too.
func (s *Server) tokenMatches(got string) bool {
	if len(s.cfg.APIToken) == 0 {
		return false
	}
	a, b := sha256.Sum256([]byte(got)), sha256.Sum256(s.cfg.APIToken)
	return subtle.ConstantTimeCompare(a[:], b[:]) == 1
}

// apiError answers err with the status its kind calls for.
func apiError(w http.ResponseWriter, err error) {
	body := map[string]string{"error": Redact(err.Error())}
	var pe *jobs.ParamError
	var fe *protocol.FieldError
	switch {
	case errors.As(err, &pe) && pe.Field != "":
		body["field"] = pe.Field
	case errors.As(err, &fe):
		body["field"] = fe.Field
	}
	code := http.StatusServiceUnavailable
	switch {
	case errors.Is(err, client.ErrNoSuchJob), errors.Is(err, client.ErrNoSuchSchedule):
		code = http.StatusNotFound
	case client.Refused(err), errors.Is(err, protocol.ErrBadSchedule), errors.Is(err, ErrRefused):
		code = http.StatusBadRequest
	case errors.Is(err, client.ErrNotFinished), errors.Is(err, client.ErrRunning), errors.Is(err, client.ErrScheduleExists):
		code = http.StatusConflict
	case errors.Is(err, context.DeadlineExceeded):
		code = http.StatusGatewayTimeout
	}
	writeJSON(w, code, body)
}

func (s *Server) apiSubmit(w http.ResponseWriter, r *http.Request, api JobService) {
	// Any Content-Type (curl -d sends a form type): the body must be JSON all the same.
	var req SubmitRequest
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, MaxAPIBody))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			writeErr(w, http.StatusRequestEntityTooLarge, fmt.Sprintf("body over %d bytes", MaxAPIBody))
			return
		}
		writeErr(w, http.StatusBadRequest, "body: "+decodeMessage(err)+`; want {"type": "...", "params": {...}}`)
		return
	}
	if dec.More() {
		writeErr(w, http.StatusBadRequest, "body: one JSON object expected, found more")
		return
	}
	id, err := api.Submit(r.Context(), req)
	if err != nil {
		apiError(w, err)
		return
	}
	s.cfg.Logger.Info("job submitted over the API", "job", id, "type", req.Type, "remote", r.RemoteAddr)
	w.Header().Set("Location", APIPrefix+"/jobs/"+id)
	writeJSON(w, http.StatusCreated, map[string]string{"id": id})
}

// decodeMessage says what is wrong with a body, without echoing it.
func decodeMessage(err error) string {
	var se *json.SyntaxError
	var te *json.UnmarshalTypeError
	switch {
	case errors.Is(err, io.EOF):
		return "empty"
	case errors.Is(err, io.ErrUnexpectedEOF):
		return "not valid JSON (it ends early)"
	case errors.As(err, &se):
		return fmt.Sprintf("not valid JSON (at byte %d)", se.Offset)
	case errors.As(err, &te):
		return fmt.Sprintf("field %q must be %s, not %s", te.Field, te.Type, te.Value)
	default:
		return protocol.Clip(err.Error(), 120)
	}
}

// JobJSON is a job as the API returns it.
type JobJSON struct {
	client.Status
	// Params are the job's parameters (GET /api/v1/jobs/{id} only).
	Params json.RawMessage `json:"params,omitempty"`
	// ResultURL is where the result is, once the job succeeded.
	ResultURL string `json:"result_url,omitempty"`
	// Attempts (the job and its retries, oldest first) and Checkpoint: GET /api/v1/jobs/{id}
	// only, read as metadata.
	Attempts   []client.Attempt       `json:"attempts,omitempty"`
	Checkpoint *client.CheckpointInfo `json:"checkpoint,omitempty"`
}

func jobJSON(st client.Status) JobJSON {
	j := JobJSON{Status: st}
	if st.State == jobs.StateSucceeded {
		j.ResultURL = APIPrefix + "/jobs/" + st.ID + "/result"
	}
	return j
}

func (s *Server) apiList(w http.ResponseWriter, r *http.Request, api JobService) {
	f, err := parseFilter(r)
	if err != nil {
		writeErr(w, http.StatusBadRequest, err.Error())
		return
	}
	page, err := api.Query(r.Context(), f)
	if err != nil {
		apiError(w, err)
		return
	}
	out := struct {
		Jobs []JobJSON `json:"jobs"`
		Next string    `json:"next,omitempty"`
	}{Jobs: make([]JobJSON, 0, len(page.Jobs))}
	for _, st := range page.Jobs {
		out.Jobs = append(out.Jobs, jobJSON(st))
	}
	if page.Next != "" {
		q := r.URL.Query()
		q.Set("before", page.Next)
		out.Next = APIPrefix + "/jobs?" + q.Encode()
	}
	writeJSON(w, http.StatusOK, out)
}

// parseFilter reads ?state=&type=&since=&before=&limit=. since is RFC 3339 or a duration back
// from now (e.g. 1h).
func parseFilter(r *http.Request) (client.Filter, error) {
	q := r.URL.Query()
	for k := range q {
		switch k {
		case "state", "type", "since", "before", "limit":
		default:
			return client.Filter{}, fmt.Errorf("unknown query parameter %q: use state, type, since, before or limit", protocol.Clip(k, 32))
		}
	}
	f := client.Filter{State: jobs.State(q.Get("state")), Type: q.Get("type"), Before: q.Get("before")}
	var errs []error
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil {
			errs = append(errs, fmt.Errorf("limit %q: want a whole number", protocol.Clip(v, 32)))
		}
		f.Limit = n
	}
	if v := q.Get("since"); v != "" {
		t, err := ParseSince(v, time.Now())
		if err != nil {
			errs = append(errs, err)
		}
		f.Since = t
	}
	if err := f.Check(); err != nil {
		errs = append(errs, err)
	}
	return f, errors.Join(errs...)
}

// ParseSince reads a time given as RFC 3339 or as a duration before now (e.g. 90m).
func ParseSince(v string, now time.Time) (time.Time, error) {
	if t, err := time.Parse(time.RFC3339, v); err == nil {
		return t, nil
	}
	if d, err := time.ParseDuration(v); err == nil && d >= 0 {
		return now.Add(-d), nil
	}
	return time.Time{}, fmt.Errorf("since %q: give a time (2026-11-21T12:00:00Z) or a duration back from now (90m)", protocol.Clip(v, 40))
}

func (s *Server) apiJob(w http.ResponseWriter, r *http.Request, api JobService) {
	st, err := api.Status(r.Context(), r.PathValue("id"))
	if err != nil {
		apiError(w, err)
		return
	}
	j := jobJSON(*st)
	if spec, err := api.Spec(r.Context(), st.ID); err == nil {
		j.Params = spec.Params
	}
	if h, err := api.History(r.Context(), st.ID); err == nil {
		j.Attempts, j.Checkpoint = h.Attempts, h.Checkpoint
	}
	writeJSON(w, http.StatusOK, j)
}

func (s *Server) apiResult(w http.ResponseWriter, r *http.Request, api JobService) {
	id := r.PathValue("id")
	st, err := api.Status(r.Context(), id)
	if err != nil {
		apiError(w, err)
		return
	}
	if st.State != jobs.StateSucceeded {
		msg := fmt.Sprintf("job %s is %s (%d of %d shards done): no result yet", id, st.State, st.ShardsDone, st.ShardsTotal)
		if st.State.Terminal() || st.State == client.StateUnreadable {
			msg = fmt.Sprintf("job %s %s: %s", id, st.State, st.Error+st.Unreadable)
		}
		writeJSON(w, http.StatusConflict, map[string]any{"error": Redact(msg), "state": st.State})
		return
	}
	res, err := api.Result(r.Context(), id)
	if err != nil {
		apiError(w, err)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	_, _ = w.Write(append(res, '\n'))
}

func (s *Server) apiCancel(w http.ResponseWriter, r *http.Request, api JobService) {
	id := r.PathValue("id")
	st, err := api.Status(r.Context(), id)
	if err != nil {
		apiError(w, err)
		return
	}
	if st.State.Terminal() {
		writeJSON(w, http.StatusConflict, map[string]any{"error": fmt.Sprintf("job %s has already %s", id, st.State), "state": st.State})
		return
	}
	if _, err := api.Cancel(r.Context(), id); err != nil {
		apiError(w, err)
		return
	}
	s.cfg.Logger.Info("job cancel requested over the API", "job", id, "remote", r.RemoteAddr)
	writeJSON(w, http.StatusAccepted, map[string]string{"id": id, "cancel": "requested"})
}

func (s *Server) apiRetry(w http.ResponseWriter, r *http.Request, api JobService) {
	id := r.PathValue("id")
	st, err := api.Status(r.Context(), id)
	if err != nil {
		apiError(w, err)
		return
	}
	if st.State != jobs.StateFailed && st.State != jobs.StateCancelled {
		writeJSON(w, http.StatusConflict, map[string]any{"error": fmt.Sprintf("job %s is %s: only a failed or cancelled job can be retried", id, st.State), "state": st.State})
		return
	}
	nid, err := api.Retry(r.Context(), id)
	if err != nil {
		apiError(w, err)
		return
	}
	s.cfg.Logger.Info("job retried over the API", "job", id, "retry", nid, "remote", r.RemoteAddr)
	w.Header().Set("Location", APIPrefix+"/jobs/"+nid)
	writeJSON(w, http.StatusCreated, map[string]string{"id": nid, "retry_of": id})
}

func (s *Server) apiDelete(w http.ResponseWriter, r *http.Request, api JobService) {
	id := r.PathValue("id")
	if err := api.Delete(r.Context(), id); err != nil {
		apiError(w, err)
		return
	}
	s.cfg.Logger.Info("job deleted over the API", "job", id, "remote", r.RemoteAddr)
	writeJSON(w, http.StatusOK, map[string]any{"id": id, "deleted": true})
}
