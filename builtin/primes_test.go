package builtin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/mapagg/mapagg/jobs"
	"github.com/mapagg/mapagg/jobs/jobstest"
)

func isPrimeTrial(n uint64) bool {
	if n < 2 {
		return false
	}
	for d := uint64(2); d*d <= n; d++ {
		if n%d == 0 {
			return false
		}
	}
	return true
}

func TestPrimes_KnownCounts(t *testing.T) {
	tests := []struct {
		params string
		want   uint64
	}{
		{`{"to": 10000000, "shards": 1}`, 664579},
		{`{"to": 10000000, "shards": 37}`, 664579},
		{`{"from": 0, "to": 20000000, "shards": 200}`, 1270607},
		{`{"from": 10000000, "to": 20000000, "shards": 3}`, 1270607 - 664579},
		{`{"to": 100, "shards": 100}`, 25},
		{`{"from": 1000000000000, "to": 1000000001000, "shards": 7}`, 37}, // π(10^12+1000) − π(10^12)
	}
	for _, tt := range tests {
		t.Run(tt.params, func(t *testing.T) {
			res := jobstest.Run(t, primesJob, nil, tt.params)
			var got PrimesResult
			if err := json.Unmarshal(res, &got); err != nil {
				t.Fatal(err)
			}
			if got.Count != tt.want {
				t.Errorf("count = %d, want %d (result %s)", got.Count, tt.want, res)
			}
		})
	}
}

func TestPrimes_SmallRangesMatchTrialDivision(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for range 200 {
		from := rng.Uint64N(20000)
		if rng.IntN(4) == 0 {
			from = rng.Uint64N(10)
		}
		to := from + 1 + rng.Uint64N(3000)
		shards := 1 + rng.IntN(int(min(to-from, 40)))
		var want uint64
		for n := from; n < to; n++ {
			if isPrimeTrial(n) {
				want++
			}
		}
		params := fmt.Sprintf(`{"from": %d, "to": %d, "shards": %d}`, from, to, shards)
		var got PrimesResult
		if err := json.Unmarshal(jobstest.Run(t, primesJob, nil, params), &got); err != nil {
			t.Fatal(err)
		}
		if got.Count != want {
			t.Fatalf("%s: count %d, want %d", params, got.Count, want)
		}
	}
}

func TestCountPrimes_HighRange(t *testing.T) {
	// Near the top of the allowed range, against trial division (√2^50 = 2^25 per number, so few).
	const hi = uint64(1) << 50
	var want uint64
	for n := hi - 300; n < hi; n++ {
		if isPrimeTrialFast(n) {
			want++
		}
	}
	got, err := countPrimes(context.Background(), hi-300, hi)
	if err != nil || got != want {
		t.Fatalf("countPrimes near 2^50 = %d, %v; want %d", got, err, want)
	}
}

// isPrimeTrialFast is trial division by 2 and odd numbers.
func isPrimeTrialFast(n uint64) bool {
	if n < 2 || n%2 == 0 {
		return n == 2
	}
	for d := uint64(3); d*d <= n; d += 2 {
		if n%d == 0 {
			return false
		}
	}
	return true
}

func TestPrimes_SplitCoversRangeEvenly(t *testing.T) {
	shards, err := primesJob.Split(context.Background(), nil, json.RawMessage(`{"from": 7, "to": 1007, "shards": 7}`))
	if err != nil {
		t.Fatal(err)
	}
	next := uint64(7)
	for i, b := range shards {
		s, err := decodePrimesShard(b)
		if err != nil {
			t.Fatal(err)
		}
		if s.Lo != next || s.Hi-s.Lo < 142 || s.Hi-s.Lo > 143 {
			t.Errorf("shard %d = [%d, %d), want to start at %d with 142 or 143 numbers", i, s.Lo, s.Hi, next)
		}
		next = s.Hi
	}
	if next != 1007 {
		t.Errorf("shards end at %d, want 1007", next)
	}
}

func TestPrimes_MapBadShard(t *testing.T) {
	for _, shard := range []string{
		``, `{}`, `null`, `[1,2]`, `{"lo": 5, "hi": 5}`, `{"lo": 6, "hi": 5}`,
		`{"lo": 0, "hi": 1125899906842625}`, `{"lo": 0, "hi": 4294967297}`,
		`{"lo": 0, "hi": 10, "x": 1}`, `{"lo": 0, "hi": 10} x`, `{"lo": -1, "hi": 10}`,
	} {
		_, err := primesJob.Map(context.Background(), nil, jobs.Task{Shard: []byte(shard)})
		if !errors.Is(err, jobs.ErrBadShard) {
			t.Errorf("Map(%q) = %v, want jobs.ErrBadShard", shard, err)
		}
	}
}

func TestPrimes_MapCancelled(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := primesJob.Map(ctx, nil, jobs.Task{Shard: []byte(`{"lo": 0, "hi": 1000000}`)})
	if !errors.Is(err, context.Canceled) {
		t.Errorf("Map with a cancelled context = %v", err)
	}
}

func TestPrimesAggregate(t *testing.T) {
	params := json.RawMessage(`{"to": 1000, "shards": 10}`)
	_, partials := jobstest.MapAll(t, primesJob, nil, string(params))
	want := json.RawMessage(`{"count":168}`)
	for seed := range uint64(10) {
		got := jobstest.MergeShuffled(t, primesJob, string(params), partials, seed)
		if string(got) != string(want) {
			t.Fatalf("result %s, want %s", got, want)
		}
	}

	agg, _ := primesJob.NewAggregate(params)
	for _, bad := range [][]byte{
		nil, {tagPrimes}, {tagPrimes, 2, 1}, {tagPi, 1, 1}, {tagPrimes, 1}, {tagPrimes, 1, 1, 0},
		encodePrimesPartial(1001), // more primes than numbers
	} {
		if err := agg.Merge(bad); !errors.Is(err, jobs.ErrBadPartial) {
			t.Errorf("Merge(%x) = %v, want jobs.ErrBadPartial", bad, err)
		}
		if err := agg.UnmarshalBinary(bad); !errors.Is(err, jobs.ErrBadCheckpoint) {
			t.Errorf("UnmarshalBinary(%x) = %v, want jobs.ErrBadCheckpoint", bad, err)
		}
	}
	if err := agg.Merge(encodePrimesPartial(1000)); err != nil {
		t.Fatal(err)
	}
	if err := agg.Merge(encodePrimesPartial(1)); !errors.Is(err, jobs.ErrBadPartial) {
		t.Errorf("Merge past the range size = %v", err)
	}
}

func FuzzPrimesParams(f *testing.F) {
	for _, s := range []string{
		`{"from": 0, "to": 10000000, "shards": 100}`, `{"to": 5, "shards": 5}`, `{"to": 1125899906842624, "shards": 300000}`,
		`{"from": 10, "to": 5, "shards": 1}`, `{}`, `null`, `[]`, `{"to": 1e3, "shards": 1}`, `{"to": 10, "shards": 1, "x": {}}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, params []byte) {
		checkParamsFuzz(t, primesJob, params, splitIsCheap(params))
	})
}

func FuzzPrimesShard(f *testing.F) {
	for _, s := range []string{`{"lo": 0, "hi": 1000}`, `{"lo": 999999, "hi": 1000000}`, `{"lo": 1, "hi": 3}`, `{"lo": 5, "hi": 4}`, `{"hi": 1e2}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, shard []byte) {
		s, err := decodePrimesShard(shard)
		if err != nil {
			if !errors.Is(err, jobs.ErrBadShard) {
				t.Fatalf("decode error %v is not jobs.ErrBadShard", err)
			}
			return
		}
		if s.Hi-s.Lo > 100000 {
			return // valid, but too slow to sieve in a fuzz iteration
		}
		p, err := primesJob.Map(context.Background(), nil, jobs.Task{Shard: shard})
		if err != nil {
			t.Fatalf("Map of a decodable shard: %v", err)
		}
		if _, err := decodePrimesPartial(p); err != nil {
			t.Fatalf("Map's partial does not decode: %v", err)
		}
	})
}

func FuzzPrimesAggregate(f *testing.F) {
	jobstest.FuzzAggregate(f, primesJob, `{"to": 1000000, "shards": 10}`,
		encodePrimesPartial(3), encodePrimesPartial(0), encodePrimesPartial(25), encodePrimesPartial(1<<40),
		[]byte{tagPrimes, 1, 0xff, 0xff})
}

func BenchmarkPrimesShard(b *testing.B) {
	// One shard of [0, 2·10^7) in 200 shards, from the top of the range.
	shard := []byte(`{"lo": 19900000, "hi": 20000000}`)
	for b.Loop() {
		if _, err := primesJob.Map(context.Background(), nil, jobs.Task{Shard: shard}); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkCountPrimes1e9(b *testing.B) {
	for b.Loop() {
		if _, err := countPrimes(context.Background(), 1e9, 1e9+1e7); err != nil {
			b.Fatal(err)
		}
	}
}
