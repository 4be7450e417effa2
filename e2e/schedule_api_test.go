package e2e

import (
	"encoding/json"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/mapagg/mapagg/internal/harness/testenv"
)

// A schedule over HTTP against a follower of a real cluster: added with the token, its ticks
// make jobs that show the schedule, the last job is exact, pause stops the next tick, trigger
// makes a job now, a failed job is retried, delete removes it.
func TestAPI_ScheduleOverHTTP(t *testing.T) {
	_, base, tokenFile := apiCluster(t)
	tok, _ := os.ReadFile(tokenFile)
	token := strings.TrimSpace(string(tok))
	body := `{"name":"often","every":"1s","type":"sleep","params":{"shards":2},"overlap":"allow"}`
	if code, resp := call(t, "POST", base+"/api/v1/schedules", "", body); code != 401 {
		t.Fatalf("POST without the token = %d %s; want 401", code, resp)
	}
	if code, resp := call(t, "POST", base+"/api/v1/schedules", token, body); code != 201 {
		t.Fatalf("POST = %d %s; want 201", code, resp)
	}
	var s struct {
		LastJob  string     `json:"last_job"`
		Fired    int        `json:"fired"`
		Paused   bool       `json:"paused"`
		NextTick *time.Time `json:"next_tick"`
	}
	testenv.Eventually(t, 30*time.Second, 200*time.Millisecond, func() bool {
		_, resp := call(t, "GET", base+"/api/v1/schedules/often", "", "")
		_ = json.Unmarshal([]byte(resp), &s)
		return s.Fired >= 3 && s.LastJob != ""
	}, "the schedule fires three ticks (fired %d)", s.Fired)
	var job struct {
		State    string `json:"state"`
		Schedule string `json:"schedule"`
	}
	testenv.Eventually(t, 30*time.Second, 200*time.Millisecond, func() bool {
		_, resp := call(t, "GET", base+"/api/v1/jobs/"+s.LastJob, "", "")
		_ = json.Unmarshal([]byte(resp), &job)
		return job.State == "succeeded"
	}, "the last tick's job %s succeeds (state %q)", s.LastJob, job.State)
	if job.Schedule != "often" {
		t.Fatalf("the tick's job names schedule %q, want often", job.Schedule)
	}
	if code, resp := call(t, "GET", base+"/api/v1/jobs/"+s.LastJob+"/result", "", ""); code != 200 || strings.TrimSpace(resp) != `{"shards":2,"index_sum":1}` {
		t.Fatalf("the tick's result = %d %s", code, resp)
	}
	if code, resp := call(t, "POST", base+"/api/v1/schedules/often/pause", token, ""); code != 200 {
		t.Fatalf("pause = %d %s", code, resp)
	}
	_, resp := call(t, "GET", base+"/api/v1/schedules", "", "")
	if !strings.Contains(resp, `"paused":true`) || strings.Contains(resp, "next_tick") {
		t.Fatalf("a paused schedule = %s; want paused, no next tick", resp)
	}
	code, resp := call(t, "POST", base+"/api/v1/schedules/often/trigger", token, "")
	var trig struct{ ID string }
	if err := json.Unmarshal([]byte(resp), &trig); code != 201 || err != nil || trig.ID == "" {
		t.Fatalf("trigger = %d %s; want 201 and an id", code, resp)
	}
	// A job that fails, retried over HTTP: the retry's detail lists both attempts.
	code, resp = call(t, "POST", base+"/api/v1/jobs", token, `{"type":"sleep","params":{"shards":1,"fail_always":[0]}}`)
	var bad struct{ ID string }
	if err := json.Unmarshal([]byte(resp), &bad); code != 201 || err != nil {
		t.Fatalf("POST a failing job = %d %s", code, resp)
	}
	testenv.Eventually(t, 60*time.Second, 200*time.Millisecond, func() bool {
		_, resp := call(t, "GET", base+"/api/v1/jobs/"+bad.ID, "", "")
		return strings.Contains(resp, `"state":"failed"`)
	}, "job %s fails", bad.ID)
	code, resp = call(t, "POST", base+"/api/v1/jobs/"+bad.ID+"/retry", token, "")
	var again struct{ ID string }
	if err := json.Unmarshal([]byte(resp), &again); code != 201 || err != nil {
		t.Fatalf("retry = %d %s; want 201", code, resp)
	}
	if _, resp = call(t, "GET", base+"/api/v1/jobs/"+again.ID, "", ""); !strings.Contains(resp, `"attempts":[{"id":"`+bad.ID+`","state":"failed"`) {
		t.Fatalf("the retry's detail = %s; want its attempts from %s", resp, bad.ID)
	}
	if code, resp := call(t, "DELETE", base+"/api/v1/schedules/often", token, ""); code != 200 {
		t.Fatalf("delete = %d %s", code, resp)
	}
	if code, _ := call(t, "GET", base+"/api/v1/schedules/often", "", ""); code != 404 {
		t.Fatalf("GET a deleted schedule = %d; want 404", code)
	}
}
