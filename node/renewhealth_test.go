package node

import (
	"strings"
	"testing"
	"time"

	"github.com/mapagg/mapagg/election"
)

func TestRenewHealth_Problem(t *testing.T) {
	var h renewHealth
	t0 := time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC)
	if p := h.problem(election.Stats{Renewals: 10}, t0); p != "" {
		t.Fatalf("healthy: %q", p)
	}
	if p := h.problem(election.Stats{Renewals: 10, RenewFailures: 2}, t0.Add(time.Second)); !strings.Contains(p, "2 renewal(s) failed, the last at 12:00:01") {
		t.Fatalf("after failures: %q", p)
	}
	if p := h.problem(election.Stats{RenewFailures: 3, Losses: 1}, t0.Add(2*time.Second)); !strings.Contains(p, "1 term(s) lost, the last at 12:00:02") || !strings.Contains(p, "3 renewals failed") {
		t.Fatalf("after a loss: %q", p)
	}
	if p := h.problem(election.Stats{RenewFailures: 3, Losses: 1}, t0.Add(renewWindow+3*time.Second)); p != "" {
		t.Fatalf("after the window: %q", p)
	}
}
