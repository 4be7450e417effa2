package jobstest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
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

// Run runs job with params in-process, as a cluster would, and checks the job's contract (see
// Check); it fails the test at the first violation. It returns the result (the JSON of
// Aggregate.Result), so the test can check the answer. env is the storage the job reads (a *Env,
// say); nil means an empty NewEnv(). The orders are drawn from a generator seeded by the test's
// name and params, so a failure repeats.
func Run(t testing.TB, job jobs.Job, env jobs.Env, params string) json.RawMessage {
	t.Helper()
	res, err := check(job, env, params, t.Name())
	if err != nil {
		t.Fatal(err)
	}
	return res
}

// Check runs job with params in-process, as a cluster would, and returns its result, or an error
// saying which part of the job's contract failed:
//   - Validate, Split or NewAggregate refuses params, or they disagree;
//   - Split is not deterministic (it is called twice), makes more than jobs.MaxShards shards or
//     a shard longer than jobs.MaxShardBytes;
//   - Map fails Attempts times for a shard (a failed attempt is retried, as the cluster does), or
//     a second run of Map gives a different partial (every shard of a small job, every 7th of a
//     big one): Map must be a pure function of the shard;
//   - merging the partials in Orders shuffled orders gives a result other than merging them in
//     shard order (Merge must be associative and commutative), or so does merging them with the
//     aggregate checkpointed and restored (MarshalBinary into a fresh aggregate's
//     UnmarshalBinary) at random points and half-way, as a failover does (the checkpoint must
//     hold the whole aggregate);
//   - a restored aggregate marshals differently than the one it came from;
//   - Result fails or is not valid JSON.
//
// A result that depends on the order only by rounding (a sum of floats) fails: sum integers, or
// fixed-point values, instead. env nil means an empty NewEnv(). Check is Run for a program
// without a *testing.T (an Example, a command's dry run).
func Check(job jobs.Job, env jobs.Env, params string) (json.RawMessage, error) {
	return check(job, env, params, "")
}

func check(job jobs.Job, env jobs.Env, params, name string) (json.RawMessage, error) {
	if env == nil {
		env = NewEnv()
	}
	ctx := context.Background()
	raw := json.RawMessage(params)
	typ := job.Type()
	if err := job.Validate(raw); err != nil {
		return nil, fmt.Errorf("%s: Validate(%s): %w", typ, params, err)
	}
	shards, err := job.Split(ctx, env, raw)
	if err != nil {
		return nil, fmt.Errorf("%s: Split(%s): %w", typ, params, err)
	}
	if len(shards) > jobs.MaxShards {
		return nil, fmt.Errorf("%s: Split(%s) made %d shards, the limit is %d", typ, params, len(shards), jobs.MaxShards)
	}
	again, err := job.Split(ctx, env, raw)
	if err != nil {
		return nil, fmt.Errorf("%s: second Split(%s): %w", typ, params, err)
	}
	if len(again) != len(shards) {
		return nil, fmt.Errorf("%s: Split is not deterministic: %d shards, then %d", typ, len(shards), len(again))
	}
	for i, s := range shards {
		if len(s) > jobs.MaxShardBytes {
			return nil, fmt.Errorf("%s: shard %d is %d bytes, the limit is %d", typ, i, len(s), jobs.MaxShardBytes)
		}
		if !bytes.Equal(s, again[i]) {
			return nil, fmt.Errorf("%s: Split is not deterministic: shard %d is %q, then %q", typ, i, s, again[i])
		}
	}

	h := fnv.New64a()
	h.Write([]byte(name + "\x00" + params))
	rng := rand.New(rand.NewPCG(h.Sum64(), uint64(len(shards))))

	partials := make([][]byte, len(shards))
	for _, i := range rng.Perm(len(shards)) {
		p, attempt, err := mapShard(job, env, shards, i, 1)
		if err != nil {
			return nil, err
		}
		if len(shards) <= 32 || i%7 == 0 {
			p2, _, err := mapShard(job, env, shards, i, attempt+1)
			if err != nil {
				return nil, err
			}
			if !bytes.Equal(p, p2) {
				return nil, fmt.Errorf("%s: Map of shard %d (%s) twice gave different partials: %q, then %q", typ, i, shards[i], p, p2)
			}
		}
		partials[i] = p
	}

	order := make([]int, len(partials))
	for i := range order {
		order[i] = i
	}
	want, err := merge(job, raw, partials, order, nil)
	if err != nil {
		return nil, err
	}
	if !json.Valid(want) {
		return nil, fmt.Errorf("%s: Result is not valid JSON: %q", typ, want)
	}
	for range Orders {
		order := rng.Perm(len(partials))
		got, err := merge(job, raw, partials, order, nil)
		if err != nil {
			return nil, err
		}
		if !bytes.Equal(got, want) {
			return nil, fmt.Errorf("%s: merging in shard order gave %s, in the order %v %s: Merge must be associative and commutative",
				typ, want, order[:min(len(order), 20)], got)
		}
		if got, err = merge(job, raw, partials, order, rng); err != nil {
			return nil, err
		}
		if !bytes.Equal(got, want) {
			return nil, fmt.Errorf("%s: merging gave %s, and %s when checkpointed and restored on the way: the checkpoint (MarshalBinary) must hold the whole aggregate",
				typ, want, got)
		}
	}
	return want, nil
}

// mapShard maps shard i, from the given attempt on, until it succeeds or Attempts have failed. It
// returns the partial and the attempt that made it.
func mapShard(job jobs.Job, env jobs.Env, shards [][]byte, i, attempt int) ([]byte, int, error) {
	var err error
	for last := attempt + Attempts - 1; attempt <= last; attempt++ {
		var p []byte
		p, err = job.Map(context.Background(), env, jobs.Task{JobID: "jobstest", Index: i, Attempt: attempt, Shard: shards[i]})
		if err == nil {
			return p, attempt, nil
		}
	}
	return nil, 0, fmt.Errorf("%s: Map of shard %d (%s) failed %d attempts: %w", job.Type(), i, shards[i], Attempts, err)
}

// merge merges partials in order into a new aggregate; with rng, it checkpoints and restores the
// aggregate at random points and half-way.
func merge(job jobs.Job, params json.RawMessage, partials [][]byte, order []int, rng *rand.Rand) (json.RawMessage, error) {
	agg, err := job.NewAggregate(params)
	if err != nil {
		return nil, fmt.Errorf("%s: NewAggregate(%s): %w", job.Type(), params, err)
	}
	for n, i := range order {
		if err := agg.Merge(partials[i]); err != nil {
			return nil, fmt.Errorf("%s: Merge of shard %d's partial: %w", job.Type(), i, err)
		}
		if rng != nil && (rng.IntN(4) == 0 || n == len(order)/2) {
			if agg, err = checkpoint(job, params, agg); err != nil {
				return nil, err
			}
		}
	}
	res, err := agg.Result()
	if err != nil {
		return nil, fmt.Errorf("%s: Result: %w", job.Type(), err)
	}
	return res, nil
}

// Checkpoint does to agg what a failover does: it marshals agg and restores the data into a new
// aggregate of job, which it returns. It fails the test if either step fails or if the restored
// aggregate marshals differently.
func Checkpoint(t testing.TB, job jobs.Job, params json.RawMessage, agg jobs.Aggregate) jobs.Aggregate {
	t.Helper()
	fresh, err := checkpoint(job, params, agg)
	if err != nil {
		t.Fatal(err)
	}
	return fresh
}

func checkpoint(job jobs.Job, params json.RawMessage, agg jobs.Aggregate) (jobs.Aggregate, error) {
	data, err := agg.MarshalBinary()
	if err != nil {
		return nil, fmt.Errorf("%s: MarshalBinary: %w", job.Type(), err)
	}
	fresh, err := job.NewAggregate(params)
	if err != nil {
		return nil, fmt.Errorf("%s: NewAggregate(%s): %w", job.Type(), params, err)
	}
	if err := fresh.UnmarshalBinary(data); err != nil {
		return nil, fmt.Errorf("%s: UnmarshalBinary of MarshalBinary's output: %w", job.Type(), err)
	}
	again, err := fresh.MarshalBinary()
	if err != nil || !bytes.Equal(again, data) {
		return nil, fmt.Errorf("%s: MarshalBinary after UnmarshalBinary differs (err %v): %q, then %q", job.Type(), err, data, again)
	}
	return fresh, nil
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
		p, _, err := mapShard(job, env, shards, i, 1)
		if err != nil {
			t.Fatal(err)
		}
		partials = append(partials, p)
	}
	return shards, partials
}

// MergeShuffled merges partials into a new aggregate of job in an order drawn from seed,
// checkpointing and restoring it at random points, and returns the result.
func MergeShuffled(t testing.TB, job jobs.Job, params string, partials [][]byte, seed uint64) json.RawMessage {
	t.Helper()
	rng := rand.New(rand.NewPCG(seed, 0x6a6f6273))
	res, err := merge(job, json.RawMessage(params), partials, rng.Perm(len(partials)), rng)
	if err != nil {
		t.Fatal(err)
	}
	return res
}
