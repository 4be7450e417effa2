package builtin

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/mapagg/mapagg/jobs"
	"github.com/mapagg/mapagg/jobs/jobstest"
)

// wordcount with "output":"blob" gives every word's count (jobstest runs it as the cluster
// would: shuffled, combined, re-run), equal to strings.Fields, each partition sorted.
func TestWordcountKeyed_EveryWordCounted(t *testing.T) {
	env := jobstest.NewEnv()
	want := map[string]int{}
	for b := range 3 {
		var sb strings.Builder
		for i := range 400 {
			fmt.Fprintf(&sb, "w%d ünï%d\u3000x\t%d\n", (i*7+b)%97, i%11, b)
		}
		for _, w := range strings.Fields(sb.String()) {
			want[w]++
		}
		env.Put("texts", fmt.Sprintf("in/%d", b), []byte(sb.String()))
	}
	params := `{"container":"texts","prefix":"in/","output":"blob","partitions":3,"shard_bytes":700}`
	if !(wordcount{}).RunsKeyed(json.RawMessage(params)) || (wordcount{}).RunsKeyed(json.RawMessage(`{"container":"texts"}`)) {
		t.Fatal("RunsKeyed does not follow \"output\"")
	}
	recs := jobstest.RunKeyed(t, wordcount{}.Keyed(), env, params)
	got := map[string]int{}
	for i, r := range recs {
		var w string
		if err := json.Unmarshal(r.Key, &w); err != nil {
			t.Fatal(err)
		}
		n, err := strconv.Atoi(string(r.Value))
		if err != nil {
			t.Fatal(err)
		}
		if jobs.PartitionOf([]byte(w), 3) != r.Partition || i > 0 && recs[i-1].Partition == r.Partition && string(recs[i-1].Key) >= string(r.Key) {
			t.Fatalf("record %d (%s) out of place", i, r)
		}
		got[w] = n
	}
	if len(got) != len(want) {
		t.Fatalf("%d words, want %d", len(got), len(want))
	}
	for w, n := range want {
		if got[w] != n {
			t.Fatalf("%q: %d, want %d", w, got[w], n)
		}
	}
}

func TestWordcountKeyed_BadParams(t *testing.T) {
	for _, p := range []string{
		`{"container":"texts","output":"file"}`,
		`{"container":"texts","partitions":4}`,
		`{"container":"texts","output":"blob","partitions":-1}`,
		`{"container":"texts","output":"blob","partitions":10001}`,
	} {
		var pe *jobs.ParamError
		if err := (wordcount{}).Validate(json.RawMessage(p)); !errors.As(err, &pe) {
			t.Errorf("%s: %v", p, err)
		}
	}
}
