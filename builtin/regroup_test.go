package builtin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/mapagg/mapagg/internal/protocol"
	"github.com/mapagg/mapagg/jobs"
	"github.com/mapagg/mapagg/jobs/jobstest"
)

// putOutput stores recs as job id's committed output in env's jobs container, as the cluster
// does: one JSON-lines blob per partition and the manifest as the job's result.
func putOutput(t *testing.T, env *jobstest.Env, id string, recs []jobstest.Record) {
	t.Helper()
	parts := 1
	for _, r := range recs {
		parts = max(parts, r.Partition+1)
	}
	bodies := make([]strings.Builder, parts)
	for _, r := range recs {
		fmt.Fprintf(&bodies[r.Partition], `{"key":%s,"value":%s}`+"\n", r.Key, r.Value)
	}
	m := protocol.OutputManifest{Kind: protocol.OutputKind, Format: protocol.OutputFormat, Container: jobs.DefaultJobsContainer}
	for p := range parts {
		blob := protocol.OutputBlob(id, p, 1)
		env.Put(jobs.DefaultJobsContainer, blob, []byte(bodies[p].String()))
		m.Partitions = append(m.Partitions, protocol.OutputPartition{Partition: p, Blob: blob, Bytes: int64(bodies[p].Len())})
		m.Bytes += int64(bodies[p].Len()) // the totals agree with the partitions, as the leader writes them
	}
	data, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	env.Put(jobs.DefaultJobsContainer, protocol.ResultBlob(id), data)
}

// records returns recs as key → value texts.
func records(recs []jobstest.Record) map[string]string {
	out := map[string]string{}
	for _, r := range recs {
		out[string(r.Key)] = string(r.Value)
	}
	return out
}

// A chain of three keyed jobs as the cluster runs them (jobstest: shuffled, combined, re-run),
// each reading the previous one's output: wordcount (word → count), regroup by value (count →
// words), regroup of all as key×value (the total) equals strings.Fields of the corpus.
func TestRegroup_ChainOfThree(t *testing.T) {
	env := jobstest.NewEnv()
	want := map[string]int{}
	total := 0
	for b := range 3 {
		var sb strings.Builder
		for i := range 500 {
			fmt.Fprintf(&sb, "w%d x%d\u3000ü%d\n", (i*i+b)%151, i%7, i%3)
		}
		for _, w := range strings.Fields(sb.String()) {
			want[w]++
			total++
		}
		env.Put("texts", fmt.Sprintf("in/%d", b), []byte(sb.String()))
	}
	counts := jobstest.RunKeyed(t, wordcount{}.Keyed(), env, `{"container":"texts","prefix":"in/","output":"blob","partitions":3,"shard_bytes":900}`)
	putOutput(t, env, "job-1", counts)

	byCount := jobstest.RunKeyed(t, regroup{}.Keyed(), env, `{"job":"job-1","by":"value","shard_bytes":500}`)
	putOutput(t, env, "job-2", byCount)
	wantByCount := map[string]string{}
	hist := map[int]int{}
	for _, n := range want {
		hist[n]++
	}
	for n, words := range hist {
		wantByCount[fmt.Sprint(n)] = fmt.Sprint(words)
	}
	if got := records(byCount); fmt.Sprint(got) != fmt.Sprint(wantByCount) {
		t.Fatalf("by value: %v, want %v", got, wantByCount)
	}
	// Integer keys sort as integers inside a partition.
	for i := 1; i < len(byCount); i++ {
		a, b := byCount[i-1], byCount[i]
		var x, y int
		_ = json.Unmarshal(a.Key, &x)
		_ = json.Unmarshal(b.Key, &y)
		if a.Partition == b.Partition && x >= y {
			t.Errorf("keys %s and %s out of order", a.Key, b.Key)
		}
	}

	sum := jobstest.RunKeyed(t, regroup{}.Keyed(), env, `{"job":"job-2","by":"all","agg":"sum","of":"key*value"}`)
	if len(sum) != 1 || string(sum[0].Key) != `"all"` || string(sum[0].Value) != fmt.Sprint(total) {
		t.Fatalf("total: %v, want all\t%d", sum, total)
	}
	distinct := jobstest.RunKeyed(t, regroup{}.Keyed(), env, `{"job":"job-2","by":"all","agg":"sum"}`)
	if len(distinct) != 1 || string(distinct[0].Value) != fmt.Sprint(len(want)) {
		t.Fatalf("distinct words: %v, want %d", distinct, len(want))
	}
}

// Every aggregate over records of container blobs, keys of any JSON kind.
func TestRegroup_Aggregates(t *testing.T) {
	env := jobstest.NewEnv()
	env.Put("recs", "a", []byte(`{"key":"x","value":3}`+"\n"+`{"key":"y","value":-4}`+"\n\n"+`{"key":"x","value":10}`+"\n"))
	env.Put("recs", "b", []byte(`{"key":[1,"z"],"value":7}`+"\n"+`{"key":-2,"value":3}`+"\n"))
	for params, want := range map[string]string{
		`{"container":"recs"}`:                                     `map["x":2 "y":1 -2:1 [1,"z"]:1]`,
		`{"container":"recs","agg":"sum"}`:                         `map["x":13 "y":-4 -2:3 [1,"z"]:7]`,
		`{"container":"recs","agg":"min"}`:                         `map["x":3 "y":-4 -2:3 [1,"z"]:7]`,
		`{"container":"recs","agg":"max","by":"value"}`:            `map[-4:-4 10:10 3:3 7:7]`,
		`{"container":"recs","by":"value"}`:                        `map[-4:1 10:1 3:2 7:1]`,
		`{"container":"recs","prefix":"a","by":"all","agg":"max"}`: `map["all":10]`,
	} {
		if got := fmt.Sprint(records(jobstest.RunKeyed(t, regroup{}.Keyed(), env, params))); got != want {
			t.Errorf("%s: %s, want %s", params, got, want)
		}
	}
	// A number that is not an integer fails the task, naming the record.
	_, err := jobstest.CheckKeyed(regroup{}.Keyed(), env, `{"container":"recs","agg":"sum","of":"key"}`)
	if err == nil || !strings.Contains(err.Error(), `is not a 64-bit integer ("sum", "min" and "max" take integers)`) {
		t.Errorf("sum of string keys: %v", err)
	}
	env.Put("bad", "a", []byte("x\ty\n"))
	if _, err := jobstest.CheckKeyed(regroup{}.Keyed(), env, `{"container":"bad"}`); err == nil || !strings.Contains(err.Error(), `want {"key":K,"value":V}`) {
		t.Errorf("a line that is not a record: %v", err)
	}
}

func TestRegroup_Overflow(t *testing.T) {
	env := jobstest.NewEnv()
	env.Put("recs", "a", []byte(`{"key":"x","value":9223372036854775807}`+"\n"+`{"key":"x","value":1}`+"\n"))
	env.Put("recs", "b", []byte(`{"key":3,"value":4611686018427387904}`+"\n"))
	for _, p := range []string{`{"container":"recs","prefix":"a","agg":"sum"}`, `{"container":"recs","prefix":"b","agg":"sum","by":"all","of":"key*value"}`} {
		if _, err := jobstest.CheckKeyed(regroup{}.Keyed(), env, p); err == nil || !strings.Contains(err.Error(), "overflows 64 bits") {
			t.Errorf("%s: %v", p, err)
		}
	}
}

func TestRegroup_BadParams(t *testing.T) {
	for p, want := range map[string]string{
		`{}`:                               `"container" is required (or "job"`,
		`{"job":"j","container":"c"}`:      `give it without "container"`,
		`{"job":"J!"}`:                     `"job" must be a job id`,
		`{"job":"j","by":"word"}`:          `"by" must be "key", "value" or "all" (got "word")`,
		`{"job":"j","agg":"avg"}`:          `"agg" must be "count", "sum", "min" or "max" (got "avg")`,
		`{"job":"j","of":"key"}`:           `leave it out with "agg":"count"`,
		`{"job":"j","agg":"sum","of":"k"}`: `"of" must be "value", "key" or "key*value" (got "k")`,
		`{"job":"j","partitions":10001}`:   `"partitions" must be between 1 and 10000`,
		`{"job":"j","shard_bytes":-1}`:     `"shard_bytes" must be between 1`,
		`{"job":"j","top":3}`:              `unknown field "top"`,
		`{"job":"j","by":1}`:               `"by" must be a string`,
	} {
		err := regroup{}.Validate(json.RawMessage(p))
		var pe *jobs.ParamError
		if !errors.As(err, &pe) || pe.Job != "regroup" || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want a regroup *ParamError with %q", p, err, want)
		}
	}
	if err := (regroup{}).Validate(json.RawMessage(`{"job":"20261125-120000-0123abcd","by":"all","agg":"sum","of":"key*value"}`)); err != nil {
		t.Error(err)
	}
	if n, err := (regroup{}).Keyed().Partitions(json.RawMessage(`{"job":"j","by":"all"}`)); n != 1 || err != nil {
		t.Errorf(`"by":"all" has %d partitions, %v; want 1`, n, err)
	}
	if _, err := (regroup{}).Split(context.Background(), jobstest.NewEnv(), json.RawMessage(`{"job":"nothing"}`)); err == nil || !strings.Contains(err.Error(), "input job nothing") {
		t.Errorf("Split of a job with no output: %v", err)
	}
}

func FuzzRegroupParams(f *testing.F) {
	for _, s := range []string{`{"job":"a-1","by":"value"}`, `{"container":"abc","agg":"sum","of":"key*value","partitions":3}`, `{"job":"x","of":"key"}`, `[]`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, params []byte) {
		err := regroup{}.Validate(json.RawMessage(params))
		var pe *jobs.ParamError
		if err != nil && (!errors.As(err, &pe) || pe.Job != regroupType) {
			t.Fatalf("Validate: %T %v", err, err)
		}
	})
}

// FuzzRegroupLines maps arbitrary blob contents with every option: an error or records, never a
// panic.
func FuzzRegroupLines(f *testing.F) {
	f.Add([]byte(`{"key":"x","value":3}`+"\n"+`{"key":2,"value":-1}`), uint8(0))
	f.Add([]byte(`{"key":{"a":[1]},"value":"s"}`), uint8(5))
	f.Fuzz(func(t *testing.T, blob []byte, opt uint8) {
		env := jobstest.NewEnv()
		env.Put("c", "b", blob)
		s := regroupShard{BlobRange: jobs.BlobRange{Container: "c", Blob: "b", Length: int64(len(blob))},
			By: []string{"key", "value", "all"}[opt%3], Agg: []string{"count", "sum", "min", "max"}[opt/3%4], Of: []string{"value", "key", "key*value"}[opt/12%3]}
		if s.Agg == "count" {
			s.Of = ""
		}
		shard, err := json.Marshal(s)
		if err != nil || len(blob) == 0 {
			return
		}
		k := regroup{}.Keyed()
		_ = k.Map(context.Background(), env, jobs.Task{Shard: shard}, func(key, value []byte) error {
			return k.Reduce(context.Background(), key, func(yield func([]byte) bool) { yield(value) }, func(k, v []byte) error {
				if !json.Valid(k) || !json.Valid(v) {
					t.Fatalf("Reduce emitted %q %q", k, v)
				}
				return nil
			})
		})
	})
}

func FuzzRegroupRecords(f *testing.F) {
	jobstest.FuzzKeyedRecords(f, regroup{}.Keyed(), []byte{'c', 2}, []byte{regroupTagInt, 0, 0, 0, 0, 0, 0, 0, 0, 1}, append([]byte{regroupTagJSON}, `"all"`...))
}
