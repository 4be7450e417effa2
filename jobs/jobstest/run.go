package jobstest

import (
	"bytes"
	"context"
	"encoding/json"
	"hash/fnv"
	"math/rand/v2"
	"testing"

	"github.com/mapagg/mapagg/jobs"
)

// Attempts is how many times Run tries a shard's Map before it fails the test, as a cluster
// with its default MaxAttempts would.
const Attempts = 3

// Orders is how many shuffled merge orders Run tries besides the sequential one.
const Orders = 3

// Run runs job with params in-process, as a cluster would, and checks the job's contract. It
// returns the result (the JSON of Aggregate.Result), so the test can check the answer. env is the
// storage the job reads (a *Env, say); nil means an empty NewEnv().
//
// Run fails the test if:
//   - Validate, Split or NewAggregate refuses params, or they disagree;
//   - Split is not deterministic (it is called twice), makes more than jobs.MaxShards shards or
//     a shard longer than jobs.MaxShardBytes;
//   - Map fails Attempts times for a shard (a failed attempt is retried, as the cluster does), or
//     a second run of Map gives a different partial (every shard of a small job, every 7th of a
//     big one): Map must be a pure function of the shard;
//   - merging the partials in Orders shuffled orders, with the aggregate checkpointed and restored
//     (MarshalBinary into a fresh aggregate's UnmarshalBinary) at random points and half-way,
//     gives a result other than merging them in shard order: Merge must be associative and
//     commutative, and the checkpoint must hold the whole aggregate;
//   - a restored aggregate marshals differently than the one it came from;
//   - Result fails or is not valid JSON.
//
// The orders are drawn from a generator seeded by the test's name and params, so a failure
// repeats. A result that depends on the order only by rounding (a sum of floats) fails: sum
// integers, or fixed-point values, instead.
func Run(t testing.TB, job jobs.Job, env jobs.Env, params string) json.RawMessage {
	t.Helper()
	if env == nil {
		env = NewEnv()
	}
	ctx := context.Background()
	raw := json.RawMessage(params)
	typ := job.Type()
	if err := job.Validate(raw); err != nil {
		t.Fatalf("%s: Validate(%s): %v", typ, params, err)
	}
	shards, err := job.Split(ctx, env, raw)
	if err != nil {
		t.Fatalf("%s: Split(%s): %v", typ, params, err)
	}
	if len(shards) > jobs.MaxShards {
		t.Fatalf("%s: Split(%s) made %d shards, the limit is %d", typ, params, len(shards), jobs.MaxShards)
	}
	again, err := job.Split(ctx, env, raw)
	if err != nil {
		t.Fatalf("%s: second Split(%s): %v", typ, params, err)
	}
	if len(again) != len(shards) {
		t.Fatalf("%s: Split is not deterministic: %d shards, then %d", typ, len(shards), len(again))
	}
	for i, s := range shards {
		if len(s) > jobs.MaxShardBytes {
			t.Fatalf("%s: shard %d is %d bytes, the limit is %d", typ, i, len(s), jobs.MaxShardBytes)
		}
		if !bytes.Equal(s, again[i]) {
			t.Fatalf("%s: Split is not deterministic: shard %d is %q, then %q", typ, i, s, again[i])
		}
	}

	h := fnv.New64a()
	h.Write([]byte(t.Name() + "\x00" + params))
	rng := rand.New(rand.NewPCG(h.Sum64(), uint64(len(shards))))

	partials := make([][]byte, len(shards))
	for _, i := range rng.Perm(len(shards)) {
		p, attempt := mapShard(t, job, env, shards, i, 1)
		if len(shards) <= 32 || i%7 == 0 {
			p2, _ := mapShard(t, job, env, shards, i, attempt+1)
			if !bytes.Equal(p, p2) {
				t.Fatalf("%s: Map of shard %d (%s) twice gave different partials: %q, then %q", typ, i, shards[i], p, p2)
			}
		}
		partials[i] = p
	}

	order := make([]int, len(partials))
	for i := range order {
		order[i] = i
	}
	want := merge(t, job, raw, partials, order, nil)
	if !json.Valid(want) {
		t.Fatalf("%s: Result is not valid JSON: %q", typ, want)
	}
	for range Orders {
		order := rng.Perm(len(partials))
		got := merge(t, job, raw, partials, order, rng)
		if !bytes.Equal(got, want) {
			t.Fatalf("%s: merging in shard order gave %s, in the order %v with checkpoints %s: Merge must be associative and commutative",
				typ, want, order[:min(len(order), 20)], got)
		}
	}
	return want
}

// mapShard maps shard i, from the given attempt on, until it succeeds or Attempts have failed.
func mapShard(t testing.TB, job jobs.Job, env jobs.Env, shards [][]byte, i, attempt int) ([]byte, int) {
	t.Helper()
	var err error
	for last := attempt + Attempts - 1; attempt <= last; attempt++ {
		var p []byte
		p, err = job.Map(context.Background(), env, jobs.Task{JobID: "jobstest", Index: i, Attempt: attempt, Shard: shards[i]})
		if err == nil {
			return p, attempt
		}
	}
	t.Fatalf("%s: Map of shard %d (%s) failed %d attempts: %v", job.Type(), i, shards[i], Attempts, err)
	return nil, 0
}

// merge merges partials in order into a new aggregate; with rng, it checkpoints and restores the
// aggregate at random points and half-way.
func merge(t testing.TB, job jobs.Job, params json.RawMessage, partials [][]byte, order []int, rng *rand.Rand) json.RawMessage {
	t.Helper()
	agg, err := job.NewAggregate(params)
	if err != nil {
		t.Fatalf("%s: NewAggregate(%s): %v", job.Type(), params, err)
	}
	for n, i := range order {
		if err := agg.Merge(partials[i]); err != nil {
			t.Fatalf("%s: Merge of shard %d's partial: %v", job.Type(), i, err)
		}
		if rng != nil && (rng.IntN(4) == 0 || n == len(order)/2) {
			agg = Checkpoint(t, job, params, agg)
		}
	}
	res, err := agg.Result()
	if err != nil {
		t.Fatalf("%s: Result: %v", job.Type(), err)
	}
	return res
}

// Checkpoint does to agg what a failover does: it marshals agg and restores the data into a new
// aggregate of job, which it returns. It fails the test if either step fails or if the restored
// aggregate marshals differently.
func Checkpoint(t testing.TB, job jobs.Job, params json.RawMessage, agg jobs.Aggregate) jobs.Aggregate {
	t.Helper()
	data, err := agg.MarshalBinary()
	if err != nil {
		t.Fatalf("%s: MarshalBinary: %v", job.Type(), err)
	}
	fresh, err := job.NewAggregate(params)
	if err != nil {
		t.Fatalf("%s: NewAggregate(%s): %v", job.Type(), params, err)
	}
	if err := fresh.UnmarshalBinary(data); err != nil {
		t.Fatalf("%s: UnmarshalBinary of MarshalBinary's output: %v", job.Type(), err)
	}
	again, err := fresh.MarshalBinary()
	if err != nil || !bytes.Equal(again, data) {
		t.Fatalf("%s: MarshalBinary after UnmarshalBinary differs (err %v): %q, then %q", job.Type(), err, data, again)
	}
	return fresh
}

// MapAll splits job and maps every shard in order (retrying as Run does), and returns the
// shards and their partials, for tests of an aggregate.
func MapAll(t testing.TB, job jobs.Job, env jobs.Env, params string) (shards, partials [][]byte) {
	t.Helper()
	if env == nil {
		env = NewEnv()
	}
	shards, err := job.Split(context.Background(), env, json.RawMessage(params))
	if err != nil {
		t.Fatalf("%s: Split(%s): %v", job.Type(), params, err)
	}
	for i := range shards {
		p, _ := mapShard(t, job, env, shards, i, 1)
		partials = append(partials, p)
	}
	return shards, partials
}

// MergeShuffled merges partials into a new aggregate of job in an order drawn from seed,
// checkpointing and restoring it at random points, and returns the result.
func MergeShuffled(t testing.TB, job jobs.Job, params string, partials [][]byte, seed uint64) json.RawMessage {
	t.Helper()
	rng := rand.New(rand.NewPCG(seed, 0x6a6f6273))
	return merge(t, job, json.RawMessage(params), partials, rng.Perm(len(partials)), rng)
}
