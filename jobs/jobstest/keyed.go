package jobstest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"slices"
	"sort"
	"testing"

	"github.com/mapagg/mapagg/jobs"
)

// DefaultPartitions is the partition count RunKeyed uses for a job that leaves it to the cluster.
const DefaultPartitions = 4

// Record is one output record of a keyed job: its partition, and its key and value as JSON.
type Record struct {
	Partition  int
	Key, Value json.RawMessage
}

// String is the record as `worker output` prints it by default: key<TAB>value, a string
// without its quotes (see jobs.AppendTSVField).
func (r Record) String() string {
	b, err := jobs.AppendTSVField(nil, r.Key)
	b = append(b, '\t')
	if err == nil {
		b, err = jobs.AppendTSVField(b, r.Value)
	}
	if err != nil {
		return fmt.Sprintf("%s\t%s (%v)", r.Key, r.Value, err)
	}
	return string(b)
}

// RunKeyed runs a keyed job in-process as a cluster would and checks its contract (see
// CheckKeyed); it fails the test at the first violation. It returns the output records,
// partition after partition, each partition in key order. env nil means an empty NewEnv().
func RunKeyed(t testing.TB, job jobs.KeyedJob, env jobs.Env, params string) []Record {
	t.Helper()
	recs, err := checkKeyed(job, env, params, t.Name())
	if err != nil {
		t.Fatal(err)
	}
	return recs
}

// CheckKeyed runs a keyed job in-process and returns its output records, or an error saying
// which part of the contract failed:
//   - Validate, Split or Partitions refuses params; Split is not deterministic or breaks a limit;
//   - Map fails Attempts times for a shard, emits a key or value over the limits, or emits other
//     pairs when run again (every shard of a small job, every 7th of a big one);
//   - the sequential run and Orders shuffled runs give different records. The sequential run
//     reduces each key's values in shard order, without Combine. A shuffled run shuffles them
//     and, if the job has Combine, combines them in random groupings, as the cluster does;
//   - a partition reduced twice gives different records;
//   - Reduce fails, or emits a key or value that is not JSON.
//
// The shuffle here is a reference in memory: the cluster's (package shuffle) sorts, spills and
// merges the same way by encoded key.
func CheckKeyed(job jobs.KeyedJob, env jobs.Env, params string) ([]Record, error) {
	return checkKeyed(job, env, params, "")
}

// pair is an emitted key/value pair.
type pair struct{ key, value string }

func checkKeyed(job jobs.KeyedJob, env jobs.Env, params, name string) ([]Record, error) {
	if env == nil {
		env = NewEnv()
	}
	ctx := context.Background()
	raw := json.RawMessage(params)
	typ := job.Type()
	if err := job.Validate(raw); err != nil {
		return nil, fmt.Errorf("%s: Validate(%s): %w", typ, params, err)
	}
	parts, err := job.Partitions(raw)
	if err != nil {
		return nil, fmt.Errorf("%s: Partitions(%s): %w", typ, params, err)
	}
	if parts == 0 {
		parts = DefaultPartitions
	}
	shards, err := splitTwice(ctx, job.Type(), env, params, func() ([][]byte, error) { return job.Split(ctx, env, raw) })
	if err != nil {
		return nil, err
	}
	h := fnv.New64a()
	h.Write([]byte(name + "\x00" + params))
	rng := rand.New(rand.NewPCG(h.Sum64(), uint64(len(shards))))

	emitted := make([][]pair, len(shards))
	for _, i := range rng.Perm(len(shards)) {
		ps, attempt, err := mapKeyed(job, env, shards, i, 1)
		if err != nil {
			return nil, err
		}
		if len(shards) <= 32 || i%7 == 0 {
			again, _, err := mapKeyed(job, env, shards, i, attempt+1)
			if err != nil {
				return nil, err
			}
			if a, b := sortedPairs(ps), sortedPairs(again); !slices.Equal(a, b) {
				return nil, fmt.Errorf("%s: Map of shard %d (%s) twice emitted different pairs (%d, then %d): Map must be a pure function of the shard", typ, i, shards[i], len(a), len(b))
			}
		}
		emitted[i] = ps
	}

	// Group by key, in shard order, per partition.
	values := map[string][]string{}
	for _, ps := range emitted {
		for _, p := range ps {
			values[p.key] = append(values[p.key], p.value)
		}
	}
	keys := make([][]string, parts)
	for k := range values {
		p := jobs.PartitionOf([]byte(k), parts)
		keys[p] = append(keys[p], k)
	}
	for _, ks := range keys {
		sort.Strings(ks) // Go compares strings bytewise: encoded-key order
	}

	want, err := reduceAll(ctx, job, keys, values, nil)
	if err != nil {
		return nil, err
	}
	for range Orders {
		got, err := reduceAll(ctx, job, keys, values, rng)
		if err != nil {
			return nil, err
		}
		if i := firstDiff(want, got); i >= 0 {
			return nil, fmt.Errorf("%s: sequentially, record %d is %s; with values shuffled%s, %s: %s", typ, i, recString(want, i), combinedNote(job), recString(got, i), keyedRule(job))
		}
	}
	// Re-run every partition: the same records again.
	again, err := reduceAll(ctx, job, keys, values, nil)
	if err != nil {
		return nil, err
	}
	if i := firstDiff(want, again); i >= 0 {
		return nil, fmt.Errorf("%s: a partition reduced twice gave record %d as %s, then %s: Reduce must be a pure function of the key and its values", typ, i, recString(want, i), recString(again, i))
	}
	return want, nil
}

func combinedNote(job jobs.KeyedJob) string {
	if job.Combiner() != nil {
		return " and combined in random groupings"
	}
	return ""
}

func keyedRule(job jobs.KeyedJob) string {
	if job.Combiner() != nil {
		return "Combine must be associative and commutative, and Reduce of the combined value must equal Reduce of the values"
	}
	return "Reduce must not depend on the order of a key's values"
}

func recString(recs []Record, i int) string {
	if i >= len(recs) {
		return "missing"
	}
	return fmt.Sprintf("%q (partition %d)", recs[i].String(), recs[i].Partition)
}

func firstDiff(a, b []Record) int {
	for i := range max(len(a), len(b)) {
		if i >= len(a) || i >= len(b) || a[i].Partition != b[i].Partition || !bytes.Equal(a[i].Key, b[i].Key) || !bytes.Equal(a[i].Value, b[i].Value) {
			return i
		}
	}
	return -1
}

// splitTwice splits, checks the limits, and checks a second split gives the same shards.
func splitTwice(_ context.Context, typ string, _ jobs.Env, params string, split func() ([][]byte, error)) ([][]byte, error) {
	shards, err := split()
	if err != nil {
		return nil, fmt.Errorf("%s: Split(%s): %w", typ, params, err)
	}
	if len(shards) > jobs.MaxShards {
		return nil, fmt.Errorf("%s: Split(%s) made %d shards, the limit is %d", typ, params, len(shards), jobs.MaxShards)
	}
	again, err := split()
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
	return shards, nil
}

// mapKeyed maps shard i from the given attempt on, retrying as Run does.
func mapKeyed(job jobs.KeyedJob, env jobs.Env, shards [][]byte, i, attempt int) ([]pair, int, error) {
	var err error
	for last := attempt + Attempts - 1; attempt <= last; attempt++ {
		var ps []pair
		task := jobs.Task{JobID: "jobstest", Index: i, Attempt: attempt, Shard: shards[i]}
		err = job.Map(context.Background(), env, task, func(k, v []byte) error {
			if len(k) > jobs.MaxKeyBytes || len(v) > jobs.MaxValueBytes {
				return fmt.Errorf("a %d-byte key and a %d-byte value; the limits are %d and %d", len(k), len(v), jobs.MaxKeyBytes, jobs.MaxValueBytes)
			}
			ps = append(ps, pair{string(k), string(v)})
			return nil
		})
		if err == nil {
			return ps, attempt, nil
		}
	}
	return nil, 0, fmt.Errorf("%s: Map of shard %d (%s) failed %d attempts: %w", job.Type(), i, shards[i], Attempts, err)
}

func sortedPairs(ps []pair) []pair {
	s := slices.Clone(ps)
	slices.SortFunc(s, func(a, b pair) int {
		if c := bytes.Compare([]byte(a.key), []byte(b.key)); c != 0 {
			return c
		}
		return bytes.Compare([]byte(a.value), []byte(b.value))
	})
	return s
}

// reduceAll reduces every partition in order. Without rng, each key's values go to Reduce as
// emitted; with it, they are shuffled and, if the job has a combiner, combined in random
// groupings into one value.
func reduceAll(ctx context.Context, job jobs.KeyedJob, keys [][]string, values map[string][]string, rng *rand.Rand) ([]Record, error) {
	var out []Record
	combine := job.Combiner()
	for p, ks := range keys {
		for _, k := range ks {
			vs := make([][]byte, len(values[k]))
			for i, v := range values[k] {
				vs[i] = []byte(v)
			}
			if rng != nil {
				rng.Shuffle(len(vs), func(i, j int) { vs[i], vs[j] = vs[j], vs[i] })
				if combine != nil {
					v, err := combineRandomly(combine, vs, rng)
					if err != nil {
						return nil, fmt.Errorf("%s: Combine of key %q: %w", job.Type(), k, err)
					}
					vs = [][]byte{v}
				}
			}
			err := job.Reduce(ctx, []byte(k), slices.Values(vs), func(key, value []byte) error {
				if !json.Valid(key) || !json.Valid(value) {
					return fmt.Errorf("emitted a record that is not JSON: %q %q", key, value)
				}
				out = append(out, Record{Partition: p, Key: bytes.Clone(key), Value: bytes.Clone(value)})
				return nil
			})
			if err != nil {
				return nil, fmt.Errorf("%s: Reduce of key %q: %w", job.Type(), k, err)
			}
		}
	}
	return out, nil
}

// combineRandomly combines vs (at least one) in random runs, as spills and merges group them.
func combineRandomly(combine func(dst, a, b []byte) ([]byte, error), vs [][]byte, rng *rand.Rand) ([]byte, error) {
	for len(vs) > 1 {
		i := rng.IntN(len(vs) - 1)
		c, err := combine(nil, vs[i], vs[i+1])
		if err != nil {
			return nil, err
		}
		vs = slices.Replace(vs, i, i+2, c)
	}
	return vs[0], nil
}
