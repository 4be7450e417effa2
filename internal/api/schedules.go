package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/mapagg/mapagg/client"
)

// ScheduleService is what the API does with schedules; *client.Client is one.
type ScheduleService interface {
	Schedules(ctx context.Context) ([]client.ScheduleInfo, error)
	Schedule(ctx context.Context, name string) (*client.ScheduleInfo, error)
	// AddSchedule validates the schedule and its job; a refused one writes nothing.
	AddSchedule(ctx context.Context, name string, o client.ScheduleOptions) (*client.ScheduleInfo, error)
	PauseSchedule(ctx context.Context, name string) error
	ResumeSchedule(ctx context.Context, name string) error
	// DeleteSchedule returns the deleted schedule with its final counts.
	DeleteSchedule(ctx context.Context, name string) (*client.ScheduleInfo, error)
	TriggerSchedule(ctx context.Context, name string) (string, error)
}

var _ ScheduleService = (*client.Client)(nil)

// ScheduleRequest is the body of POST /api/v1/schedules: the flags of `worker schedule add`.
type ScheduleRequest struct {
	Name     string          `json:"name"`
	Every    string          `json:"every,omitempty"` // a Go duration, e.g. "30s"
	Cron     string          `json:"cron,omitempty"`  // "m h dom mon dow"
	TimeZone string          `json:"time_zone,omitempty"`
	Type     string          `json:"type"`
	Params   json.RawMessage `json:"params,omitempty"`
	Overlap  string          `json:"overlap,omitempty"`  // skip (default), queue or allow
	CatchUp  string          `json:"catch_up,omitempty"` // a Go duration, default 5m
	// Then makes each tick a chain: these jobs follow, each after the previous ("$prev" in its
	// params is the previous job's id).
	Then []client.ChainStep `json:"then,omitempty"`
}

// maxScheduleBody bounds POST /api/v1/schedules, as a job's body is bounded.
const maxScheduleBody = MaxBody

// scheduleService returns the schedule service, or answers 503 and returns nil.
func (s *Server) scheduleService(w http.ResponseWriter) ScheduleService {
	if s.cfg.Schedules != nil {
		return s.cfg.Schedules
	}
	writeErr(w, http.StatusServiceUnavailable, "the schedule API is not available on this worker")
	return nil
}

func (s *Server) schedules(w http.ResponseWriter, r *http.Request) {
	svc := s.scheduleService(w)
	if svc == nil {
		return
	}
	list, err := svc.Schedules(r.Context())
	if err != nil {
		writeError(w, err)
		return
	}
	if list == nil {
		list = []client.ScheduleInfo{}
	}
	writeJSON(w, http.StatusOK, map[string]any{"schedules": list})
}

func (s *Server) schedule(w http.ResponseWriter, r *http.Request) {
	svc := s.scheduleService(w)
	if svc == nil {
		return
	}
	info, err := svc.Schedule(r.Context(), r.PathValue("name"))
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, info)
}

func (s *Server) addSchedule(w http.ResponseWriter, r *http.Request) {
	svc := s.scheduleService(w)
	if svc == nil {
		return
	}
	var req ScheduleRequest
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxScheduleBody))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			writeErr(w, http.StatusRequestEntityTooLarge, fmt.Sprintf("body over %d bytes", maxScheduleBody))
			return
		}
		writeErr(w, http.StatusBadRequest, "body: "+decodeMessage(err)+`; want {"name": "...", "every": "1h" or "cron": "...", "type": "...", "params": {...}}`)
		return
	}
	if dec.More() {
		writeErr(w, http.StatusBadRequest, "body: one JSON object expected, found more")
		return
	}
	o, field, err := req.options()
	if err != nil {
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": err.Error(), "field": field})
		return
	}
	info, err := svc.AddSchedule(r.Context(), req.Name, o)
	if err != nil {
		writeError(w, err)
		return
	}
	s.cfg.Logger.Info("schedule added over the API", "schedule", info.Name, "type", info.Type, "remote", r.RemoteAddr)
	w.Header().Set("Location", Prefix+"/schedules/"+info.Name)
	writeJSON(w, http.StatusCreated, info)
}

// options checks what the request must say and converts it; field names a bad field.
func (req ScheduleRequest) options() (client.ScheduleOptions, string, error) {
	o := client.ScheduleOptions{Cron: req.Cron, TimeZone: req.TimeZone, Type: req.Type, Params: req.Params, Overlap: req.Overlap, Then: req.Then}
	switch {
	case req.Name == "":
		return o, "name", errors.New(`"name" is required: a-z, 0-9 and '-'`)
	case req.Type == "":
		return o, "type", errors.New(`"type" is required: a job type the cluster runs`)
	case (req.Every == "") == (req.Cron == ""):
		return o, "every", errors.New(`give one of "every" (a duration, e.g. "30s") or "cron" ("m h dom mon dow")`)
	}
	if req.Every != "" {
		d, err := time.ParseDuration(req.Every)
		if err != nil || d <= 0 {
			return o, "every", fmt.Errorf(`"every" %q: want a duration such as "30s" or "1h"`, req.Every)
		}
		o.Every = d
	}
	if req.CatchUp != "" {
		d, err := time.ParseDuration(req.CatchUp)
		if err != nil || d <= 0 {
			return o, "catch_up", fmt.Errorf(`"catch_up" %q: want a duration such as "5m"`, req.CatchUp)
		}
		o.CatchUp = d
	}
	return o, "", nil
}

// deleteSchedule answers the deleted schedule with its final counts (fired + skipped + missed
// are its due ticks through last_tick), and "deleted": true.
func (s *Server) deleteSchedule(w http.ResponseWriter, r *http.Request) {
	svc := s.scheduleService(w)
	if svc == nil {
		return
	}
	name := r.PathValue("name")
	info, err := svc.DeleteSchedule(r.Context(), name)
	if err != nil {
		writeError(w, err)
		return
	}
	s.cfg.Logger.Info("schedule deleted over the API", "schedule", name, "remote", r.RemoteAddr)
	writeJSON(w, http.StatusOK, struct {
		*client.ScheduleInfo
		Deleted bool `json:"deleted"`
	}{info, true})
}

func (s *Server) pauseSchedule(w http.ResponseWriter, r *http.Request) {
	s.scheduleAction(w, r, "paused", func(ctx context.Context, svc ScheduleService, name string) error {
		return svc.PauseSchedule(ctx, name)
	})
}

func (s *Server) resumeSchedule(w http.ResponseWriter, r *http.Request) {
	s.scheduleAction(w, r, "resumed", func(ctx context.Context, svc ScheduleService, name string) error {
		return svc.ResumeSchedule(ctx, name)
	})
}

// scheduleAction runs one change of schedule {name} and answers 200 with the schedule's name.
func (s *Server) scheduleAction(w http.ResponseWriter, r *http.Request, done string, act func(context.Context, ScheduleService, string) error) {
	svc := s.scheduleService(w)
	if svc == nil {
		return
	}
	name := r.PathValue("name")
	if err := act(r.Context(), svc, name); err != nil {
		writeError(w, err)
		return
	}
	s.cfg.Logger.Info("schedule "+done+" over the API", "schedule", name, "remote", r.RemoteAddr)
	writeJSON(w, http.StatusOK, map[string]any{"name": name, done: true})
}

func (s *Server) triggerSchedule(w http.ResponseWriter, r *http.Request) {
	svc := s.scheduleService(w)
	if svc == nil {
		return
	}
	name := r.PathValue("name")
	id, err := svc.TriggerSchedule(r.Context(), name)
	if err != nil {
		writeError(w, err)
		return
	}
	s.cfg.Logger.Info("schedule triggered over the API", "schedule", name, "job", id, "remote", r.RemoteAddr)
	w.Header().Set("Location", Prefix+"/jobs/"+id)
	writeJSON(w, http.StatusCreated, map[string]string{"id": id, "schedule": name})
}
