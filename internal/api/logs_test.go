package api

import (
	"encoding/json"
	"log/slog"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/mapagg/mapagg/internal/harness/testenv"
	"github.com/mapagg/mapagg/internal/joblog"
	"github.com/mapagg/mapagg/store"
)

func TestAPI_JobLogs(t *testing.T) {
	e := newAPIEnv(t, Config{})
	bc, err := store.NewClient(testenv.Azurite(t))
	if err != nil {
		t.Fatal(err)
	}
	jl := joblog.New(bc, e.jobs.Name())
	s, err := New(Config{Jobs: e.cl, Schedules: e.cl, Token: []byte(testToken), Logs: jl, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	e.srv.Close()
	e.srv = httptest.NewServer(s)
	t.Cleanup(e.srv.Close)
	code, body := e.do(t, "POST", "/api/v1/jobs", testToken, `{"type":"primes","params":{"from":0,"to":100,"shards":1}}`)
	var sub struct{ ID string }
	if code != 201 || json.Unmarshal([]byte(body), &sub) != nil {
		t.Fatalf("submit: %d %s", code, body)
	}
	h := joblog.NewHandler(jl, sub.ID, "w3", 4, 1, "", nil)
	slog.New(h).Info("counted", "primes", 25)
	if err := h.Flush(t.Context()); err != nil {
		t.Fatal(err)
	}
	code, body = e.do(t, "GET", "/api/v1/jobs/"+sub.ID+"/logs", "", "")
	var page joblog.Page
	if code != 200 || json.Unmarshal([]byte(body), &page) != nil || len(page.Lines) != 1 || page.Lines[0].Msg != "counted" ||
		*page.Lines[0].Shard != 4 || page.Lines[0].Worker != "w3" || page.Next == 0 {
		t.Fatalf("logs: %d %s", code, body)
	}
	if code, body := e.do(t, "GET", "/api/v1/jobs/"+sub.ID+"/logs?offset="+jsonInt(page.Next), "", ""); code != 200 || !strings.Contains(body, `"lines":[]`) {
		t.Fatalf("logs from next: %d %s", code, body)
	}
	for _, q := range []string{"?offset=-1", "?limit=0", "?offset=x"} {
		if code, _ := e.do(t, "GET", "/api/v1/jobs/"+sub.ID+"/logs"+q, "", ""); code != 400 {
			t.Errorf("logs%s = %d; want 400", q, code)
		}
	}
	if code, _ := e.do(t, "GET", "/api/v1/jobs/20261128-000000-00000000/logs", "", ""); code != 404 {
		t.Errorf("logs of a missing job = %d; want 404", code)
	}
}

func jsonInt(n int64) string { b, _ := json.Marshal(n); return string(b) }
