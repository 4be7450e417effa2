package builtin

import (
	"context"
	"encoding/json"
	"errors"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/mapagg/mapagg/jobs"
	"github.com/mapagg/mapagg/jobs/jobstest"
)

func TestPi_SameResultWhateverTheOrder(t *testing.T) {
	const params = `{"samples": 1000003, "shards": 17, "seed": 42}`
	// Run merges the partials in shard order and in shuffled orders, checkpointing on the way,
	// and fails unless every order gives the same result.
	first := jobstest.Run(t, piJob, nil, params)
	var res PiResult
	if err := json.Unmarshal(first, &res); err != nil {
		t.Fatal(err)
	}
	if res.Samples != 1000003 || res.Estimate != 4*float64(res.Inside)/float64(res.Samples) {
		t.Errorf("result %+v is inconsistent", res)
	}
	// The seed is fixed, so this is deterministic; 0.01 is about six standard errors.
	if math.Abs(res.Estimate-math.Pi) > 0.01 {
		t.Errorf("estimate %v is far from π", res.Estimate)
	}
	other := jobstest.Run(t, piJob, nil, `{"samples": 1000003, "shards": 17, "seed": 43}`)
	if string(other) == string(first) {
		t.Errorf("seeds 42 and 43 gave the same result %s", other)
	}
}

// TestPi_MatchesDirectComputation checks the job against a single-process computation written
// with rand.Rand.Float64, the documented definition.
func TestPi_MatchesDirectComputation(t *testing.T) {
	const samples, shards, seed = 100_000, 7, 5
	var inside uint64
	for i := uint64(0); i < shards; i++ {
		n := samples / shards
		if i < samples%shards {
			n++
		}
		r := rand.New(rand.NewPCG(seed, i))
		for range n {
			x, y := r.Float64(), r.Float64()
			if x*x+y*y < 1 {
				inside++
			}
		}
	}
	res := jobstest.Run(t, piJob, nil, `{"samples": 100000, "shards": 7, "seed": 5}`)
	var got PiResult
	if err := json.Unmarshal(res, &got); err != nil {
		t.Fatal(err)
	}
	if got.Inside != inside || got.Samples != samples {
		t.Errorf("job: %d inside of %d; direct: %d of %d", got.Inside, got.Samples, inside, samples)
	}
}

func TestPi_SplitSamplesEvenly(t *testing.T) {
	shards, err := piJob.Split(context.Background(), nil, json.RawMessage(`{"samples": 10, "shards": 4, "seed": 9}`))
	if err != nil {
		t.Fatal(err)
	}
	want := []uint64{3, 3, 2, 2}
	if len(shards) != len(want) {
		t.Fatalf("%d shards", len(shards))
	}
	for i, b := range shards {
		s, err := decodePiShard(b)
		if err != nil {
			t.Fatal(err)
		}
		if s.N != want[i] || s.Stream != uint64(i) || s.Seed != 9 {
			t.Errorf("shard %d = %+v, want %d samples on stream %d seed 9", i, s, want[i], i)
		}
	}
}

func TestPi_MapBadShard(t *testing.T) {
	for _, shard := range []string{``, `{}`, `{"seed": 1, "stream": 0, "n": 0}`, `{"n": 1000000001}`, `{"n": -1}`, `{"n": 5, "m": 1}`} {
		if _, err := piJob.Map(context.Background(), nil, jobs.Task{Shard: []byte(shard)}); !errors.Is(err, jobs.ErrBadShard) {
			t.Errorf("Map(%q) = %v, want jobs.ErrBadShard", shard, err)
		}
	}
}

func TestPiAggregate(t *testing.T) {
	params := json.RawMessage(`{"samples": 100, "shards": 2}`)
	agg, _ := piJob.NewAggregate(params)
	if _, err := agg.Result(); err == nil {
		t.Error("Result of an empty aggregate succeeded")
	}
	for _, bad := range [][]byte{
		nil, {tagPi, 1}, {tagPi, 1, 5}, encodePiPartial(5, 6), encodePiPartial(101, 1), encodePrimesPartial(1),
	} {
		if err := agg.Merge(bad); !errors.Is(err, jobs.ErrBadPartial) {
			t.Errorf("Merge(%x) = %v, want jobs.ErrBadPartial", bad, err)
		}
		if err := agg.UnmarshalBinary(bad); !errors.Is(err, jobs.ErrBadCheckpoint) {
			t.Errorf("UnmarshalBinary(%x) = %v, want jobs.ErrBadCheckpoint", bad, err)
		}
	}
	for _, p := range [][]byte{encodePiPartial(60, 50), encodePiPartial(40, 30)} {
		if err := agg.Merge(p); err != nil {
			t.Fatal(err)
		}
	}
	if err := agg.Merge(encodePiPartial(1, 1)); !errors.Is(err, jobs.ErrBadPartial) {
		t.Errorf("Merge past the job's samples = %v", err)
	}
	res, err := agg.Result()
	if err != nil || string(res) != `{"estimate":3.2,"samples":100,"inside":80}` {
		t.Errorf("Result = %s, %v", res, err)
	}
}

func FuzzPiParams(f *testing.F) {
	for _, s := range []string{`{"samples": 100000000, "shards": 100, "seed": 1}`, `{"samples": 1, "shards": 1}`, `{"samples": 1e3, "shards": 1}`, `{"samples": 5, "shards": 6}`, `{}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, params []byte) {
		checkParamsFuzz(t, piJob, params, splitIsCheap(params))
	})
}

func FuzzPiShard(f *testing.F) {
	for _, s := range []string{`{"seed": 1, "stream": 3, "n": 1000}`, `{"n": 1}`, `{"n": 0}`, `{"seed": -1, "n": 1}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, shard []byte) {
		s, err := decodePiShard(shard)
		if err != nil {
			if !errors.Is(err, jobs.ErrBadShard) {
				t.Fatalf("decode error %v is not jobs.ErrBadShard", err)
			}
			return
		}
		if s.N > 100000 {
			return // valid, but too slow for a fuzz iteration
		}
		p, err := piJob.Map(context.Background(), nil, jobs.Task{Shard: shard})
		if err != nil {
			t.Fatalf("Map of a decodable shard: %v", err)
		}
		if n, in, err := decodePiPartial(p); err != nil || n != s.N || in > n {
			t.Fatalf("Map's partial: %d inside of %d, %v", in, n, err)
		}
	})
}

func FuzzPiAggregate(f *testing.F) {
	jobstest.FuzzAggregate(f, piJob, `{"samples": 1000, "shards": 10}`,
		encodePiPartial(10, 8), encodePiPartial(10, 7), encodePiPartial(0, 0), encodePiPartial(7, 10))
}
