package api

import (
	"context"
	"errors"
	"net/http"
	"strconv"

	"github.com/mapagg/mapagg/client"
	"github.com/mapagg/mapagg/internal/joblog"
	"github.com/mapagg/mapagg/internal/protocol"
)

// JobLogReader reads a job's log; *joblog.Log is one.
type JobLogReader interface {
	Read(ctx context.Context, id string, offset int64, limit int) (*joblog.Page, error)
}

var _ JobLogReader = (*joblog.Log)(nil)

// logs answers GET /api/v1/jobs/{id}/logs?offset=N&limit=M: the job's log lines from byte
// offset N, and next, the offset to follow from. Open like the job's other reads.
func (s *Server) logs(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	if err := protocol.CheckID(id); err != nil {
		writeErr(w, http.StatusBadRequest, err.Error())
		return
	}
	if s.cfg.Logs == nil {
		writeErr(w, http.StatusServiceUnavailable, "this worker serves no job logs")
		return
	}
	q := r.URL.Query()
	var offset int64
	var limit int
	if v := q.Get("offset"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 0 {
			writeErr(w, http.StatusBadRequest, "offset "+strconv.Quote(protocol.Clip(v, 20))+": want 0 or the next of an earlier answer")
			return
		}
		offset = n
	}
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 10000 {
			writeErr(w, http.StatusBadRequest, "limit "+strconv.Quote(protocol.Clip(v, 20))+": want 1 to 10000")
			return
		}
		limit = n
	}
	ctx, cancel := context.WithTimeout(r.Context(), callTimeout)
	defer cancel()
	if _, err := s.cfg.Jobs.Status(ctx, id); err != nil {
		if errors.Is(err, client.ErrNoSuchJob) {
			writeErr(w, http.StatusNotFound, "no such job "+id)
			return
		}
		writeErr(w, http.StatusBadGateway, protocol.Redact(err.Error()))
		return
	}
	page, err := s.cfg.Logs.Read(ctx, id, offset, limit)
	if err != nil {
		writeErr(w, http.StatusBadGateway, protocol.Redact(err.Error()))
		return
	}
	writeJSON(w, http.StatusOK, page)
}
