package api

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
)

// POST /api/v1/jobs with "after" submits a job that waits, as `submit --after` does, and keeps
// its priority; a missing predecessor is refused (404) and writes nothing.
func TestAPI_SubmitAfter(t *testing.T) {
	e := newAPIEnv(t, Config{Token: []byte(testToken)})
	const job = `"type":"pi","params":{"samples":1000,"shards":2}`
	code, body := e.do(t, "POST", "/api/v1/jobs", testToken, `{`+job+`}`)
	var first struct{ ID string }
	if err := json.Unmarshal([]byte(body), &first); code != 201 || err != nil {
		t.Fatalf("POST = %d %s", code, body)
	}
	code, body = e.do(t, "POST", "/api/v1/jobs", testToken, `{`+job+`,"after":["`+first.ID+`"],"priority":5}`)
	var second struct{ ID string }
	if err := json.Unmarshal([]byte(body), &second); code != 201 || err != nil {
		t.Fatalf("POST after %s = %d %s", first.ID, code, body)
	}
	s, err := e.cl.Status(context.Background(), second.ID)
	if err != nil || len(s.After) != 1 || s.After[0] != first.ID || s.Priority != 5 {
		t.Fatalf("status of the job after %s: %+v %v; want after it, priority 5", first.ID, s, err)
	}
	blobs, msgs := e.written(t)
	code, body = e.do(t, "POST", "/api/v1/jobs", testToken, `{`+job+`,"after":["20261121-000000-00000000"]}`)
	if code != 404 || !strings.Contains(body, "no such job") {
		t.Fatalf("after a missing job = %d %s; want 404 naming it", code, body)
	}
	if b, q := e.written(t); b != blobs || q != msgs {
		t.Fatalf("a refused submit wrote: %d blobs, %d messages; had %d, %d", b, q, blobs, msgs)
	}
}
