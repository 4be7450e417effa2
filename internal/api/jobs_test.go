package api

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mapagg/mapagg/builtin"
	"github.com/mapagg/mapagg/client"
	"github.com/mapagg/mapagg/internal/harness/testenv"
	"github.com/mapagg/mapagg/internal/protocol"
	"github.com/mapagg/mapagg/internal/queue"
	"github.com/mapagg/mapagg/jobs"
	"github.com/mapagg/mapagg/store"
)

func TestMain(m *testing.M) { testenv.Main(m) }

const testToken = "0123456789abcdef-test-token"

type apiEnv struct {
	jobs  *store.Container
	queue *queue.Queue
	cl    *client.Client
	srv   *httptest.Server
}

// newAPIEnv serves the API over a fresh container and queue on Azurite.
func newAPIEnv(t *testing.T, cfg Config) *apiEnv {
	t.Helper()
	conn := testenv.Azurite(t)
	bc, err := store.NewClient(conn)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	c := store.New(bc, testenv.Name(t, "jobs"))
	q, err := queue.New(conn, testenv.Name(t, "q"))
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Ensure(ctx); err != nil {
		t.Fatal(err)
	}
	if err := q.Ensure(ctx); err != nil {
		t.Fatal(err)
	}
	cl := &client.Client{Store: c, Queue: q, Registry: builtin.Registry()}
	cfg.Jobs, cfg.Schedules, cfg.Logger = cl, cl, slog.New(slog.DiscardHandler)
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(s)
	t.Cleanup(hs.Close)
	return &apiEnv{jobs: c, queue: q, cl: cl, srv: hs}
}

// do sends a request and returns the status and body.
func (e *apiEnv) do(t *testing.T, method, path, token, body string, header ...string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, e.srv.URL+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
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

// written counts blobs and queued messages.
func (e *apiEnv) written(t *testing.T) (int, int) {
	t.Helper()
	blobs, err := e.jobs.List(context.Background(), "")
	if err != nil {
		t.Fatal(err)
	}
	n, err := e.queue.Depth(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return len(blobs), n
}

func TestAPI_Submit_AuthAndRefusalsWriteNothing(t *testing.T) {
	e := newAPIEnv(t, Config{Token: []byte(testToken)})
	good := `{"type":"primes","params":{"from":0,"to":1000,"shards":4}}`
	_, cliErr := e.cl.Validate(context.Background(), "primes", json.RawMessage(`{"from":10,"to":1,"shards":1}`))
	for _, tc := range []struct {
		name, token, body string
		code              int
		want              string
	}{
		{"no token", "", good, 401, "Authorization: Bearer"},
		{"wrong token", "wrong-token-of-some-length", good, 401, "does not match"},
		{"bad params", testToken, `{"type":"primes","params":{"from":10,"to":1,"shards":1}}`, 400, cliErr.Error()},
		{"unknown type", testToken, `{"type":"prime","params":{}}`, 400, `unknown job type "prime"; known: pi, primes, regroup, sleep, wordcount`},
		{"no type", testToken, `{"params":{}}`, 400, `type is required`},
		{"unknown field", testToken, `{"type":"pi","parms":{}}`, 400, `unknown field "parms"`},
		{"not JSON", testToken, `{"type":`, 400, "body:"},
		{"two objects", testToken, good + good, 400, "one JSON object"},
		{"priority out of range", testToken, `{"type":"pi","params":{"samples":1000,"shards":2},"priority":11}`, 400, `priority 11 is out of range`},
		{"unknown output format", testToken, `{"type":"regroup","params":{"job":"20261125-120000-0123abcd"},"output_format":"csv"}`, 400, `output_format "csv" is not a format`},
		{"too big", testToken, `{"type":"pi","params":{"x":"` + strings.Repeat("a", MaxBody) + `"}}`, 413, "body over"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, body := e.do(t, "POST", "/api/v1/jobs", tc.token, tc.body)
			var out struct{ Error string }
			_ = json.Unmarshal([]byte(body), &out)
			if code != tc.code || !strings.Contains(out.Error, tc.want) {
				t.Fatalf("POST = %d %s; want %d containing %q", code, body, tc.code, tc.want)
			}
			if strings.Contains(body, testToken) {
				t.Fatalf("the answer holds the token: %s", body)
			}
			if b, q := e.written(t); b != 0 || q != 0 {
				t.Fatalf("a refused submit wrote %d blobs and %d queue messages", b, q)
			}
		})
	}
	// The field at fault is named.
	code, body := e.do(t, "POST", "/api/v1/jobs", testToken, `{"type":"primes","params":{"from":0,"to":10,"shards":0}}`)
	var out map[string]string
	if err := json.Unmarshal([]byte(body), &out); code != 400 || err != nil || out["field"] != "shards" {
		t.Fatalf("bad shards: %d %s; want 400 naming field shards", code, body)
	}
}

func TestAPI_WritesDisabledWithoutToken(t *testing.T) {
	e := newAPIEnv(t, Config{})
	code, body := e.do(t, "POST", "/api/v1/jobs", "anything-at-all-here", `{"type":"pi"}`)
	if code != 403 || !strings.Contains(body, "--api-token-file") {
		t.Fatalf("POST without a configured token = %d %s; want 403 saying how to enable writes", code, body)
	}
	if b, q := e.written(t); b != 0 || q != 0 {
		t.Fatalf("wrote %d blobs, %d messages", b, q)
	}
	if code, _ := e.do(t, "GET", "/api/v1/jobs", "", ""); code != 200 {
		t.Fatalf("reads need no token: GET /api/v1/jobs = %d", code)
	}
}

func TestAPI_JobCycle(t *testing.T) {
	e := newAPIEnv(t, Config{Token: []byte(testToken)})
	code, body := e.do(t, "POST", "/api/v1/jobs", testToken, `{"type":"primes","params":{"from":0,"to":1000,"shards":4}}`)
	var sub struct{ ID string }
	if err := json.Unmarshal([]byte(body), &sub); code != 201 || err != nil || protocol.CheckID(sub.ID) != nil {
		t.Fatalf("POST = %d %s; want 201 and an id", code, body)
	}
	if b, q := e.written(t); b != 1 || q != 1 {
		t.Fatalf("submit wrote %d blobs, %d messages; want the spec and one message", b, q)
	}
	code, body = e.do(t, "GET", "/api/v1/jobs/"+sub.ID, "", "")
	if code != 200 || !strings.Contains(body, `"state":"queued"`) || !strings.Contains(body, `"type":"primes"`) ||
		!strings.Contains(body, `"params":{"from":0,"to":1000,"shards":4}`) {
		t.Fatalf("GET job = %d %s", code, body)
	}
	if code, body = e.do(t, "GET", "/api/v1/jobs/"+sub.ID+"/result", "", ""); code != 409 || !strings.Contains(body, "queued") {
		t.Fatalf("result of a queued job = %d %s; want 409", code, body)
	}
	for path, want := range map[string]int{
		"/api/v1/jobs/20261121-000000-00000000":        404,
		"/api/v1/jobs/BAD_ID":                          400,
		"/api/v1/jobs/" + strings.Repeat("a", 65):      400,
		"/api/v1/jobs/20261121-000000-00000000/result": 404,
		"/api/v1/nothing":                              404,
	} {
		if code, body := e.do(t, "GET", path, "", ""); code != want || !strings.HasPrefix(body, `{"error":`) {
			t.Errorf("GET %s = %d %s; want %d with a JSON error", path, code, body, want)
		}
	}
	// The leader finishes the job (written as a leader would): the exact result comes back.
	cp := protocol.Checkpoint{Version: protocol.CheckpointVersion, Job: sub.ID, Type: "primes", State: jobs.StateSucceeded, PlanEpoch: 1,
		WriterEpoch: 1, Total: 4, DoneCount: 4, Dispatched: 4, Result: json.RawMessage(`{"count":168}`), UpdatedAt: time.Now().UTC()}
	data, err := cp.Encode()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.jobs.Put(context.Background(), protocol.CheckpointBlob(sub.ID), data, store.Cond{}); err != nil {
		t.Fatal(err)
	}
	if code, body = e.do(t, "GET", "/api/v1/jobs/"+sub.ID, "", ""); code != 200 || !strings.Contains(body, `"result_url":"/api/v1/jobs/`+sub.ID+`/result"`) {
		t.Fatalf("GET a succeeded job = %d %s; want its result_url", code, body)
	}
	if code, body = e.do(t, "GET", "/api/v1/jobs/"+sub.ID+"/result", "", ""); code != 200 || strings.TrimSpace(body) != `{"count":168}` {
		t.Fatalf("result = %d %s", code, body)
	}
	if code, body = e.do(t, "POST", "/api/v1/jobs/"+sub.ID+"/cancel", testToken, ""); code != 409 || !strings.Contains(body, "already succeeded") {
		t.Fatalf("cancel of a finished job = %d %s; want 409", code, body)
	}

	done := sub.ID

	// Cancel: without the token nothing is written; with it the marker is.
	code, body = e.do(t, "POST", "/api/v1/jobs", testToken, `{"type":"pi","params":{"samples":1000,"shards":2}}`)
	if code != 201 {
		t.Fatalf("POST = %d %s", code, body)
	}
	_ = json.Unmarshal([]byte(body), &sub)
	if code, _ := e.do(t, "POST", "/api/v1/jobs/"+sub.ID+"/cancel", "", ""); code != 401 {
		t.Fatalf("cancel without the token = %d, want 401", code)
	}
	if ok, _ := e.jobs.Exists(context.Background(), protocol.CancelBlob(sub.ID)); ok {
		t.Fatal("a refused cancel wrote its marker")
	}
	if code, body = e.do(t, "POST", "/api/v1/jobs/"+sub.ID+"/cancel", testToken, ""); code != 202 {
		t.Fatalf("cancel = %d %s; want 202", code, body)
	}
	if ok, err := e.jobs.Exists(context.Background(), protocol.CancelBlob(sub.ID)); !ok || err != nil {
		t.Fatalf("cancel marker: %v %v", ok, err)
	}
	// Delete: a job that has not ended is refused; an ended one goes, and nothing of it is left.
	if code, body = e.do(t, "DELETE", "/api/v1/jobs/"+sub.ID, testToken, ""); code != 409 || !strings.Contains(body, "cancel it first") {
		t.Fatalf("DELETE of a job not ended = %d %s; want 409", code, body)
	}
	if code, _ = e.do(t, "DELETE", "/api/v1/jobs/"+done, "", ""); code != 401 {
		t.Fatalf("DELETE without the token = %d; want 401", code)
	}
	if ok, _ := e.jobs.Exists(context.Background(), protocol.SpecBlob(done)); !ok {
		t.Fatal("a refused delete removed the job's spec")
	}
	if code, body = e.do(t, "DELETE", "/api/v1/jobs/"+done, testToken, ""); code != 200 || !strings.Contains(body, `"deleted":true`) {
		t.Fatalf("DELETE of a succeeded job = %d %s; want 200", code, body)
	}
	if code, _ = e.do(t, "GET", "/api/v1/jobs/"+done, "", ""); code != 404 {
		t.Fatalf("GET a deleted job = %d; want 404", code)
	}
}

func TestAPI_ListFiltersAndPages(t *testing.T) {
	e := newAPIEnv(t, Config{Token: []byte(testToken)})
	clock := time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC)
	e.cl.Now = func() time.Time { clock = clock.Add(time.Second); return clock }
	var ids []string
	for i := range 5 {
		typ, params := "pi", `{"samples":1000,"shards":2}`
		if i%2 == 1 {
			typ, params = "primes", `{"from":0,"to":100,"shards":2}`
		}
		id, err := e.cl.Submit(context.Background(), typ, json.RawMessage(params))
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	type page struct {
		Jobs []struct{ ID, Type, State string }
		Next string
	}
	get := func(path string) page {
		t.Helper()
		code, body := e.do(t, "GET", path, "", "")
		var p page
		if err := json.Unmarshal([]byte(body), &p); code != 200 || err != nil {
			t.Fatalf("GET %s = %d %s", path, code, body)
		}
		return p
	}
	idsOf := func(p page) []string {
		var out []string
		for _, j := range p.Jobs {
			out = append(out, j.ID)
		}
		return out
	}
	// Newest first, two a page, following next to the end.
	var all []string
	p := get("/api/v1/jobs?limit=2")
	for pages := 1; ; pages++ {
		all = append(all, idsOf(p)...)
		if p.Next == "" {
			break
		}
		if pages > 5 {
			t.Fatal("pagination does not end")
		}
		p = get(p.Next)
	}
	want := slices.Clone(ids)
	slices.Reverse(want)
	if !slices.Equal(all, want) {
		t.Fatalf("pages gave %v, want %v", all, want)
	}
	if got := idsOf(get("/api/v1/jobs?type=primes")); !slices.Equal(got, []string{ids[3], ids[1]}) {
		t.Fatalf("type=primes gave %v", got)
	}
	// One clock read a submit: ids[3] was submitted at 12:00:04.
	if got := idsOf(get("/api/v1/jobs?state=queued&since=2026-11-21T12:00:04Z")); !slices.Equal(got, []string{ids[4], ids[3]}) {
		t.Fatalf("since gave %v, want the last two", got)
	}
	if got := get("/api/v1/jobs?state=running"); len(got.Jobs) != 0 {
		t.Fatalf("state=running gave %v", got)
	}
	// Search by id or its start: storage lists only those ids.
	if got := idsOf(get("/api/v1/jobs?prefix=20261121-120003")); !slices.Equal(got, []string{ids[2]}) {
		t.Fatalf("prefix=20261121-120003 gave %v, want %s", got, ids[2])
	}
	if got := idsOf(get("/api/v1/jobs?prefix=" + ids[4])); !slices.Equal(got, []string{ids[4]}) {
		t.Fatalf("prefix of a whole id gave %v", got)
	}
	if got := idsOf(get("/api/v1/jobs?prefix=2026112&type=pi")); !slices.Equal(got, []string{ids[4], ids[2], ids[0]}) {
		t.Fatalf("prefix with type gave %v", got)
	}
	if got := get("/api/v1/jobs?prefix=2025"); len(got.Jobs) != 0 {
		t.Fatalf("prefix=2025 gave %v", got)
	}
	if code, body := e.do(t, "GET", "/api/v1/jobs?prefix=2026%2F..", "", ""); code != 400 || !strings.Contains(body, `prefix \"2026/..\": a job id or its start`) {
		t.Errorf("bad prefix = %d %s; want 400 saying what a prefix is", code, body)
	}
	for _, q := range []string{"limit=0x", "limit=5000", "state=done", "since=yesterday", "before=../x", "colour=red", "prefix=ABC"} {
		if code, body := e.do(t, "GET", "/api/v1/jobs?"+q, "", ""); code != 400 || !strings.Contains(body, `"error"`) {
			t.Errorf("GET ?%s = %d %s; want 400", q, code, body)
		}
	}
}

// The document's output formats are the ones a keyed job can store.
func TestAPI_OpenAPIOutputFormats(t *testing.T) {
	var doc struct {
		Components struct {
			Schemas struct {
				SubmitRequest struct {
					Properties map[string]struct {
						Enum []string `json:"enum"`
					} `json:"properties"`
				}
			} `json:"schemas"`
		} `json:"components"`
	}
	if err := json.Unmarshal(openAPIDoc, &doc); err != nil {
		t.Fatal(err)
	}
	got := doc.Components.Schemas.SubmitRequest.Properties["output_format"].Enum
	if !slices.Equal(got, jobs.OutputFormats()) {
		t.Fatalf("openapi.json: output_format %v, want %v", got, jobs.OutputFormats())
	}
}

// The document lists exactly the routes the server serves, and each of them answers (no 404 or
// 405 from the router).
func TestAPI_OpenAPIMatchesRoutes(t *testing.T) {
	e := newAPIEnv(t, Config{Token: []byte(testToken)})
	code, body := e.do(t, "GET", "/api/v1/openapi.json", "", "")
	var doc struct {
		OpenAPI string                                `json:"openapi"`
		Paths   map[string]map[string]json.RawMessage `json:"paths"`
	}
	if err := json.Unmarshal([]byte(body), &doc); code != 200 || err != nil || !strings.HasPrefix(doc.OpenAPI, "3.") {
		t.Fatalf("openapi.json: %d %v %.200s", code, err, body)
	}
	var documented, served []string
	for path, ops := range doc.Paths {
		for m := range ops {
			if m != "parameters" {
				documented = append(documented, strings.ToUpper(m)+" "+path)
			}
		}
	}
	for _, rt := range routes {
		served = append(served, rt.method+" "+rt.path)
	}
	served = append(served, "GET "+Prefix+"/openapi.json")
	served = append(served, opsRoutes...)
	slices.Sort(documented)
	slices.Sort(served)
	if !slices.Equal(documented, served) {
		t.Fatalf("openapi.json documents\n%v\nthe server serves\n%v", documented, served)
	}
	for _, r := range served {
		method, path, _ := strings.Cut(r, " ")
		path = strings.ReplaceAll(path, "{id}", "20261121-000000-00000000")
		path = strings.ReplaceAll(path, "{name}", "no-such-schedule")
		code, body := e.do(t, method, path, testToken, "")
		if code == 405 || (code == 404 && !strings.Contains(body, "no such")) {
			t.Errorf("%s %s = %d %s: the router does not serve a documented route", method, path, code, body)
		}
	}
}

// The dashboard's cancel: the token works; --dashboard-cancel works only from the page itself.
func TestDashboard_CancelNeedsTokenOrSameOrigin(t *testing.T) {
	for _, tc := range []struct {
		name         string
		dashCancel   bool
		token        string
		header       []string
		code         int
		wantCanceled bool
	}{
		{"cross-site form", true, "", []string{"Origin", "https://evil.example.com", "Sec-Fetch-Site", "cross-site"}, 403, false},
		{"no proof", true, "", nil, 403, false},
		{"same origin", true, "", []string{"Sec-Fetch-Site", "same-origin"}, 200, true},
		{"flag off", false, "", []string{"Sec-Fetch-Site", "same-origin"}, 403, false},
		{"token", false, testToken, nil, 200, true},
		{"wrong token", true, "not-the-token-at-all", []string{"Sec-Fetch-Site", "same-origin"}, 401, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newAPIEnv(t, Config{Token: []byte(testToken), DashboardCancel: tc.dashCancel})
			id, err := e.cl.Submit(context.Background(), "pi", json.RawMessage(`{"samples":1000,"shards":2}`))
			if err != nil {
				t.Fatal(err)
			}
			code, body := e.do(t, "POST", "/api/jobs/"+id+"/cancel", tc.token, "", tc.header...)
			ok, _ := e.jobs.Exists(context.Background(), protocol.CancelBlob(id))
			if code != tc.code || ok != tc.wantCanceled {
				t.Fatalf("cancel = %d %s, marker %v; want %d, marker %v", code, body, ok, tc.code, tc.wantCanceled)
			}
		})
	}
}

// fakeJobs accepts every job: the fuzz target checks the decoder, not storage.
type fakeJobs struct{ JobService }

func (fakeJobs) Submit(context.Context, string, json.RawMessage, ...client.SubmitOption) (string, error) {
	return "20261121-000000-00000000", nil
}

func FuzzAPI_SubmitBody(f *testing.F) {
	for _, s := range []string{`{"type":"pi","params":{"samples":1}}`, `{"type":`, `[]`, `{"type":"x","after":["a"],"priority":1}`, `{"type":"x","output_format":"tsv.zst"}`, `{"type":1}`, ""} {
		f.Add([]byte(s))
	}
	h, err := New(Config{Jobs: fakeJobs{}, Token: []byte(testToken), Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		req := httptest.NewRequest("POST", "/api/v1/jobs", bytes.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+testToken)
		w := httptest.NewRecorder()
		h.ServeHTTP(w, req)
		switch w.Code {
		case 201, 400, 413:
		default:
			t.Fatalf("body %q: status %d %s", body, w.Code, w.Body)
		}
		if w.Code != 201 && !json.Valid(w.Body.Bytes()) {
			t.Fatalf("error body is not JSON: %s", w.Body)
		}
	})
}

// A job over an input container that does not exist gets a 400 naming the container and the
// field, from client.Submit's one check; nothing is written.
func TestAPI_Submit_MissingInputContainer(t *testing.T) {
	e := newAPIEnv(t, Config{Token: []byte(testToken)})
	bc, err := store.NewClient(testenv.Azurite(t))
	if err != nil {
		t.Fatal(err)
	}
	e.cl.Containers = store.NewEnv(bc)
	missing := testenv.Name(t, "nope")
	code, body := e.do(t, "POST", "/api/v1/jobs", testToken, `{"type":"wordcount","params":{"container":"`+missing+`"}}`)
	var out map[string]string
	if err := json.Unmarshal([]byte(body), &out); code != 400 || err != nil || out["field"] != "container" ||
		!strings.Contains(out["error"], `input container "`+missing+`" does not exist`) {
		t.Fatalf("POST over a missing container: %d %s; want 400, field container, naming %s", code, body, missing)
	}
	if b, q := e.written(t); b != 0 || q != 0 {
		t.Fatalf("a refused submit wrote %d blobs and %d queue messages", b, q)
	}
}
