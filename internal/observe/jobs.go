package observe

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/mapagg/mapagg/client"
)

// JobLister is what the job view needs of client.Client.
type JobLister interface {
	Query(ctx context.Context, f client.Filter) (*client.Page, error)
}

// Sample is one reading of a job's progress.
type Sample struct {
	At   time.Time `json:"at"`
	Done int       `json:"done"`
}

// JobView is a job as the dashboard shows it.
type JobView struct {
	client.Status
	// Rate is shards per second over the last samples (0 when unknown); ETA is seconds to the end
	// at that rate (omitted when unknown).
	Rate    float64  `json:"rate"`
	ETA     *float64 `json:"eta_seconds,omitempty"`
	Samples []Sample `json:"samples"`
}

// maxSamples bounds each job's progress history.
const maxSamples = 900

// JobCache reads the job list from storage at most once per TTL, however many browsers and
// scrapers ask, and keeps each job's progress over time as it saw it.
type JobCache struct {
	Lister JobLister
	Limit  int           // most recent jobs shown; default 50
	TTL    time.Duration // default 1s

	mu      sync.Mutex
	at      time.Time
	jobs    []JobView
	err     error
	samples map[string][]Sample
}

// Jobs returns the most recent jobs, newest first.
func (c *JobCache) Jobs(ctx context.Context) ([]JobView, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	ttl := c.TTL
	if ttl == 0 {
		ttl = time.Second
	}
	if !c.at.IsZero() && time.Since(c.at) < ttl {
		return c.jobs, c.err
	}
	limit := c.Limit
	if limit == 0 {
		limit = 50
	}
	lctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	page, err := c.Lister.Query(lctx, client.Filter{Limit: limit})
	c.at = time.Now()
	if err != nil {
		c.err = err
		return c.jobs, err
	}
	// Oldest first, as the sampling below reads them.
	list := slices.Clone(page.Jobs)
	slices.Reverse(list)
	c.err = nil
	if c.samples == nil {
		c.samples = map[string][]Sample{}
	}
	seen := map[string]bool{}
	views := make([]JobView, 0, len(list))
	for i := len(list) - 1; i >= 0; i-- {
		st := list[i]
		seen[st.ID] = true
		s := c.samples[st.ID]
		if n := len(s); n == 0 || !st.State.Terminal() || s[n-1].Done != st.ShardsDone {
			s = append(s, Sample{At: c.at.UTC(), Done: st.ShardsDone})
		}
		if len(s) > maxSamples {
			s = append(s[:0], s[len(s)-maxSamples:]...)
		}
		c.samples[st.ID] = s
		v := JobView{Status: st, Samples: append([]Sample(nil), s...)}
		v.Rate, v.ETA = rate(s, st)
		views = append(views, v)
	}
	for id := range c.samples {
		if !seen[id] {
			delete(c.samples, id)
		}
	}
	c.jobs = views
	return views, nil
}

// rate estimates shards per second over the last 10 s of samples, and the seconds left.
func rate(s []Sample, st client.Status) (float64, *float64) {
	if len(s) < 2 || st.State.Terminal() {
		return 0, nil
	}
	last := s[len(s)-1]
	first := s[0]
	for i := len(s) - 2; i >= 0; i-- {
		first = s[i]
		if last.At.Sub(s[i].At) >= 10*time.Second {
			break
		}
	}
	dt := last.At.Sub(first.At).Seconds()
	if dt <= 0 {
		return 0, nil
	}
	r := float64(last.Done-first.Done) / dt
	if r <= 0 {
		return 0, nil
	}
	eta := float64(st.ShardsTotal-last.Done) / r
	return r, &eta
}
