package observe

import (
	"context"
	"net/http"
	"sync"
	"time"

	"github.com/mapagg/mapagg/client"
	"github.com/mapagg/mapagg/internal/protocol"
)

// ScheduleLister is what the dashboard's schedules panel needs; *client.Client is one.
type ScheduleLister interface {
	Schedules(ctx context.Context) ([]client.ScheduleInfo, error)
}

var _ ScheduleLister = (*client.Client)(nil)

// cachedSchedules reads the schedule list at most every 2 s, however many dashboards poll.
type cachedSchedules struct {
	mu   sync.Mutex
	at   time.Time
	list []client.ScheduleInfo
	err  error
}

func (c *cachedSchedules) get(ctx context.Context, svc ScheduleLister) ([]client.ScheduleInfo, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.at.IsZero() && time.Since(c.at) < 2*time.Second {
		return c.list, c.err
	}
	rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	list, err := svc.Schedules(rctx)
	c.at, c.err = time.Now(), err
	if err == nil {
		c.list = list
	}
	return c.list, c.err
}

// scheduleList serves the dashboard's schedules panel: every schedule with its last job, next
// tick and whether it is paused. A failed read keeps the last list and says why.
func (s *Server) scheduleList(w http.ResponseWriter, r *http.Request) {
	b := s.attached(w)
	if b == nil {
		return
	}
	if b.Schedules == nil {
		writeJSON(w, http.StatusOK, map[string]any{"schedules": []client.ScheduleInfo{}, "error": "schedules are not available on this worker"})
		return
	}
	list, err := s.scheds.get(r.Context(), b.Schedules)
	if list == nil {
		list = []client.ScheduleInfo{}
	}
	body := map[string]any{"schedules": list}
	if err != nil {
		body["error"] = protocol.Redact(err.Error())
	}
	writeJSON(w, http.StatusOK, body)
}
