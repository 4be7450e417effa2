package api

import (
	"context"
	"net/http"

	"github.com/mapagg/mapagg/internal/why"
)

// Explainer says what a job waits for; *why.Asker is one.
type Explainer interface {
	Explain(ctx context.Context, id string) (*why.Answer, error)
}

var _ Explainer = (*why.Asker)(nil)

// why answers GET /api/v1/jobs/{id}/why: what a queued, waiting or running job waits for (no
// reasons for an ended job). Open like the job's other reads.
func (s *Server) why(w http.ResponseWriter, r *http.Request) {
	if s.cfg.Why == nil {
		writeErr(w, http.StatusServiceUnavailable, "this worker cannot say why a job waits (no NATS connection)")
		return
	}
	ans, err := s.cfg.Why.Explain(r.Context(), r.PathValue("id"))
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, ans)
}
