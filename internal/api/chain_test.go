package api

import (
	"strings"
	"testing"
)

// POST /api/v1/schedules takes a chain's later steps as "then", validated like the first; a
// refused one writes nothing.
func TestAPI_ScheduleChain(t *testing.T) {
	e := newAPIEnv(t, Config{Token: []byte(testToken)})
	const head = `{"name":"c","every":"1h","type":"pi","params":{"samples":1000,"shards":2},"then":`
	for body, want := range map[string]string{
		head + `[{"type":"regroup","params":{"job":"$prev","by":"nope"}}]}`: `chain step 2: bad parameters for regroup: \"by\" must be`,
		head + `[{"type":"","params":{}}]}`:                                 "chain step 2: no job type",
		head + `[{"type":"sleep","parms":{}}]}`:                             "parms",
	} {
		code, got := e.do(t, "POST", "/api/v1/schedules", testToken, body)
		if code != 400 || !strings.Contains(got, want) {
			t.Errorf("POST %s = %d %s; want 400 with %q", body, code, got, want)
		}
		if b, q := e.written(t); b != 0 || q != 0 {
			t.Fatalf("a refused chain wrote %d blobs, %d messages", b, q)
		}
	}
	code, got := e.do(t, "POST", "/api/v1/schedules", testToken, head+`[{"type":"regroup","params":{"job":"$prev","by":"value"}}]}`)
	if code != 201 || !strings.Contains(got, `"then":[{"type":"regroup","params":{"job":"$prev","by":"value"}}]`) {
		t.Fatalf("POST a chain = %d %s", code, got)
	}
}
