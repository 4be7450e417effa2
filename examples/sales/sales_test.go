package main

import (
	"strings"
	"testing"

	"github.com/mapagg/mapagg/jobs/jobstest"
)

// The job against the sequential reference, in shuffled orders and re-runs (jobstest).
func TestSales(t *testing.T) {
	env := jobstest.NewEnv()
	env.Put("data", "sales/2026-11.csv", []byte("customer,cents\nann,120\nbob,5\nann,30\n\n"))
	env.Put("data", "sales/2026-12.csv", []byte("customer,cents\ncy,7\nbob,10\n"))
	recs, err := jobstest.CheckKeyed(salesJob(), env, `{"container": "data", "prefix": "sales/", "shard_bytes": 7}`)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, r := range recs {
		k, v, _ := strings.Cut(r.String(), "\t")
		got[k] = v
	}
	if len(got) != 3 || got["ann"] != "150" || got["bob"] != "15" || got["cy"] != "7" {
		t.Fatalf("totals %v", got)
	}
	env.Put("data", "bad/x.csv", []byte("ann,12.5\n"))
	if _, err := jobstest.CheckKeyed(salesJob(), env, `{"container": "data", "prefix": "bad/"}`); err == nil ||
		!strings.Contains(err.Error(), `parsing "12.5": invalid syntax`) || !strings.Contains(err.Error(), "bad/x.csv") {
		t.Errorf("a bad amount: %v", err)
	}
}
