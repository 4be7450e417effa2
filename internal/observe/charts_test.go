package observe

import (
	"encoding/json"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/mapagg/mapagg/client"
	"github.com/mapagg/mapagg/jobs"
)

func at(t time.Time) *time.Time { return &t }

// The last hour's shards a second spread each job's done shards over its run, and every job
// that ended in the hour has its latency; jobs that ended before the hour add nothing.
func TestCharts_ShardsPerSecondAndLatency(t *testing.T) {
	now := time.Date(2026, 11, 29, 12, 30, 30, 0, time.UTC)
	list := []client.Status{
		// 600 shards from 12:00 to 12:10: 1 a second in ten steps.
		{ID: "a", Type: "pi", State: jobs.StateSucceeded, ShardsDone: 600, ShardsTotal: 600,
			SubmittedAt: now.Add(-31 * time.Minute), StartedAt: at(time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)),
			FinishedAt: at(time.Date(2026, 11, 29, 12, 10, 0, 0, time.UTC))},
		// Running: 120 shards from 12:29 to its last update at 12:30.
		{ID: "b", Type: "primes", State: jobs.StateRunning, ShardsDone: 120, ShardsTotal: 500,
			SubmittedAt: time.Date(2026, 11, 29, 12, 29, 0, 0, time.UTC), UpdatedAt: at(time.Date(2026, 11, 29, 12, 30, 0, 0, time.UTC))},
		// Ended two hours ago: outside the window.
		{ID: "c", Type: "pi", State: jobs.StateFailed, ShardsDone: 5, SubmittedAt: now.Add(-3 * time.Hour),
			FinishedAt: at(now.Add(-2 * time.Hour))},
		{ID: "d", Type: "pi", State: jobs.StateQueued, SubmittedAt: now},
	}
	v := chartsOf(list, now)
	if v.Step != 60 || len(v.ShardsPerSecond) != 61 || !v.From.Equal(time.Date(2026, 11, 29, 11, 30, 0, 0, time.UTC)) {
		t.Fatalf("window from %v, %d steps of %d s; want 11:30, 61 of 60", v.From, len(v.ShardsPerSecond), v.Step)
	}
	step := func(h, m int) float64 {
		return v.ShardsPerSecond[int(time.Date(2026, 11, 29, h, m, 0, 0, time.UTC).Sub(v.From)/time.Minute)]
	}
	for _, c := range []struct {
		h, m int
		want float64
	}{{11, 59, 0}, {12, 0, 1}, {12, 9, 1}, {12, 10, 0}, {12, 28, 0}, {12, 29, 2}, {12, 30, 0}} {
		if got := step(c.h, c.m); math.Abs(got-c.want) > 1e-9 {
			t.Errorf("shards/s at %02d:%02d = %v, want %v", c.h, c.m, got, c.want)
		}
	}
	if len(v.Jobs) != 1 || v.Jobs[0].ID != "a" || v.Jobs[0].Seconds != 630 || v.Jobs[0].State != "succeeded" {
		t.Fatalf("latencies %+v; want job a, 630 s (11:59:30 to 12:10)", v.Jobs)
	}
}

// /api/charts answers the charts from the job list, read at most every 10 s.
func TestServer_Charts(t *testing.T) {
	hs := testServer(t, true, nil, nil)
	code, body := send(t, hs, "GET", "/api/charts")
	var v ChartsView
	if err := json.Unmarshal([]byte(body), &v); code != 200 || err != nil || len(v.ShardsPerSecond) != 61 || v.Jobs == nil {
		t.Fatalf("GET /api/charts = %d %s (%v)", code, body, err)
	}
	if code, _ := send(t, testServer(t, false, nil, nil), "GET", "/api/charts"); code != 503 {
		t.Fatalf("before Attach: %d, want 503", code)
	}
}

// Each dashboard page loads by itself at its own address.
func TestServer_DashboardPages(t *testing.T) {
	hs := testServer(t, true, nil, nil)
	for _, p := range []string{"/", "/jobs", "/schedules", "/workers", "/epochs", "/jobs/20261129-120000-0123abcd"} {
		code, body := send(t, hs, "GET", p)
		if code != 200 || !strings.Contains(body, `<script src="app.js"></script>`) {
			t.Errorf("GET %s = %d; want the dashboard", p, code)
		}
	}
	if code, _ := send(t, hs, "GET", "/nowhere"); code != 404 {
		t.Errorf("GET /nowhere = %d, want 404", code)
	}
}
