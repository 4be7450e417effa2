package jobstest_test

import (
	"context"
	"encoding/json"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/mapagg/mapagg/jobs"
	"github.com/mapagg/mapagg/jobs/jobstest"
)

// count is a correct job: the sum of 1..n in shards of one number.
type count struct{}

type countParams struct {
	N int `json:"n" jobs:"required"`
}

func (count) Split(_ context.Context, _ jobs.Env, p countParams) ([]int, error) {
	s := make([]int, p.N)
	for i := range s {
		s[i] = i + 1
	}
	return s, nil
}
func (count) Map(_ context.Context, _ jobs.Env, i int) (int, error) { return i, nil }
func (count) Merge(a, b int) int                                    { return a + b }

func TestCheck_GoodJob(t *testing.T) {
	res, err := jobstest.Check(jobs.Typed("count", count{}), nil, `{"n": 100}`)
	if err != nil || string(res) != "5050" {
		t.Fatalf("Check = %s, %v", res, err)
	}
}

// digits merges as digits of a number: the order shows.
type digits struct{ count }

func (digits) Merge(a, b int) int { return 10*a + b }

// impure maps each shard to a new value each time.
type impure struct {
	count
	calls *atomic.Int64
}

func (j impure) Map(context.Context, jobs.Env, int) (int, error) { return int(j.calls.Add(1)), nil }

// randomSplit splits differently each time.
type randomSplit struct {
	count
	calls *atomic.Int64
}

func (j randomSplit) Split(context.Context, jobs.Env, countParams) ([]int, error) {
	return []int{int(j.calls.Add(1))}, nil
}

// forgetful is a byte-level job whose checkpoint loses the aggregate.
type forgetful struct{ jobs.Job }

func (f forgetful) NewAggregate(p json.RawMessage) (jobs.Aggregate, error) {
	a, err := f.Job.NewAggregate(p)
	return forgetfulAgg{a}, err
}

type forgetfulAgg struct{ jobs.Aggregate }

func (forgetfulAgg) MarshalBinary() ([]byte, error) { return []byte("0"), nil }

// failing fails every map.
type failing struct{ count }

func (failing) Map(context.Context, jobs.Env, int) (int, error) { return 0, context.DeadlineExceeded }

func TestCheck_FindsBrokenContracts(t *testing.T) {
	for _, tt := range []struct {
		name string
		job  jobs.Job
		want string
	}{
		{"not commutative", jobs.Typed("digits", digits{}), "Merge must be associative and commutative"},
		{"impure map", jobs.Typed("impure", impure{calls: new(atomic.Int64)}), "twice gave different partials"},
		{"random split", jobs.Typed("random", randomSplit{calls: new(atomic.Int64)}), "Split is not deterministic"},
		{"lossy checkpoint", forgetful{jobs.Typed("forgetful", count{})}, "the checkpoint (MarshalBinary) must hold the whole aggregate"},
		{"map fails", jobs.Typed("failing", failing{}), "failed 3 attempts: context deadline exceeded"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := jobstest.Check(tt.job, nil, `{"n": 10}`)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Check = %v, want an error saying %q", err, tt.want)
			}
		})
	}
	if _, err := jobstest.Check(jobs.Typed("count", count{}), nil, `{}`); err == nil || !strings.Contains(err.Error(), `"n" is required`) {
		t.Errorf("bad params: %v", err)
	}
}

func TestEnv(t *testing.T) {
	env := jobstest.NewEnv()
	env.Put("c", "b/2", []byte("world"))
	env.Put("c", "b/1", []byte("hello"))
	env.Put("c", "x", nil)
	ctx := context.Background()
	blobs, err := env.ListBlobs(ctx, "c", "b/")
	if err != nil || len(blobs) != 2 || blobs[0] != (jobs.BlobInfo{Name: "b/1", Size: 5}) || blobs[1].Name != "b/2" {
		t.Fatalf("ListBlobs = %v, %v", blobs, err)
	}
	if _, err := env.ListBlobs(ctx, "nope", ""); err == nil {
		t.Error("ListBlobs of a missing container succeeded")
	}
	env.OneByteReads(true)
	r, err := env.ReadRange(ctx, "c", "b/1", 1, 10)
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 10)
	if n, _ := r.Read(buf); n != 1 || buf[0] != 'e' {
		t.Errorf("one-byte Read = %d %q", n, buf[:n])
	}
	for _, bad := range []struct {
		name      string
		off, size int64
	}{{"b/1", -1, 1}, {"b/1", 0, 0}, {"b/1", 6, 1}, {"none", 0, 1}} {
		if _, err := env.ReadRange(ctx, "c", bad.name, bad.off, bad.size); err == nil {
			t.Errorf("ReadRange(%v) succeeded", bad)
		}
	}
}

func FuzzCountAggregate(f *testing.F) {
	jobstest.FuzzAggregate(f, jobs.Typed("count", count{}), `{"n": 3}`, []byte("1"), []byte("6"))
}

func FuzzCountParams(f *testing.F) {
	jobstest.FuzzParams(f, jobs.Typed("count", count{}), `{"n": 3}`, `{}`, `{"n": "x"}`)
}
