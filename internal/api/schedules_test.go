package api

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/mapagg/mapagg/client"
	"github.com/mapagg/mapagg/internal/protocol"
	"github.com/mapagg/mapagg/jobs"
	"github.com/mapagg/mapagg/store"
)

// finish writes job id's checkpoint as a leader would: ended in state, seq checkpoints written.
func (e *apiEnv) finish(t *testing.T, id string, state jobs.State, seq uint64) {
	t.Helper()
	now := time.Now().UTC()
	cp := protocol.Checkpoint{Version: protocol.CheckpointVersion, Job: id, Type: "pi", State: state, PlanEpoch: 2,
		WriterEpoch: 3, Total: 2, Dispatched: 2, Seq: seq, Error: "shard 1 failed", UpdatedAt: now, FinishedAt: &now}
	data, err := cp.Encode()
	if err != nil {
		t.Fatal(err)
	}
	meta, err := protocol.NewStatusRecord(&cp, nil).Metadata()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.jobs.PutMeta(context.Background(), protocol.CheckpointBlob(id), data, meta, store.Cond{}); err != nil {
		t.Fatal(err)
	}
}

func TestAPI_ScheduleCycle(t *testing.T) {
	e := newAPIEnv(t, Config{Token: []byte(testToken)})
	good := `{"name":"nightly","every":"1h","type":"pi","params":{"samples":1000,"shards":2}}`
	for _, tc := range []struct {
		name, token, body string
		code              int
		want              string
	}{
		{"no token", "", good, 401, "Authorization: Bearer"},
		{"wrong token", "not-the-token-at-all", good, 401, "does not match"},
		{"not JSON", testToken, `{"name":`, 400, "not valid JSON"},
		{"unknown field", testToken, `{"name":"a","every":"1h","type":"pi","evry":"1h"}`, 400, "evry"},
		{"no name", testToken, `{"every":"1h","type":"pi"}`, 400, `"field":"name"`},
		{"no type", testToken, `{"name":"a","every":"1h"}`, 400, `"field":"type"`},
		{"neither every nor cron", testToken, `{"name":"a","type":"pi"}`, 400, `"field":"every"`},
		{"both", testToken, `{"name":"a","every":"1h","cron":"* * * * *","type":"pi"}`, 400, `"field":"every"`},
		{"bad every", testToken, `{"name":"a","every":"soon","type":"pi"}`, 400, `soon`},
		{"bad catch-up", testToken, `{"name":"a","every":"1h","type":"pi","catch_up":"-1s"}`, 400, `"field":"catch_up"`},
		{"bad cron", testToken, `{"name":"a","cron":"every day","type":"pi","params":{"samples":1000,"shards":2}}`, 400, "cron"},
		{"bad name", testToken, `{"name":"Nightly","every":"1h","type":"pi","params":{"samples":1000,"shards":2}}`, 400, "a-z"},
		{"unknown type", testToken, `{"name":"a","every":"1h","type":"prime"}`, 400, "unknown job type"},
		{"bad params", testToken, `{"name":"a","every":"1h","type":"pi","params":{"samples":0,"shards":2}}`, 400, "samples"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, body := e.do(t, "POST", "/api/v1/schedules", tc.token, tc.body)
			if code != tc.code || !strings.Contains(body, tc.want) {
				t.Fatalf("POST /api/v1/schedules = %d %s; want %d containing %q", code, body, tc.code, tc.want)
			}
			if b, q := e.written(t); b != 0 || q != 0 {
				t.Fatalf("a refused schedule wrote %d blobs, %d messages", b, q)
			}
		})
	}

	code, body := e.do(t, "POST", "/api/v1/schedules", testToken, good)
	if code != 201 || !strings.Contains(body, `"name":"nightly"`) || !strings.Contains(body, `"next_tick"`) {
		t.Fatalf("POST = %d %s; want 201 with the next tick", code, body)
	}
	if code, body = e.do(t, "POST", "/api/v1/schedules", testToken, good); code != 409 || !strings.Contains(body, "exists") {
		t.Fatalf("POST again = %d %s; want 409", code, body)
	}
	code, body = e.do(t, "GET", "/api/v1/schedules", "", "")
	var list struct {
		Schedules []struct {
			Name     string     `json:"name"`
			Paused   bool       `json:"paused"`
			NextTick *time.Time `json:"next_tick"`
			LastJob  string     `json:"last_job"`
		} `json:"schedules"`
	}
	if err := json.Unmarshal([]byte(body), &list); code != 200 || err != nil || len(list.Schedules) != 1 || list.Schedules[0].NextTick == nil {
		t.Fatalf("GET schedules = %d %s (%v)", code, body, err)
	}

	// Pause: refused without the token, then paused with no next tick; resume brings it back.
	if code, _ := e.do(t, "POST", "/api/v1/schedules/nightly/pause", "", ""); code != 401 {
		t.Fatalf("pause without the token = %d; want 401", code)
	}
	if code, body = e.do(t, "POST", "/api/v1/schedules/nightly/pause", testToken, ""); code != 200 || !strings.Contains(body, `"paused":true`) {
		t.Fatalf("pause = %d %s", code, body)
	}
	if code, body = e.do(t, "GET", "/api/v1/schedules/nightly", "", ""); code != 200 || !strings.Contains(body, `"paused":true`) || strings.Contains(body, "next_tick") {
		t.Fatalf("GET a paused schedule = %d %s; want paused, no next tick", code, body)
	}
	if code, body = e.do(t, "POST", "/api/v1/schedules/nightly/resume", testToken, ""); code != 200 {
		t.Fatalf("resume = %d %s", code, body)
	}
	if code, body = e.do(t, "GET", "/api/v1/schedules/nightly", "", ""); code != 200 || strings.Contains(body, `"paused":true`) || !strings.Contains(body, "next_tick") {
		t.Fatalf("GET a resumed schedule = %d %s", code, body)
	}

	// Trigger makes the schedule's job now; it shows the schedule.
	code, body = e.do(t, "POST", "/api/v1/schedules/nightly/trigger", testToken, "")
	var trig struct{ ID string }
	if err := json.Unmarshal([]byte(body), &trig); code != 201 || err != nil || protocol.CheckID(trig.ID) != nil {
		t.Fatalf("trigger = %d %s; want 201 and a job id", code, body)
	}
	if code, body = e.do(t, "GET", "/api/v1/jobs/"+trig.ID, "", ""); code != 200 || !strings.Contains(body, `"schedule":"nightly"`) {
		t.Fatalf("the triggered job = %d %s; want it to name its schedule", code, body)
	}

	for path, want := range map[string]int{
		"/api/v1/schedules/none":     404,
		"/api/v1/schedules/Bad_Name": 400,
	} {
		if code, body := e.do(t, "GET", path, "", ""); code != want {
			t.Errorf("GET %s = %d %s; want %d", path, code, body, want)
		}
	}
	if code, _ := e.do(t, "POST", "/api/v1/schedules/none/trigger", testToken, ""); code != 404 {
		t.Fatalf("trigger of a missing schedule = %d; want 404", code)
	}

	// Delete: refused without the token; then gone.
	if code, _ := e.do(t, "DELETE", "/api/v1/schedules/nightly", "", ""); code != 401 {
		t.Fatalf("DELETE without the token = %d; want 401", code)
	}
	if code, body = e.do(t, "DELETE", "/api/v1/schedules/nightly", testToken, ""); code != 200 || !strings.Contains(body, `"deleted":true`) {
		t.Fatalf("DELETE = %d %s", code, body)
	}
	if code, _ = e.do(t, "GET", "/api/v1/schedules/nightly", "", ""); code != 404 {
		t.Fatalf("GET a deleted schedule = %d; want 404", code)
	}
	if code, _ = e.do(t, "DELETE", "/api/v1/schedules/nightly", testToken, ""); code != 404 {
		t.Fatalf("DELETE a deleted schedule = %d; want 404", code)
	}
}

// Retry over the API, and the job's attempts and checkpoint in its detail (metadata only).
func TestAPI_RetryAndHistory(t *testing.T) {
	e := newAPIEnv(t, Config{Token: []byte(testToken)})
	ctx := context.Background()
	orig, err := e.cl.Submit(ctx, "pi", json.RawMessage(`{"samples":1000,"shards":2}`))
	if err != nil {
		t.Fatal(err)
	}
	if code, body := e.do(t, "POST", "/api/v1/jobs/"+orig+"/retry", testToken, ""); code != 409 || !strings.Contains(body, "queued") {
		t.Fatalf("retry of a queued job = %d %s; want 409", code, body)
	}
	e.finish(t, orig, jobs.StateFailed, 7)

	code, body := e.do(t, "GET", "/api/v1/jobs/"+orig, "", "")
	var d JobJSON
	if err := json.Unmarshal([]byte(body), &d); code != 200 || err != nil {
		t.Fatalf("GET = %d %s", code, body)
	}
	if len(d.Attempts) != 1 || d.Attempts[0].ID != orig || d.Attempts[0].State != jobs.StateFailed ||
		d.Checkpoint == nil || d.Checkpoint.Writes != 7 || d.Checkpoint.Epoch != 3 || d.Checkpoint.PlanEpoch != 2 || d.Checkpoint.Bytes <= 0 {
		t.Fatalf("detail = %s; want one failed attempt and the checkpoint's seq 7, epochs 3/2, its size", body)
	}

	blobs, _ := e.written(t)
	if code, _ := e.do(t, "POST", "/api/v1/jobs/"+orig+"/retry", "", ""); code != 401 {
		t.Fatalf("retry without the token = %d; want 401", code)
	}
	if b, _ := e.written(t); b != blobs {
		t.Fatal("a refused retry wrote")
	}
	code, body = e.do(t, "POST", "/api/v1/jobs/"+orig+"/retry", testToken, "")
	var r struct {
		ID      string `json:"id"`
		RetryOf string `json:"retry_of"`
	}
	if err := json.Unmarshal([]byte(body), &r); code != 201 || err != nil || r.RetryOf != orig || r.ID == orig {
		t.Fatalf("retry = %d %s; want 201 and a new id", code, body)
	}
	// The retry fails too, and the leader retries it automatically (at the id it derives).
	e.finish(t, r.ID, jobs.StateFailed, 3)
	auto, _ := protocol.RetryJobID(r.ID)
	spec := protocol.Spec{ID: auto, Type: "pi", Params: json.RawMessage(`{"samples":1000,"shards":2}`), RetryOf: r.ID, SubmittedAt: time.Now().UTC()}
	data, err := spec.Encode()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.jobs.Put(ctx, protocol.SpecBlob(auto), data, store.Cond{}); err != nil {
		t.Fatal(err)
	}
	code, body = e.do(t, "GET", "/api/v1/jobs/"+r.ID, "", "")
	if err := json.Unmarshal([]byte(body), &d); code != 200 || err != nil {
		t.Fatalf("GET = %d %s", code, body)
	}
	var ids []string
	for _, a := range d.Attempts {
		ids = append(ids, a.ID+":"+string(a.State))
	}
	if want := orig + ":failed " + r.ID + ":failed " + auto + ":queued"; strings.Join(ids, " ") != want {
		t.Fatalf("attempts = %v; want %s", ids, want)
	}
	if code, body = e.do(t, "GET", "/api/v1/jobs/"+auto, "", ""); code != 200 || strings.Contains(body, `"checkpoint"`) || !strings.Contains(body, `"retry_of":"`+r.ID+`"`) {
		t.Fatalf("GET a queued retry = %d %s; want no checkpoint and its retry_of", code, body)
	}
}

// The dashboard's retry and delete follow cancel's rules: the token, or --dashboard-cancel and
// the page's own origin.
func TestDashboard_RetryAndDeleteNeedTokenOrSameOrigin(t *testing.T) {
	for _, tc := range []struct {
		name       string
		dashCancel bool
		token      string
		header     []string
		code       int
	}{
		{"cross-site", true, "", []string{"Origin", "https://evil.example.com", "Sec-Fetch-Site", "cross-site"}, 403},
		{"no proof", true, "", nil, 403},
		{"flag off", false, "", []string{"Sec-Fetch-Site", "same-origin"}, 403},
		{"wrong token", true, "not-the-token-at-all", []string{"Sec-Fetch-Site", "same-origin"}, 401},
		{"same origin", true, "", []string{"Sec-Fetch-Site", "same-origin"}, 0},
		{"token", false, testToken, nil, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newAPIEnv(t, Config{Token: []byte(testToken), DashboardCancel: tc.dashCancel})
			ctx := context.Background()
			id, err := e.cl.Submit(ctx, "pi", json.RawMessage(`{"samples":1000,"shards":2}`))
			if err != nil {
				t.Fatal(err)
			}
			e.finish(t, id, jobs.StateCancelled, 1)
			want := tc.code
			if want == 0 {
				want = 201
			}
			code, body := e.do(t, "POST", "/api/jobs/"+id+"/retry", tc.token, "", tc.header...)
			if code != want {
				t.Fatalf("retry = %d %s; want %d", code, body, want)
			}
			if want == 0 || want == 201 {
				want = 200
			}
			code, body = e.do(t, "POST", "/api/jobs/"+id+"/delete", tc.token, "", tc.header...)
			ok, _ := e.jobs.Exists(ctx, protocol.SpecBlob(id))
			if code != want || ok != (want != 200) {
				t.Fatalf("delete = %d %s, spec left %v; want %d", code, body, ok, want)
			}
		})
	}
}

// fakeSchedules accepts every schedule: the fuzz target checks the decoder, not storage.
type fakeSchedules struct{ ScheduleService }

func (fakeSchedules) AddSchedule(_ context.Context, name string, o client.ScheduleOptions) (*client.ScheduleInfo, error) {
	return &client.ScheduleInfo{Name: name, Type: o.Type}, nil
}

func FuzzAPI_ScheduleBody(f *testing.F) {
	for _, s := range []string{`{"name":"a","every":"1h","type":"pi","params":{"samples":1}}`, `{"name":"a","cron":"0 3 * * *","type":"pi"}`,
		`{"name":`, `[]`, `{"name":"a","every":"-1s","type":"pi"}`, `{"name":"a","every":"1h","type":"pi","catch_up":"x"}`, ""} {
		f.Add([]byte(s))
	}
	h, err := New(Config{Jobs: fakeJobs{}, Schedules: fakeSchedules{}, Token: []byte(testToken), Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		req := httptest.NewRequest("POST", "/api/v1/schedules", bytes.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+testToken)
		w := httptest.NewRecorder()
		h.ServeHTTP(w, req)
		switch w.Code {
		case 201, 400, 413:
		default:
			t.Fatalf("body %q: status %d %s", body, w.Code, w.Body)
		}
		if !json.Valid(w.Body.Bytes()) {
			t.Fatalf("answer is not JSON: %s", w.Body)
		}
	})
}
