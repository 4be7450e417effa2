package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"time"

	"github.com/mapagg/mapagg/client"
	"github.com/mapagg/mapagg/internal/protocol"
	"github.com/mapagg/mapagg/jobs"
)

// MaxBody bounds a request body: a spec at its limit plus room for the envelope.
const MaxBody = jobs.MaxSpecBytes + 4<<10

// IdempotencyKeyHeader makes POST /api/v1/jobs safe to repeat: every submit with the same key
// (1 to 255 printable ASCII characters) within a day answers the first one's job id and creates
// nothing (client.WithIdempotencyKey). A repeat asking for another job gets 422.
const IdempotencyKeyHeader = "Idempotency-Key"

// SubmitRequest is the body of POST /api/v1/jobs.
type SubmitRequest struct {
	Type   string          `json:"type"`
	Params json.RawMessage `json:"params,omitempty"`
	// After lists jobs this one waits for; Priority orders it against other jobs; OutputFormat
	// is how a keyed job stores its output blobs (client.WithOutputFormat). The JobService
	// (client.Submit) checks every field; the API checks nothing again.
	After        []string `json:"after,omitempty"`
	Priority     *int     `json:"priority,omitempty"`
	OutputFormat string   `json:"output_format,omitempty"`
}

// options are the request's fields that client.Submit takes as options.
func (req SubmitRequest) options() []client.SubmitOption {
	var opts []client.SubmitOption
	if len(req.After) > 0 {
		opts = append(opts, client.WithAfter(req.After...))
	}
	if p := req.Priority; p != nil {
		opts = append(opts, client.WithPriority(*p)) // Submit checks its range
	}
	if req.OutputFormat != "" {
		opts = append(opts, client.WithOutputFormat(req.OutputFormat)) // Submit checks it
	}
	return opts
}

// JobService is what the API does with jobs; *client.Client is one.
type JobService interface {
	// Submit validates and writes a job; a refused job writes nothing (client.Refused).
	Submit(ctx context.Context, typ string, params json.RawMessage, opts ...client.SubmitOption) (string, error)
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

var _ JobService = (*client.Client)(nil)

// TimelineService is the optional part of a JobService that reads a job's moments from
// storage; *client.Client has it.
type TimelineService interface {
	Timeline(ctx context.Context, st *client.Status) []client.Mark
}

var _ TimelineService = (*client.Client)(nil)

func (s *Server) submit(w http.ResponseWriter, r *http.Request) {
	// Any Content-Type (curl -d sends a form type): the body must be JSON all the same.
	var req SubmitRequest
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, MaxBody))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			writeErr(w, http.StatusRequestEntityTooLarge, fmt.Sprintf("body over %d bytes", MaxBody))
			return
		}
		writeErr(w, http.StatusBadRequest, "body: "+decodeMessage(err)+`; want {"type": "...", "params": {...}}`)
		return
	}
	if dec.More() {
		writeErr(w, http.StatusBadRequest, "body: one JSON object expected, found more")
		return
	}
	opts := req.options()
	key := r.Header.Get(IdempotencyKeyHeader)
	if key != "" {
		opts = append(opts, client.WithIdempotencyKey(key)) // Submit checks it
	}
	id, err := s.cfg.Jobs.Submit(r.Context(), req.Type, req.Params, opts...)
	if errors.Is(err, client.ErrKeyReused) {
		writeErr(w, http.StatusUnprocessableEntity, protocol.Redact(err.Error()))
		return
	}
	if err != nil {
		writeError(w, err)
		return
	}
	s.cfg.Logger.Info("job submitted over the API", "job", id, "type", req.Type, "remote", r.RemoteAddr, "idempotency_key", key != "")
	w.Header().Set("Location", Prefix+"/jobs/"+id)
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
	// OutputURL streams a succeeded keyed job's output records (GET /api/v1/jobs/{id} only).
	OutputURL string `json:"output_url,omitempty"`
	// Timeline holds the moments of the job that storage keeps (GET /api/v1/jobs/{id} only).
	Timeline []client.Mark `json:"timeline,omitempty"`
	// Attempts (the job and its retries, oldest first) and Checkpoint: GET /api/v1/jobs/{id}
	// only, read as metadata.
	Attempts   []client.Attempt       `json:"attempts,omitempty"`
	Checkpoint *client.CheckpointInfo `json:"checkpoint,omitempty"`
}

func jobJSON(st client.Status) JobJSON {
	j := JobJSON{Status: st}
	if st.State == jobs.StateSucceeded {
		j.ResultURL = Prefix + "/jobs/" + st.ID + "/result"
	}
	return j
}

func (s *Server) list(w http.ResponseWriter, r *http.Request) {
	f, err := parseFilter(r)
	if err != nil {
		writeErr(w, http.StatusBadRequest, err.Error())
		return
	}
	release, ok := s.lists.enter(r.Context())
	if !ok {
		busy(w, "too many job listings at once on this worker")
		return
	}
	// The listing runs on its own goroutine, which keeps its turn until it returns: the answer
	// goes out at the deadline even when storage is slow to give the listing up.
	ctx, cancel := context.WithTimeout(r.Context(), s.cfg.ListTimeout)
	defer cancel()
	type listed struct {
		page *client.Page
		err  error
	}
	done := make(chan listed, 1)
	go func() {
		defer release()
		page, err := s.cfg.Jobs.Query(ctx, f)
		done <- listed{page, err}
	}()
	var page *client.Page
	select {
	case x := <-done:
		page, err = x.page, x.err
	case <-ctx.Done():
		err = ctx.Err()
	}
	if err != nil && ctx.Err() != nil && r.Context().Err() == nil {
		busy(w, fmt.Sprintf("the job listing did not finish within %v", s.cfg.ListTimeout))
		return
	}
	if err != nil {
		writeError(w, err)
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
		out.Next = Prefix + "/jobs?" + q.Encode()
	}
	writeJSON(w, http.StatusOK, out)
}

// parseFilter reads ?state=&type=&since=&before=&limit=&prefix=. since is RFC 3339 or a duration back
// from now (e.g. 1h).
func parseFilter(r *http.Request) (client.Filter, error) {
	q := r.URL.Query()
	for k := range q {
		switch k {
		case "state", "type", "since", "before", "limit", "prefix":
		default:
			return client.Filter{}, fmt.Errorf("unknown query parameter %q: use state, type, since, before, limit or prefix", protocol.Clip(k, 32))
		}
	}
	f := client.Filter{State: jobs.State(q.Get("state")), Type: q.Get("type"), Before: q.Get("before"), Prefix: q.Get("prefix")}
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

func (s *Server) job(w http.ResponseWriter, r *http.Request) {
	st, err := s.cfg.Jobs.Status(r.Context(), r.PathValue("id"))
	if err != nil {
		writeError(w, err)
		return
	}
	j := jobJSON(*st)
	if spec, err := s.cfg.Jobs.Spec(r.Context(), st.ID); err == nil {
		j.Params = spec.Params
	}
	if h, err := s.cfg.Jobs.History(r.Context(), st.ID); err == nil {
		j.Attempts, j.Checkpoint = h.Attempts, h.Checkpoint
	}
	if st.Phase != "" && st.State == jobs.StateSucceeded {
		j.OutputURL = Prefix + "/jobs/" + st.ID + "/output"
	}
	if tl, ok := s.cfg.Jobs.(TimelineService); ok {
		j.Timeline = tl.Timeline(r.Context(), st)
	}
	writeJSON(w, http.StatusOK, j)
}

func (s *Server) result(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	st, err := s.cfg.Jobs.Status(r.Context(), id)
	if err != nil {
		writeError(w, err)
		return
	}
	if st.State != jobs.StateSucceeded {
		msg := fmt.Sprintf("job %s is %s (%d of %d shards done): no result yet", id, st.State, st.ShardsDone, st.ShardsTotal)
		if st.State.Terminal() || st.State == client.StateUnreadable {
			msg = fmt.Sprintf("job %s %s: %s", id, st.State, st.Error+st.Unreadable)
		}
		writeJSON(w, http.StatusConflict, map[string]any{"error": protocol.Redact(msg), "state": st.State})
		return
	}
	res, err := s.cfg.Jobs.Result(r.Context(), id)
	if err != nil {
		writeError(w, err)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	_, _ = w.Write(append(res, '\n'))
}

func (s *Server) cancel(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	st, err := s.cfg.Jobs.Status(r.Context(), id)
	if err != nil {
		writeError(w, err)
		return
	}
	if st.State.Terminal() {
		writeJSON(w, http.StatusConflict, map[string]any{"error": fmt.Sprintf("job %s has already %s", id, st.State), "state": st.State})
		return
	}
	if _, err := s.cfg.Jobs.Cancel(r.Context(), id); err != nil {
		writeError(w, err)
		return
	}
	s.cfg.Logger.Info("job cancel requested over the API", "job", id, "remote", r.RemoteAddr)
	writeJSON(w, http.StatusAccepted, map[string]string{"id": id, "cancel": "requested"})
}

func (s *Server) retry(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	st, err := s.cfg.Jobs.Status(r.Context(), id)
	if err != nil {
		writeError(w, err)
		return
	}
	if st.State != jobs.StateFailed && st.State != jobs.StateCancelled {
		writeJSON(w, http.StatusConflict, map[string]any{"error": fmt.Sprintf("job %s is %s: only a failed or cancelled job can be retried", id, st.State), "state": st.State})
		return
	}
	nid, err := s.cfg.Jobs.Retry(r.Context(), id)
	if err != nil {
		writeError(w, err)
		return
	}
	s.cfg.Logger.Info("job retried over the API", "job", id, "retry", nid, "remote", r.RemoteAddr)
	w.Header().Set("Location", Prefix+"/jobs/"+nid)
	writeJSON(w, http.StatusCreated, map[string]string{"id": nid, "retry_of": id})
}

func (s *Server) delete(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	if err := s.cfg.Jobs.Delete(r.Context(), id); err != nil {
		writeError(w, err)
		return
	}
	s.cfg.Logger.Info("job deleted over the API", "job", id, "remote", r.RemoteAddr)
	writeJSON(w, http.StatusOK, map[string]any{"id": id, "deleted": true})
}
