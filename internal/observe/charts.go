package observe

import (
	"context"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/mapagg/mapagg/client"
	"github.com/mapagg/mapagg/internal/protocol"
)

// The charts' window and resolution: the last hour, a minute a point.
const (
	chartWindow = time.Hour
	chartStep   = time.Minute
	// chartLookBack is how far back jobs are read: a job submitted before the hour may have run
	// in it. Older jobs still running are not counted.
	chartLookBack = 3 * time.Hour
	chartTTL      = 10 * time.Second
)

// ChartsView is the body of /api/charts: the cluster's last hour from the jobs' status records,
// the same whichever worker answers and whenever the page opened.
type ChartsView struct {
	From time.Time `json:"from"`
	To   time.Time `json:"to"`
	Step int       `json:"step_seconds"`
	// ShardsPerSecond has one value a step from From: the shards (a keyed job's tasks) done a
	// second, each job's done shards spread evenly over its run (started to finished, or to
	// its last update while it runs).
	ShardsPerSecond []float64 `json:"shards_per_second"`
	// Jobs are the jobs that ended in the window, oldest first, with their latency.
	Jobs []JobLatency `json:"jobs"`
	// Partial: more jobs than one read holds (client.MaxQueryLimit); the oldest are left out.
	Partial bool   `json:"partial,omitempty"`
	Error   string `json:"error,omitempty"`
}

// JobLatency is an ended job's latency: submitted to finished.
type JobLatency struct {
	ID         string    `json:"id"`
	Type       string    `json:"type"`
	State      string    `json:"state"`
	FinishedAt time.Time `json:"finished_at"`
	Seconds    float64   `json:"seconds"`
}

// chartsOf computes the charts of the window ending at now from the jobs' statuses.
func chartsOf(list []client.Status, now time.Time) ChartsView {
	from := now.Add(-chartWindow).Truncate(chartStep)
	n := int(now.Sub(from)/chartStep) + 1
	v := ChartsView{From: from, To: from.Add(time.Duration(n) * chartStep), Step: int(chartStep / time.Second),
		ShardsPerSecond: make([]float64, n), Jobs: []JobLatency{}}
	for _, st := range list {
		if st.FinishedAt != nil && st.State.Terminal() && !st.FinishedAt.Before(from) && !st.SubmittedAt.IsZero() {
			v.Jobs = append(v.Jobs, JobLatency{ID: st.ID, Type: st.Type, State: string(st.State), FinishedAt: *st.FinishedAt,
				Seconds: st.FinishedAt.Sub(st.SubmittedAt).Seconds()})
		}
		start := st.SubmittedAt
		if st.StartedAt != nil {
			start = *st.StartedAt
		}
		end := now
		switch {
		case st.FinishedAt != nil:
			end = *st.FinishedAt
		case st.UpdatedAt != nil:
			end = *st.UpdatedAt
		}
		if st.ShardsDone <= 0 || start.IsZero() || end.Before(from) {
			continue
		}
		spread(v.ShardsPerSecond, from, float64(st.ShardsDone), start, end)
	}
	slices.SortFunc(v.Jobs, func(a, b JobLatency) int { return a.FinishedAt.Compare(b.FinishedAt) })
	return v
}

// spread adds done shards, done evenly from start to end, to the per-second rate of each step
// of buckets (the first step at from).
func spread(buckets []float64, from time.Time, done float64, start, end time.Time) {
	if !end.After(start) {
		end = start.Add(time.Millisecond) // done at once: all in start's step
	}
	perSec := done / end.Sub(start).Seconds()
	for i := range buckets {
		b0 := from.Add(time.Duration(i) * chartStep)
		b1 := b0.Add(chartStep)
		lo, hi := maxTime(b0, start), minTime(b1, end)
		if hi.After(lo) {
			buckets[i] += perSec * hi.Sub(lo).Seconds() / chartStep.Seconds()
		}
	}
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

// cachedCharts reads the charts at most every chartTTL, however many pages ask.
type cachedCharts struct {
	mu sync.Mutex
	at time.Time
	v  ChartsView
}

func (c *cachedCharts) get(ctx context.Context, l JobLister) ChartsView {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.at.IsZero() && time.Since(c.at) < chartTTL {
		return c.v
	}
	now := time.Now().UTC()
	qctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	page, err := l.Query(qctx, client.Filter{Since: now.Add(-chartLookBack), Limit: client.MaxQueryLimit})
	if err != nil {
		v := chartsOf(nil, now)
		v.Error = protocol.Redact(err.Error())
		return v // not cached: the next page asks again
	}
	c.v, c.at = chartsOf(page.Jobs, now), time.Now()
	c.v.Partial = page.Next != ""
	return c.v
}

// charts serves /api/charts.
func (s *Server) charts(w http.ResponseWriter, r *http.Request) {
	b := s.attached(w)
	if b == nil {
		return
	}
	writeJSON(w, http.StatusOK, s.chartsCache.get(r.Context(), b.Jobs.Lister))
}
