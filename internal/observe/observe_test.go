package observe

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mapagg/mapagg/client"
	"github.com/mapagg/mapagg/jobs"
)

func TestReadinessCachesAndBoundsHungChecks(t *testing.T) {
	var calls atomic.Int32
	r := &Readiness{Timeout: 100 * time.Millisecond, TTL: time.Hour, Checks: []Check{
		{Name: "ok", Fn: func(context.Context) error { calls.Add(1); return nil }},
		// A hung dependency (the real servers cannot hang on demand): the check must honour ctx.
		{Name: "hung", Fn: func(ctx context.Context) error { <-ctx.Done(); return ctx.Err() }},
	}}
	start := time.Now()
	res, ok := r.Check(context.Background())
	if took := time.Since(start); took > 5*time.Second {
		t.Fatalf("check took %v with a 100ms timeout", took)
	}
	if ok || len(res) != 2 || res[0].Name != "hung" || res[0].OK || !strings.Contains(res[0].Error, "deadline") || !res[1].OK {
		t.Fatalf("results %+v ok %v", res, ok)
	}
	r.Check(context.Background())
	if n := calls.Load(); n != 1 {
		t.Fatalf("checks ran %d times within the TTL, want 1", n)
	}
}

type lister struct {
	calls atomic.Int32
	list  []client.Status
	err   error
}

func (l *lister) Query(context.Context, client.Filter) (*client.Page, error) {
	l.calls.Add(1)
	if l.err != nil {
		return nil, l.err
	}
	return &client.Page{Jobs: l.list}, nil
}

func TestJobCacheReadsOncePerTTLAndEstimatesRate(t *testing.T) {
	l := &lister{list: []client.Status{{ID: "a", State: jobs.StateRunning, ShardsTotal: 100, ShardsDone: 10}}}
	c := &JobCache{Lister: l, TTL: 50 * time.Millisecond}
	for range 5 {
		if _, err := c.Jobs(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	if n := l.calls.Load(); n != 1 {
		t.Fatalf("storage read %d times within the TTL, want 1", n)
	}
	time.Sleep(60 * time.Millisecond)
	l.list[0].ShardsDone = 40
	v, _ := c.Jobs(context.Background())
	if len(v) != 1 || len(v[0].Samples) != 2 || v[0].Rate <= 0 || v[0].ETA == nil || *v[0].ETA <= 0 {
		t.Fatalf("view %+v", v)
	}
	// A failed read keeps the last view and reports the error.
	time.Sleep(60 * time.Millisecond)
	l.err = errors.New("storage down")
	v, err := c.Jobs(context.Background())
	if err == nil || len(v) != 1 {
		t.Fatalf("after a failed read: %v, %d jobs", err, len(v))
	}
}

// TestServerServesPprofBesideTheDashboard: --pprof once made the server panic at start ("GET /"
// conflicted with a method-less "/debug/pprof/").
func TestServerServesPprofBesideTheDashboard(t *testing.T) {
	for _, on := range []bool{false, true} {
		s, err := Listen(Config{Addr: "127.0.0.1:0", Pprof: on, Worker: "w1", Metrics: NewMetrics("test", Sources{}), Events: NewRecorder("w1")})
		if err != nil {
			t.Fatal(err)
		}
		get := func(path string) *httptest.ResponseRecorder {
			rec := httptest.NewRecorder()
			req := httptest.NewRequest(http.MethodGet, path, nil)
			req.Host = "127.0.0.1:8080" // httptest's example.com is a foreign host
			s.srv.Handler.ServeHTTP(rec, req)
			return rec
		}
		if rec := get("/"); rec.Code != http.StatusOK || !strings.Contains(rec.Body.String(), "<html") {
			t.Errorf("pprof %v: GET /: %d, not the dashboard", on, rec.Code)
		}
		rec := get("/debug/pprof/cmdline")
		if served := rec.Code == http.StatusOK; served != on {
			t.Errorf("pprof %v: GET /debug/pprof/cmdline: %d", on, rec.Code)
		}
		_ = s.ln.Close()
	}
}
