package jobs_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"testing"

	"github.com/mapagg/mapagg/jobs"
)

type rangeParams struct {
	N int `json:"n"`
}

type rangeJob struct{}

func (rangeJob) Split(_ context.Context, _ jobs.Env, p rangeParams) ([]int, error) {
	out := make([]int, p.N)
	for i := range out {
		out[i] = i * 10
	}
	return out, nil
}
func (rangeJob) Map(_ context.Context, _ jobs.Env, s int) (int, error) { return s, nil }
func (rangeJob) Merge(a, b int) int                                    { return a + b }

type indexedRangeJob struct{ rangeJob }

func (indexedRangeJob) Count(p rangeParams) (int, error) {
	if p.N > jobs.MaxShards+1 {
		return 0, fmt.Errorf("too many")
	}
	return p.N, nil
}
func (indexedRangeJob) Shard(_ rangeParams, i int) (int, error) { return i * 10, nil }

// A TypedJob with Count and Shard is Indexed, and its plan makes Split's shards; one without is
// not Indexed.
func TestTyped_WithIndex(t *testing.T) {
	if _, ok := jobs.Typed("plain", rangeJob{}).(jobs.Indexed); ok {
		t.Fatal("a typed job without Count and Shard is Indexed")
	}
	j, ok := jobs.Typed("ranged", indexedRangeJob{}).(jobs.Indexed)
	if !ok {
		t.Fatal("a typed job with Count and Shard is not Indexed")
	}
	raw := json.RawMessage(`{"n": 5}`)
	split, err := j.Split(context.Background(), nil, raw)
	if err != nil {
		t.Fatal(err)
	}
	plan, err := j.Plan(raw)
	if err != nil {
		t.Fatal(err)
	}
	if plan.Len() != len(split) {
		t.Fatalf("plan %d shards, split %d", plan.Len(), len(split))
	}
	for i := range split {
		b, err := plan.Shard(i)
		if err != nil || !bytes.Equal(b, split[i]) {
			t.Fatalf("shard %d: %s %v, want %s", i, b, err, split[i])
		}
	}
	if _, err := plan.Shard(5); err == nil {
		t.Error("shard past the end accepted")
	}
	if _, err := j.Plan(json.RawMessage(`{"n": 1000001}`)); err == nil {
		t.Error("a plan over MaxShards accepted")
	}
	if _, err := j.Plan(json.RawMessage(`{"m": 1}`)); err == nil {
		t.Error("bad parameters accepted")
	}
}
