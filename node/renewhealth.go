package node

import (
	"fmt"
	"sync"
	"time"

	"github.com/mapagg/mapagg/election"
)

// renewWindow is how long failed lease renewals and lost terms stay among a worker's problems.
const renewWindow = 10 * time.Minute

// renewHealth turns the elector's counters into a problem a person sees in `worker workers` and
// on the dashboard: renewals that failed lately, and terms lost through them. Without it a
// leadership lost under load showed only in the logs.
type renewHealth struct {
	mu                    sync.Mutex
	failures, losses      uint64
	failedAt, lostAt      time.Time
	recentFail, recentLos uint64 // counted since the window began
}

// problem returns the renewal problem of st at now, or "".
func (h *renewHealth) problem(st election.Stats, now time.Time) string {
	h.mu.Lock()
	defer h.mu.Unlock()
	if st.RenewFailures > h.failures {
		if now.Sub(h.failedAt) > renewWindow {
			h.recentFail = 0
		}
		h.recentFail += st.RenewFailures - h.failures
		h.failures, h.failedAt = st.RenewFailures, now
	}
	if st.Losses > h.losses {
		if now.Sub(h.lostAt) > renewWindow {
			h.recentLos = 0
		}
		h.recentLos += st.Losses - h.losses
		h.losses, h.lostAt = st.Losses, now
	}
	fail := !h.failedAt.IsZero() && now.Sub(h.failedAt) <= renewWindow
	lost := !h.lostAt.IsZero() && now.Sub(h.lostAt) <= renewWindow
	switch {
	case lost:
		return fmt.Sprintf("lease: %d term(s) lost, the last at %s UTC (%d renewals failed lately)", h.recentLos, h.lostAt.UTC().Format("15:04:05"), h.recentFail)
	case fail:
		return fmt.Sprintf("lease: %d renewal(s) failed, the last at %s UTC", h.recentFail, h.failedAt.UTC().Format("15:04:05"))
	}
	return ""
}
