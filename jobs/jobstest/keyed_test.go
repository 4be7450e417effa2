package jobstest_test

import (
	"bytes"
	"context"
	"iter"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/mapagg/mapagg/jobs"
	"github.com/mapagg/mapagg/jobs/jobstest"
)

// letters counts the letters of words; a shard is a word.
type letters struct{}

type lettersParams struct {
	Words []string `json:"words" jobs:"required"`
}

func (letters) Split(_ context.Context, _ jobs.Env, p lettersParams) ([]string, error) {
	return p.Words, nil
}

func (letters) Map(_ context.Context, _ jobs.Env, w string, emit jobs.Emitter[string, int]) error {
	for _, r := range w {
		emit(string(r), 1)
	}
	return nil
}

func (letters) Reduce(_ context.Context, _ string, counts iter.Seq[int], emit func(int)) error {
	n := 0
	for c := range counts {
		n += c
	}
	emit(n)
	return nil
}

type lettersCombine struct{ letters }

func (lettersCombine) Combine(a, b int) int { return a + b }

// firstValue's Reduce depends on the order of the values.
type firstValue struct{ letters }

func (firstValue) Map(_ context.Context, _ jobs.Env, w string, emit jobs.Emitter[string, int]) error {
	emit("w", len(w))
	return nil
}

func (firstValue) Reduce(_ context.Context, _ string, vs iter.Seq[int], emit func(int)) error {
	for v := range vs {
		emit(v)
		return nil
	}
	return nil
}

// digitsCombine's Combine is not commutative.
type digitsCombine struct{ letters }

func (digitsCombine) Combine(a, b int) int { return 10*a + b }

// impureKeyed emits a new key each run.
type impureKeyed struct {
	letters
	calls *atomic.Int64
}

func (j impureKeyed) Map(_ context.Context, _ jobs.Env, _ string, emit jobs.Emitter[string, int]) error {
	emit("k", int(j.calls.Add(1)))
	return nil
}

func TestRunKeyed_GoodJob(t *testing.T) {
	for _, job := range []jobs.KeyedJob{jobs.Keyed("letters", letters{}), jobs.Keyed("letters", lettersCombine{})} {
		recs := jobstest.RunKeyed(t, job, nil, `{"words": ["banana", "apple", "cab"]}`)
		got := map[string]string{}
		parts := map[string]int{}
		for i, r := range recs {
			got[string(r.Key)] = string(r.Value)
			parts[string(r.Key)] = r.Partition
			if i > 0 && recs[i-1].Partition == r.Partition && string(recs[i-1].Key) >= string(r.Key) {
				t.Errorf("records %s and %s out of key order", recs[i-1], r)
			}
			if r.Partition != jobs.PartitionOf([]byte(strings.Trim(string(r.Key), `"`)), jobstest.DefaultPartitions) {
				t.Errorf("record %s in partition %d", r, r.Partition)
			}
		}
		want := map[string]string{`"a"`: "5", `"b"`: "2", `"c"`: "1", `"e"`: "1", `"l"`: "1", `"n"`: "2", `"p"`: "2"}
		if len(got) != len(want) {
			t.Fatalf("records %v", recs)
		}
		for k, v := range want {
			if got[k] != v {
				t.Errorf("%s = %s, want %s", k, got[k], v)
			}
		}
	}
}

func TestCheckKeyed_FindsBrokenContracts(t *testing.T) {
	for _, tt := range []struct {
		name string
		job  jobs.KeyedJob
		want string
	}{
		{"order-dependent reduce", jobs.Keyed("first", firstValue{}), "Reduce must not depend on the order"},
		{"non-commutative combine", jobs.Keyed("digits", digitsCombine{}), "Combine must be associative and commutative"},
		{"impure map", jobs.Keyed("impure", impureKeyed{calls: new(atomic.Int64)}), "Map must be a pure function"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := jobstest.CheckKeyed(tt.job, nil, `{"words": ["banana", "apple", "cab", "a", "bb"]}`)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("CheckKeyed = %v, want an error saying %q", err, tt.want)
			}
		})
	}
	if _, err := jobstest.CheckKeyed(jobs.Keyed("letters", letters{}), nil, `{}`); err == nil || !strings.Contains(err.Error(), `"words" is required`) {
		t.Errorf("bad params: %v", err)
	}
}

func FuzzLettersRecords(f *testing.F) {
	k, _ := jobs.EncodeKey("a")
	v, _ := jobs.EncodeValue(3)
	jobstest.FuzzKeyedRecords(f, jobs.Keyed("letters", lettersCombine{}), k, v)
}

// Keys are bytes: two distinct string keys, whatever their bytes, are written as distinct JSON
// texts that read back exactly.
func FuzzKeyedRecords_KeysStayDistinct(f *testing.F) {
	job := jobs.Keyed("letters", lettersCombine{})
	f.Add([]byte("a\x80"), []byte("a\xff"))
	f.Add([]byte("\ufffd"), []byte("\xff"))
	v, _ := jobs.EncodeValue(3)
	f.Fuzz(func(t *testing.T, a, b []byte) {
		written := func(key []byte) []byte {
			var out []byte
			err := job.Reduce(context.Background(), key, slices.Values([][]byte{v}), func(k, _ []byte) error {
				out = bytes.Clone(k)
				return nil
			})
			if err != nil {
				t.Fatalf("Reduce(%q): %v", key, err)
			}
			back, err := jobs.AppendUnquoted(nil, out)
			if err != nil || !bytes.Equal(back, key) {
				t.Fatalf("key %q written as %s reads back as %q, %v", key, out, back, err)
			}
			return out
		}
		if ka, kb := written(a), written(b); !bytes.Equal(a, b) && bytes.Equal(ka, kb) {
			t.Fatalf("keys %q and %q both written as %s", a, b, ka)
		}
	})
}
