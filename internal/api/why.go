package api

import (
	"context"
	"net/http"
	"sync"
	"time"

	"github.com/mapagg/mapagg/internal/why"
)

// Explainer says what a job waits for; *why.Asker is one.
type Explainer interface {
	Explain(ctx context.Context, id string) (*why.Answer, error)
}

var _ Explainer = (*why.Asker)(nil)

// whyTTL is how long an answer is served again: every open job page asks every 3 s, and each
// answer asks every worker.
const whyTTL = 2 * time.Second

// whyCache keeps recent answers by job id.
type whyCache struct {
	mu  sync.Mutex
	ans map[string]*why.Answer
}

func (c *whyCache) get(id string) *why.Answer {
	c.mu.Lock()
	defer c.mu.Unlock()
	if a := c.ans[id]; a != nil && time.Since(a.At) < whyTTL {
		return a
	}
	return nil
}

func (c *whyCache) put(a *why.Answer) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.ans == nil || len(c.ans) >= 256 {
		c.ans = map[string]*why.Answer{}
	}
	c.ans[a.Job] = a
}

// why answers GET /api/v1/jobs/{id}/why: what a queued, waiting or running job waits for (no
// reasons for an ended job). Open like the job's other reads.
func (s *Server) why(w http.ResponseWriter, r *http.Request) {
	if s.cfg.Why == nil {
		writeErr(w, http.StatusServiceUnavailable, "this worker cannot say why a job waits (no NATS connection)")
		return
	}
	id := r.PathValue("id")
	if a := s.whys.get(id); a != nil {
		writeJSON(w, http.StatusOK, a)
		return
	}
	ans, err := s.cfg.Why.Explain(r.Context(), id)
	if err != nil {
		writeError(w, err)
		return
	}
	s.whys.put(ans)
	writeJSON(w, http.StatusOK, ans)
}
