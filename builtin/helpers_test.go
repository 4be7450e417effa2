package builtin

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/mapagg/mapagg/jobs"
	"io"
	"math/rand/v2"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"testing/iotest"
)

// fakeBlobEnv is an in-memory Env for testing the jobs' own logic (the storage adapter is tested
// against Azurite elsewhere).
type fakeBlobEnv struct {
	mu         sync.Mutex
	containers map[string]map[string][]byte
	// oneByte makes ReadRange return a reader that yields one byte per Read.
	oneByte bool
}

var _ jobs.Env = (*fakeBlobEnv)(nil)

func newFakeBlobEnv() *fakeBlobEnv {
	return &fakeBlobEnv{containers: make(map[string]map[string][]byte)}
}

func (e *fakeBlobEnv) put(container, name string, data []byte) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.containers[container] == nil {
		e.containers[container] = make(map[string][]byte)
	}
	e.containers[container][name] = bytes.Clone(data)
}

func (e *fakeBlobEnv) ListBlobs(_ context.Context, container, prefix string) ([]jobs.BlobInfo, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	c, ok := e.containers[container]
	if !ok {
		return nil, fmt.Errorf("container %q not found", container)
	}
	var out []jobs.BlobInfo
	for name, data := range c {
		if strings.HasPrefix(name, prefix) {
			out = append(out, jobs.BlobInfo{Name: name, Size: int64(len(data))})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

func (e *fakeBlobEnv) ReadRange(_ context.Context, container, name string, offset, count int64) (io.ReadCloser, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	data, ok := e.containers[container][name]
	if !ok {
		return nil, fmt.Errorf("blob %q/%q not found", container, name)
	}
	if offset < 0 || count <= 0 || offset > int64(len(data)) {
		return nil, fmt.Errorf("invalid range: %d bytes at %d of a %d-byte blob", count, offset, len(data))
	}
	end := min(int64(len(data)), offset+count)
	var r io.Reader = bytes.NewReader(data[offset:end])
	if e.oneByte {
		r = iotest.OneByteReader(r)
	}
	return io.NopCloser(r), nil
}

// runJob runs a whole job in one process the way the system does: Validate, Split, Map every
// shard in a random order, and Merge the partials, marshalling the aggregate and restoring it into
// a fresh one at random points (as a failover would). It returns the result JSON.
func runJob(t testing.TB, j jobs.Job, env jobs.Env, params string, rng *rand.Rand) json.RawMessage {
	t.Helper()
	ctx := context.Background()
	raw := json.RawMessage(params)
	if err := j.Validate(raw); err != nil {
		t.Fatalf("Validate(%s): %v", params, err)
	}
	shards, err := j.Split(ctx, env, raw)
	if err != nil {
		t.Fatalf("Split(%s): %v", params, err)
	}
	if len(shards) == 0 || len(shards) > jobs.MaxShards {
		t.Fatalf("Split(%s) returned %d shards", params, len(shards))
	}
	for i, s := range shards {
		if len(s) > jobs.MaxShardBytes {
			t.Fatalf("shard %d is %d bytes", i, len(s))
		}
	}
	partials := make([][]byte, len(shards))
	for _, i := range rng.Perm(len(shards)) {
		p, err := j.Map(ctx, env, jobs.Task{JobID: "test", Index: i, Attempt: 2, Shard: shards[i]})
		if err != nil {
			t.Fatalf("Map shard %d (%s): %v", i, shards[i], err)
		}
		// Map is a pure function of the shard: a second run gives the same partial.
		if i%7 == 0 {
			again, err := j.Map(ctx, env, jobs.Task{JobID: "test", Index: i, Attempt: 3, Shard: shards[i]})
			if err != nil || !bytes.Equal(again, p) {
				t.Fatalf("Map shard %d twice: partials differ (err %v)", i, err)
			}
		}
		partials[i] = p
	}
	return mergeShuffled(t, j, raw, partials, rng)
}

// mergeShuffled merges partials in a random order into a new aggregate, round-tripping it through
// MarshalBinary/UnmarshalBinary at random points, and returns the result.
func mergeShuffled(t testing.TB, j jobs.Job, params json.RawMessage, partials [][]byte, rng *rand.Rand) json.RawMessage {
	t.Helper()
	agg, err := j.NewAggregate(params)
	if err != nil {
		t.Fatalf("NewAggregate: %v", err)
	}
	for n, i := range rng.Perm(len(partials)) {
		if err := agg.Merge(partials[i]); err != nil {
			t.Fatalf("Merge partial %d: %v", i, err)
		}
		if rng.IntN(4) == 0 || n == len(partials)/2 {
			agg = roundTrip(t, j, params, agg)
		}
	}
	res, err := agg.Result()
	if err != nil {
		t.Fatalf("Result: %v", err)
	}
	return res
}

// roundTrip checkpoints agg and restores it into a fresh aggregate, checking that the encoding is
// deterministic.
func roundTrip(t testing.TB, j jobs.Job, params json.RawMessage, agg jobs.Aggregate) jobs.Aggregate {
	t.Helper()
	data, err := agg.MarshalBinary()
	if err != nil {
		t.Fatalf("MarshalBinary: %v", err)
	}
	fresh, err := j.NewAggregate(params)
	if err != nil {
		t.Fatalf("NewAggregate: %v", err)
	}
	if err := fresh.UnmarshalBinary(data); err != nil {
		t.Fatalf("UnmarshalBinary: %v", err)
	}
	again, err := fresh.MarshalBinary()
	if err != nil || !bytes.Equal(again, data) {
		t.Fatalf("MarshalBinary after UnmarshalBinary differs (err %v)", err)
	}
	return fresh
}

// mapAll splits and maps a job in order, returning the shards and partials.
func mapAll(t testing.TB, j jobs.Job, env jobs.Env, params string) (shards, partials [][]byte) {
	t.Helper()
	ctx := context.Background()
	shards, err := j.Split(ctx, env, json.RawMessage(params))
	if err != nil {
		t.Fatalf("Split(%s): %v", params, err)
	}
	for i, s := range shards {
		p, err := j.Map(ctx, env, jobs.Task{JobID: "test", Index: i, Attempt: 2, Shard: s})
		if err != nil {
			t.Fatalf("Map shard %d: %v", i, err)
		}
		partials = append(partials, p)
	}
	return shards, partials
}

// checkAggregateFuzz is the body of the aggregate fuzz targets: Merge and UnmarshalBinary of
// arbitrary bytes must not panic, a failed Merge must change nothing, and what UnmarshalBinary
// accepts must re-encode to a fixed point.
func checkAggregateFuzz(t *testing.T, j jobs.Job, params string, seed, data []byte) {
	raw := json.RawMessage(params)
	agg, err := j.NewAggregate(raw)
	if err != nil {
		t.Fatal(err)
	}
	if len(seed) > 0 {
		_ = agg.Merge(seed)
	}
	before, _ := agg.MarshalBinary()
	if err := agg.Merge(data); err != nil {
		after, _ := agg.MarshalBinary()
		if !bytes.Equal(before, after) {
			t.Fatalf("failed Merge changed the aggregate: %v", err)
		}
	}
	if _, err := agg.Result(); err != nil && !strings.Contains(err.Error(), "no samples") {
		t.Fatalf("Result: %v", err)
	}
	fresh, _ := j.NewAggregate(raw)
	if err := fresh.UnmarshalBinary(data); err != nil {
		return
	}
	enc, err := fresh.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	roundTrip(t, j, raw, fresh)
	other, _ := j.NewAggregate(raw)
	if err := other.UnmarshalBinary(enc); err != nil {
		t.Fatalf("UnmarshalBinary of a MarshalBinary output: %v", err)
	}
	_, _ = fresh.Result()
}

// checkParamsFuzz is the body of the parameter fuzz targets: Validate never panics, and
// parameters it accepts are accepted by NewAggregate and (for jobs that need no storage) Split.
func checkParamsFuzz(t *testing.T, j jobs.Job, params []byte, split bool) {
	raw := json.RawMessage(params)
	err := j.Validate(raw)
	if err != nil {
		var pe *jobs.ParamError
		if !errors.As(err, &pe) || pe.Job != j.Type() || !errors.Is(err, jobs.ErrBadParams) {
			t.Fatalf("Validate error is not a *jobs.ParamError of %s: %T %v", j.Type(), err, err)
		}
		return
	}
	if _, err := j.NewAggregate(raw); err != nil {
		t.Fatalf("NewAggregate refused what Validate accepted: %v", err)
	}
	if split {
		shards, err := j.Split(context.Background(), nil, raw)
		if err != nil {
			t.Fatalf("Split refused what Validate accepted: %v", err)
		}
		if len(shards) == 0 || len(shards) > jobs.MaxShards {
			t.Fatalf("Split returned %d shards", len(shards))
		}
	}
}

// splitIsCheap reports whether a Split of these parameters is small enough to run in a fuzz
// iteration.
func splitIsCheap(params []byte) bool {
	var v struct {
		Shards int `json:"shards"`
	}
	_ = json.Unmarshal(params, &v)
	return v.Shards <= 1000
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
