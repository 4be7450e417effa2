package observe

import (
	"context"
	"sort"
	"sync"
	"time"

	"github.com/mapagg/mapagg/internal/protocol"
)

// Check is one readiness probe; it must honour ctx.
type Check struct {
	Name string
	Fn   func(ctx context.Context) error
}

// Readiness runs its checks in parallel, each within Timeout, and caches the outcome for TTL so
// that probes from Docker, Kubernetes and browsers cost one round of checks per TTL.
type Readiness struct {
	Checks  []Check
	Timeout time.Duration // default 2s
	TTL     time.Duration // default 1s

	mu   sync.Mutex
	at   time.Time
	last []CheckResult
}

// CheckResult is one probe's outcome.
type CheckResult struct {
	Name  string `json:"name"`
	OK    bool   `json:"ok"`
	Error string `json:"error,omitempty"`
	Took  string `json:"took"`
}

// Check returns every probe's outcome (cached) and whether all passed.
func (r *Readiness) Check(ctx context.Context) ([]CheckResult, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	ttl, timeout := r.TTL, r.Timeout
	if ttl == 0 {
		ttl = time.Second
	}
	if timeout == 0 {
		timeout = 2 * time.Second
	}
	if r.last == nil || time.Since(r.at) > ttl {
		res := make([]CheckResult, len(r.Checks))
		var wg sync.WaitGroup
		for i, c := range r.Checks {
			wg.Add(1)
			go func() {
				defer wg.Done()
				cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), timeout)
				defer cancel()
				start := time.Now()
				err := c.Fn(cctx)
				res[i] = CheckResult{Name: c.Name, OK: err == nil, Took: time.Since(start).Round(time.Microsecond).String()}
				if err != nil {
					res[i].Error = protocol.Redact(err.Error())
				}
			}()
		}
		wg.Wait()
		sort.Slice(res, func(i, j int) bool { return res[i].Name < res[j].Name })
		r.last, r.at = res, time.Now()
	}
	ok := true
	for _, c := range r.last {
		ok = ok && c.OK
	}
	return append([]CheckResult(nil), r.last...), ok
}
