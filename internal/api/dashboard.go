package api

import (
	"context"
	"net/http"

	"github.com/mapagg/mapagg/internal/protocol"
)

// dashboardCancel is the dashboard's cancel (dashboardAllowed): 200 {"cancelled": id}, or 400
// saying why not.
func (s *Server) dashboardCancel(w http.ResponseWriter, r *http.Request) {
	if !s.dashboardAllowed(w, r, "cancelling") {
		return
	}
	id := r.PathValue("id")
	if _, err := s.cfg.Jobs.Cancel(r.Context(), id); err != nil {
		writeErr(w, http.StatusBadRequest, protocol.Redact(err.Error()))
		return
	}
	s.cfg.Logger.Info("job cancelled from the dashboard", "job", id, "remote", r.RemoteAddr)
	writeJSON(w, http.StatusOK, map[string]string{"cancelled": id})
}

// dashboardJob runs the dashboard's retry or delete: the API's handle, under dashboardAllowed.
func (s *Server) dashboardJob(w http.ResponseWriter, r *http.Request, what string, handle func(*Server, http.ResponseWriter, *http.Request)) {
	if !s.dashboardAllowed(w, r, what) {
		return
	}
	if err := protocol.CheckID(r.PathValue("id")); err != nil {
		writeErr(w, http.StatusBadRequest, err.Error())
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), callTimeout)
	defer cancel()
	handle(s, w, r.WithContext(ctx))
}
