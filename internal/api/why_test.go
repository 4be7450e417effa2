package api

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/mapagg/mapagg/internal/harness/testenv"
	"github.com/mapagg/mapagg/internal/why"
)

// GET /api/v1/jobs/{id}/why says what a queued job waits for: a worker with its type (asked over
// NATS; none answers here) and the job queued before it. A missing job is a 404, a bad id a 400.
func TestAPI_Why(t *testing.T) {
	nc, err := nats.Connect(testenv.NATS(t))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	e := newAPIEnv(t, Config{Token: []byte(testToken)})
	s, err := New(Config{Jobs: e.cl, Why: &why.Asker{Jobs: e.cl, Conn: nc, Subject: why.Subject("apiwhy"), Window: 100 * time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	e.srv.Config.Handler = s
	clock := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	e.cl.Now = func() time.Time { clock = clock.Add(time.Second); return clock }
	first, err := e.cl.Submit(context.Background(), "pi", json.RawMessage(`{"samples":1000,"shards":2}`))
	if err != nil {
		t.Fatal(err)
	}
	id, err := e.cl.Submit(context.Background(), "pi", json.RawMessage(`{"samples":1000,"shards":2}`))
	if err != nil {
		t.Fatal(err)
	}
	code, body := e.do(t, "GET", "/api/v1/jobs/"+id+"/why", "", "")
	var ans why.Answer
	if err := json.Unmarshal([]byte(body), &ans); code != 200 || err != nil || ans.Job != id || ans.State != "queued" {
		t.Fatalf("GET why = %d %s (%v)", code, body, err)
	}
	var kinds []string
	for _, r := range ans.Reasons {
		kinds = append(kinds, r.Kind+": "+r.Text)
	}
	all := strings.Join(kinds, "\n")
	if !strings.Contains(all, "no_worker: no worker answered") || !strings.Contains(all, "queue: queued behind 1 job(s) submitted before it (the oldest "+first+")") {
		t.Errorf("reasons:\n%s", all)
	}
	if code, body := e.do(t, "GET", "/api/v1/jobs/20261129-000000-00000000/why", "", ""); code != 404 {
		t.Errorf("a missing job: %d %s", code, body)
	}
	if code, _ := e.do(t, "GET", "/api/v1/jobs/BAD/why", "", ""); code != 400 {
		t.Errorf("a bad id: %d", code)
	}
	bare, _ := New(Config{Jobs: e.cl})
	e.srv.Config.Handler = bare
	if code, body := e.do(t, "GET", "/api/v1/jobs/"+id+"/why", "", ""); code != 503 || !strings.Contains(body, "cannot say why") {
		t.Errorf("without Why: %d %s", code, body)
	}
}
