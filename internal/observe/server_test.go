package observe

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/mapagg/mapagg/client"
	"github.com/mapagg/mapagg/election"
	"github.com/mapagg/mapagg/internal/membership"
)

// testServer is a server whose job API is apiH (after Attach, when attach is true).
func testServer(t *testing.T, attach bool, apiH http.Handler, sched ScheduleLister) *httptest.Server {
	t.Helper()
	s, err := Listen(Config{Addr: "127.0.0.1:0", Worker: "w1", Metrics: NewMetrics("test", Sources{}), Events: NewRecorder("w1"),
		Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	_ = s.ln.Close()
	if attach {
		if err := s.Attach(Backend{Ready: &Readiness{}, Jobs: &JobCache{Lister: &lister{}}, API: apiH, Schedules: sched,
			Members: func() []membership.Member { return nil },
			Leader:  func(context.Context) (*election.LeaderInfo, error) { return nil, nil }}); err != nil {
			t.Fatal(err)
		}
	}
	hs := httptest.NewServer(s.Handler())
	t.Cleanup(hs.Close)
	return hs
}

// send sends a request and returns the status and body.
func send(t *testing.T, hs *httptest.Server, method, path string, header ...string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, hs.URL+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(header); i += 2 {
		if header[i] == "Host" {
			req.Host = header[i+1]
			continue
		}
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// apiStub is a job API that answers 299 and counts its requests.
type apiStub struct{ calls atomic.Int32 }

func (a *apiStub) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	a.calls.Add(1)
	w.WriteHeader(299)
}

// The job API gets every request under /api/ that the dashboard's reads do not take, and
// answers 503 until it is attached.
func TestServer_MountsTheJobAPI(t *testing.T) {
	stub := &apiStub{}
	hs := testServer(t, true, stub, nil)
	for _, r := range []string{"POST /api/v1/jobs", "GET /api/v1/jobs/x", "DELETE /api/v1/jobs/x", "GET /api/v1/openapi.json",
		"POST /api/jobs/x/cancel", "POST /api/jobs/x/retry", "POST /api/jobs/x/delete"} {
		method, path, _ := strings.Cut(r, " ")
		if code, body := send(t, hs, method, path); code != 299 {
			t.Errorf("%s = %d %s; want the job API's answer", r, code, body)
		}
	}
	n := stub.calls.Load()
	for _, path := range []string{"/api/jobs", "/api/cluster", "/api/events", "/api/schedules", "/", "/healthz", "/readyz", "/metrics"} {
		if code, body := send(t, hs, "GET", path); code != 200 {
			t.Errorf("GET %s = %d %s; want 200", path, code, body)
		}
	}
	if got := stub.calls.Load(); got != n {
		t.Fatalf("the job API got %d of the dashboard's reads", got-n)
	}
	if code, _ := send(t, hs, "POST", "/"); code != http.StatusMethodNotAllowed {
		t.Errorf("POST / = %d; want 405", code)
	}

	starting := testServer(t, false, nil, nil)
	if code, body := send(t, starting, "POST", "/api/v1/jobs"); code != 503 || !strings.Contains(body, "starting") {
		t.Errorf("POST /api/v1/jobs before Attach = %d %s; want 503 starting", code, body)
	}
	none := testServer(t, true, nil, nil)
	if code, body := send(t, none, "GET", "/api/v1/jobs"); code != 503 || !strings.Contains(body, "the job API is not available") {
		t.Errorf("GET /api/v1/jobs without an API = %d %s; want 503", code, body)
	}
}

func TestServer_RefusesForeignHost(t *testing.T) {
	for _, tc := range []struct {
		host  string
		extra []string
		ok    bool
	}{
		{"127.0.0.1:8080", nil, true}, {"[::1]:8080", nil, true}, {"localhost:8080", nil, true}, {"10.1.2.3", nil, true},
		{"worker-1:8080", nil, true}, {"dash.localhost", nil, true},
		{"evil.example.com", nil, false}, {"evil.example.com:8080", nil, false}, {"", nil, false},
		{"mapagg.example.com", []string{"mapagg.example.com"}, true}, {"a.corp.example", []string{".corp.example"}, true},
		{"evil.example.com", []string{"*"}, true}, {"corp.example.evil.com", []string{".corp.example"}, false},
	} {
		if got := hostAllowed(tc.host, "builder", tc.extra); got != tc.ok {
			t.Errorf("hostAllowed(%q, %v) = %v, want %v", tc.host, tc.extra, got, tc.ok)
		}
	}
	stub := &apiStub{}
	hs := testServer(t, true, stub, nil)
	code, body := send(t, hs, "POST", "/api/v1/jobs", "Authorization", "Bearer 0123456789abcdef-test-token", "Host", "rebound.example.com")
	if code != http.StatusMisdirectedRequest || !strings.Contains(body, "--http-hosts") {
		t.Fatalf("a foreign Host = %d %s; want 421 naming --http-hosts", code, body)
	}
	for _, path := range []string{"/", "/api/jobs", "/api/cluster", "/api/v1/jobs"} {
		if code, _ := send(t, hs, "GET", path, "Host", "rebound.example.com"); code != http.StatusMisdirectedRequest {
			t.Errorf("GET %s under a foreign Host = %d; want 421", path, code)
		}
	}
	if n := stub.calls.Load(); n != 0 {
		t.Fatalf("requests to a foreign Host reached the job API %d times", n)
	}
	// Probes and scrapers may name the worker by any DNS name.
	if code, _ := send(t, hs, "GET", "/healthz", "Host", "worker-1.prod.example.com"); code != 200 {
		t.Fatalf("/healthz under a DNS name = %d; want 200", code)
	}
}

// schedules lists what it is given, counting reads.
type schedules struct {
	calls atomic.Int32
	list  []client.ScheduleInfo
	err   error
}

func (s *schedules) Schedules(context.Context) ([]client.ScheduleInfo, error) {
	s.calls.Add(1)
	return s.list, s.err
}

// The dashboard's schedules panel reads through a cache; without a lister it shows none and
// says why.
func TestServer_SchedulesPanel(t *testing.T) {
	sched := &schedules{list: []client.ScheduleInfo{{Name: "nightly", Type: "pi"}}}
	hs := testServer(t, true, nil, sched)
	for range 3 {
		if code, body := send(t, hs, "GET", "/api/schedules"); code != 200 || !strings.Contains(body, `"name":"nightly"`) {
			t.Fatalf("GET /api/schedules = %d %s", code, body)
		}
	}
	if n := sched.calls.Load(); n != 1 {
		t.Fatalf("schedules read %d times within 2 s; want 1", n)
	}
	none := testServer(t, true, nil, nil)
	if code, body := send(t, none, "GET", "/api/schedules"); code != 200 || !strings.Contains(body, `"schedules":[]`) || !strings.Contains(body, "not available") {
		t.Fatalf("GET /api/schedules without a lister = %d %s", code, body)
	}
	failing := testServer(t, true, nil, &schedules{err: errors.New("storage down: https://a.blob/x?sig=secret")})
	if code, body := send(t, failing, "GET", "/api/schedules"); code != 200 || !strings.Contains(body, "storage down") || strings.Contains(body, "secret") {
		t.Fatalf("GET /api/schedules, storage failing = %d %s; want the error, redacted", code, body)
	}
}

// A job has its own address: /jobs/{id} is the dashboard, with its links resolving against the
// root; a malformed id is refused.
func TestServer_JobPage(t *testing.T) {
	hs := testServer(t, true, &apiStub{}, nil)
	code, body := send(t, hs, "GET", "/jobs/20261128-101500-0000beef")
	if code != 200 || !strings.Contains(body, `<base href="../">`) || !strings.Contains(body, `<script src="app.js"`) {
		t.Fatalf("GET /jobs/{id} = %d %.300s", code, body)
	}
	if code, _ := send(t, hs, "GET", "/jobs/Not_An_Id"); code != 400 {
		t.Fatalf("GET /jobs/Not_An_Id = %d; want 400", code)
	}
}
