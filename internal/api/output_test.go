package api

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/mapagg/mapagg/internal/harness/testoutput"
	"github.com/mapagg/mapagg/internal/protocol"
	"github.com/mapagg/mapagg/jobs"
	"github.com/mapagg/mapagg/store"
)

func TestAPI_Output(t *testing.T) {
	e := newAPIEnv(t, Config{})
	ctx := context.Background()
	id, aggID, runID, brokenID := "20261125-120000-0000beef", "20261125-120000-00000agg", "20261125-120000-00000run", "20261125-120000-0broken0"
	parts := [][]testoutput.Record{{{`"apple"`, `3`}, {`"b\tc"`, `{"n": 1}`}}, {{`"zebra"`, `9`}}}
	testoutput.Put(t, e.jobs, id, parts)
	m := testoutput.Put(t, e.jobs, brokenID, parts)
	if err := e.jobs.Delete(ctx, m.Partitions[0].Blob); err != nil {
		t.Fatal(err)
	}
	testoutput.PutState(t, e.jobs, aggID, jobs.StateSucceeded, []byte(`{"count":3}`))
	if _, err := e.jobs.Put(ctx, protocol.ResultBlob(aggID), []byte(`{"count":3}`), store.Cond{}); err != nil {
		t.Fatal(err)
	}
	testoutput.PutState(t, e.jobs, runID, jobs.StateRunning, nil)

	resp, err := http.Get(e.srv.URL + "/api/v1/jobs/" + id + "/output")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || string(body) != "apple\t3\nb\\tc\t{\"n\":1}\nzebra\t9\n" ||
		resp.Header.Get("X-Output-Records") != "3" || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/tab-separated-values") {
		t.Errorf("GET output = %d %v %q", resp.StatusCode, resp.Header, body)
	}
	for _, tc := range []struct {
		query string
		code  int
		want  string
	}{
		{id + "/output?partition=1&format=jsonl", 200, `{"key":"zebra","value":9}` + "\n"},
		{id + "/output?format=tsv&partition=0", 200, "apple\t3\nb\\tc\t{\"n\":1}\n"},
		{id + "/output?partition=2", 400, "has 2 partitions (0 to 1): no partition 2"},
		{id + "/output?partition=x", 400, `partition \"x\": want a partition number`},
		{id + "/output?partition=-1", 400, "numbered from 0"},
		{id + "/output?format=csv", 400, `output format \"csv\"`},
		{id + "/output?colour=red", 400, `unknown query parameter \"colour\"`},
		{"20261125-120000-0000none/output", 404, "no such job"},
		{runID + "/output", 409, "has not finished"},
		{aggID + "/output", 409, "GET /api/v1/jobs/" + aggID + "/result"},
		{brokenID + "/output", 503, "is missing"},
	} {
		code, body := e.do(t, "GET", "/api/v1/jobs/"+tc.query, "", "")
		if code != tc.code || !strings.Contains(body, tc.want) {
			t.Errorf("GET %s = %d %s; want %d and %q", tc.query, code, body, tc.code, tc.want)
		}
	}
	// A blob missing after the first bytes went out aborts the stream: the client sees an error,
	// not a short body that looks whole.
	var big []testoutput.Record
	for i := range 10000 {
		big = append(big, testoutput.Record{fmt.Sprintf(`"k%06d"`, i), `1`})
	}
	m2 := testoutput.Put(t, e.jobs, "20261125-120000-0broken1", [][]testoutput.Record{big, parts[1]})
	if err := e.jobs.Delete(ctx, m2.Partitions[1].Blob); err != nil {
		t.Fatal(err)
	}
	resp, err = http.Get(e.srv.URL + "/api/v1/jobs/20261125-120000-0broken1/output")
	if err != nil {
		t.Fatal(err)
	}
	_, rerr := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || rerr == nil {
		t.Errorf("stream cut mid-way: %d, read error %v; want 200 and a read error", resp.StatusCode, rerr)
	}
}
