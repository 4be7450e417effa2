package shuffle

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"iter"
	"maps"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/mapagg/mapagg/jobs"
	"github.com/mapagg/mapagg/jobs/jobstest"
)

// randSum sums random values over random keys: shard i emits N pairs drawn from seed i.
type randSum struct{}

type randParams struct {
	Shards     int `json:"shards"`
	N          int `json:"n"`
	Keys       int `json:"keys"`
	Partitions int `json:"partitions"`
}

type randShard struct {
	Seed    uint64 `json:"seed"`
	N, Keys int
}

func (randSum) Split(_ context.Context, _ jobs.Env, p randParams) ([]randShard, error) {
	var s []randShard
	for i := range p.Shards {
		s = append(s, randShard{Seed: uint64(i + 1), N: p.N, Keys: p.Keys})
	}
	return s, nil
}

// pairs yields a shard's pairs.
func (s randShard) pairs() iter.Seq2[string, int64] {
	return func(yield func(string, int64) bool) {
		rng := rand.New(rand.NewPCG(s.Seed, 99))
		for range s.N {
			k := rng.IntN(s.Keys)
			if !yield(fmt.Sprintf("k%x", k*2654435761%(1<<32)), int64(rng.IntN(1000))-100) {
				return
			}
		}
	}
}

func (randSum) Map(_ context.Context, _ jobs.Env, s randShard, emit jobs.Emitter[string, int64]) error {
	for k, v := range s.pairs() {
		emit(k, v)
	}
	return nil
}

func (randSum) Reduce(_ context.Context, _ string, values iter.Seq[int64], emit func(int64)) error {
	var sum int64
	for v := range values {
		sum += v
	}
	emit(sum)
	return nil
}

func (randSum) Partitions(p randParams) int { return p.Partitions }

// randCombine is randSum with a combiner.
type randCombine struct{ randSum }

func (randCombine) Combine(a, b int64) int64 { return a + b }

// expected computes the job's output per partition sequentially in memory: "key\tsum\n" lines
// in key order.
func expected(p randParams) map[int]string {
	sums := map[string]int64{}
	shards, _ := randSum{}.Split(context.Background(), nil, p)
	for _, s := range shards {
		for k, v := range s.pairs() {
			sums[k] += v
		}
	}
	out := make(map[int][]string)
	for _, k := range slices.Sorted(maps.Keys(sums)) {
		part := jobs.PartitionOf([]byte(k), p.Partitions)
		out[part] = append(out[part], fmt.Sprintf("%s\t%d\n", k, sums[k]))
	}
	res := make(map[int]string)
	for i := range p.Partitions {
		res[i] = strings.Join(out[i], "")
	}
	return res
}

// memStorage is an in-memory Storage. A Put whose reader fails stores nothing.
type memStorage struct {
	mu    sync.Mutex
	blobs map[string][]byte
}

func newMemStorage() *memStorage { return &memStorage{blobs: map[string][]byte{}} }

func (m *memStorage) Put(ctx context.Context, name string, r io.Reader) error {
	b, err := io.ReadAll(r)
	if err == nil {
		err = ctx.Err()
	}
	if err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.blobs[name] = b
	return nil
}

func (m *memStorage) Get(_ context.Context, name string) (io.ReadCloser, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	b, ok := m.blobs[name]
	if !ok {
		return nil, fmt.Errorf("blob %q not found", name)
	}
	return io.NopCloser(bytes.NewReader(b)), nil
}

func runName(shard, part int) string { return fmt.Sprintf("job/map/%d/p%d.run", shard, part) }

// runJob runs every map task, then every reduce task, through st, and returns the outputs.
func runJob(t testing.TB, st Storage, job jobs.KeyedJob, params string, mcfg MapConfig, rcfg ReduceConfig) (map[int]string, []MapStats, []ReduceStats) {
	t.Helper()
	ctx := context.Background()
	shards, err := job.Split(ctx, nil, []byte(params))
	if err != nil {
		t.Fatal(err)
	}
	var ms []MapStats
	for i, s := range shards {
		sink := StorageSink(ctx, st, func(p int) string { return runName(i, p) })
		stats, err := Map(ctx, job, nil, jobs.Task{JobID: "job", Index: i, Attempt: 1, Shard: s}, sink, mcfg)
		if err != nil {
			t.Fatalf("map shard %d: %v", i, err)
		}
		ms = append(ms, stats)
	}
	outputs := map[int]string{}
	var rs []ReduceStats
	for p := range mcfg.Partitions {
		var names []string
		for i := range shards {
			names = append(names, runName(i, p))
		}
		var buf bytes.Buffer
		out, _ := NewOutputWriter(&buf, FormatTSV)
		cfg := rcfg
		cfg.Partition = p
		stats, err := Reduce(ctx, job, StorageRuns(st, names), out, cfg)
		if err != nil {
			t.Fatalf("reduce partition %d: %v", p, err)
		}
		if stats.OutputBytes != int64(buf.Len()) {
			t.Errorf("partition %d: OutputBytes %d, wrote %d", p, stats.OutputBytes, buf.Len())
		}
		outputs[p] = buf.String()
		rs = append(rs, stats)
	}
	return outputs, ms, rs
}

func compareOutputs(t *testing.T, got, want map[int]string) {
	t.Helper()
	for p := range want {
		if got[p] != want[p] {
			g, w := strings.Split(got[p], "\n"), strings.Split(want[p], "\n")
			for i := range min(len(g), len(w)) {
				if g[i] != w[i] {
					t.Fatalf("partition %d: %d lines, want %d; line %d: %q want %q", p, len(g), len(w), i, g[i], w[i])
				}
			}
			t.Fatalf("partition %d: %d lines, want %d", p, len(g), len(w))
		}
	}
}

// Random keys, a budget small enough to spill on both sides, with and without a combiner: the
// output equals the sequential computation, and memory stays within the budget.
func TestShuffle_RandomKeys_SpillsBothSides(t *testing.T) {
	for _, tt := range []struct {
		name string
		job  jobs.KeyedJob
		p    randParams
	}{
		{"combine", jobs.Keyed("randsum", randCombine{}), randParams{Shards: 9, N: 25000, Keys: 30000, Partitions: 3}},
		{"no combine", jobs.Keyed("randsum", randSum{}), randParams{Shards: 9, N: 12000, Keys: 5000, Partitions: 2}},
		{"hot keys", jobs.Keyed("randsum", randCombine{}), randParams{Shards: 3, N: 30000, Keys: 7, Partitions: 4}},
		{"hot keys, no combine", jobs.Keyed("randsum", randSum{}), randParams{Shards: 3, N: 30000, Keys: 3, Partitions: 2}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			params := fmt.Sprintf(`{"shards":%d,"n":%d,"keys":%d,"partitions":%d}`, tt.p.Shards, tt.p.N, tt.p.Keys, tt.p.Partitions)
			mcfg := MapConfig{Partitions: tt.p.Partitions, MemoryBytes: MinMemoryBytes, BlockBytes: 16 << 10, TempDir: t.TempDir()}
			rcfg := ReduceConfig{MemoryBytes: MinMemoryBytes, BlockBytes: 16 << 10, TempDir: t.TempDir()}
			got, ms, rs := runJob(t, newMemStorage(), tt.job, params, mcfg, rcfg)
			compareOutputs(t, got, expected(tt.p))
			var spills, merges int
			for _, s := range ms {
				spills += s.Spills
				if s.PeakMemory > mcfg.MemoryBytes || s.PeakMemory == 0 {
					t.Errorf("map peak memory %d, budget %d", s.PeakMemory, mcfg.MemoryBytes)
				}
				if s.Emitted != int64(tt.p.N) {
					t.Errorf("map emitted %d, want %d", s.Emitted, tt.p.N)
				}
			}
			for _, s := range rs {
				merges += s.Merges
				if s.PeakMemory > rcfg.MemoryBytes || s.PeakMemory == 0 {
					t.Errorf("reduce peak memory %d, budget %d", s.PeakMemory, rcfg.MemoryBytes)
				}
				if s.Runs != tt.p.Shards || (tt.p.Keys > 1000 && s.RunsMerged <= s.Runs) {
					t.Errorf("reduce stats %+v: want %d runs and intermediate merges", s, tt.p.Shards)
				}
			}
			if tt.p.Keys > 1000 && (spills == 0 || merges == 0) {
				t.Errorf("%d map spills and %d reduce merges: the budget forced neither", spills, merges)
			}
			t.Logf("map %+v; reduce %+v", ms[0], rs[0])
		})
	}
}

// Within the budget, the map buffer holds pairs without allocating per pair.
func TestMapBuffer_AddDoesNotAllocate(t *testing.T) {
	b, err := NewMapBuffer(MapConfig{Partitions: 4, MemoryBytes: 8 << 20, TempDir: t.TempDir()}, jobs.Keyed("randsum", randCombine{}).Combiner())
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	keys := make([][]byte, 1000)
	for i := range keys {
		keys[i] = fmt.Appendf(nil, "key-%d", i)
	}
	one, _ := jobs.EncodeValue(int64(1))
	for _, k := range keys {
		_ = b.Add(k, one)
	}
	i := 0
	if allocs := testing.AllocsPerRun(5000, func() {
		_ = b.Add(keys[i%len(keys)], one)
		i++
	}); allocs > 0 {
		t.Errorf("Add allocates %.1f times per pair", allocs)
	}
	if b.Stats().Spills != 0 || b.memory() > 1<<20 {
		t.Errorf("1,000 keys: %d spills, %d bytes", b.Stats().Spills, b.memory())
	}
}

// A reduce over more runs than its budget reads at once holds only the budget.
func TestReduce_BoundedFanIn(t *testing.T) {
	const runs = 60
	var openers []Opener
	want := 0
	for i := range runs {
		data := writeRun(t, 0, 200+i, 4<<10)
		want += 200 + i
		openers = append(openers, func(context.Context) (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(data)), nil })
	}
	var buf bytes.Buffer
	out, _ := NewOutputWriter(&buf, FormatJSONL)
	cfg := ReduceConfig{MemoryBytes: MinMemoryBytes, BlockBytes: 4 << 10, TempDir: t.TempDir()}
	stats, err := Reduce(context.Background(), concat{}, openers, out, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if stats.Records != int64(want) || stats.Keys != 259 || stats.Merges == 0 || stats.PeakMemory > cfg.MemoryBytes {
		t.Errorf("stats %+v: want %d records, 259 keys, merges, peak within %d", stats, want, cfg.MemoryBytes)
	}
	first, _, _ := strings.Cut(buf.String(), "\n")
	if first != `{"key":"key0000","value":60}` {
		t.Errorf("first record %s", first)
	}
}

// concat is a byte-level job whose Reduce counts a key's values.
type concat struct{ jobs.KeyedJob }

func (concat) Type() string                                     { return "concat" }
func (concat) Combiner() func(dst, a, b []byte) ([]byte, error) { return nil }
func (concat) Reduce(_ context.Context, key []byte, values iter.Seq[[]byte], emit func(k, v []byte) error) error {
	n := 0
	for range values {
		n++
	}
	return emit(jobs.AppendJSONString(nil, string(key)), fmt.Appendf(nil, "%d", n))
}

func TestReduce_Errors(t *testing.T) {
	good := writeRun(t, 1, 10, 0)
	bad := bytes.Clone(good)
	bad[len(bad)-30] ^= 1
	open := func(b []byte) Opener {
		return func(context.Context) (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(b)), nil }
	}
	ctx := context.Background()
	out, _ := NewOutputWriter(io.Discard, FormatTSV)
	if _, err := Reduce(ctx, concat{}, []Opener{open(good), open(bad)}, out, ReduceConfig{Partition: 1}); !errors.Is(err, ErrCorruptRun) {
		t.Errorf("a corrupt run: %v", err)
	}
	if _, err := Reduce(ctx, concat{}, []Opener{open(good)}, out, ReduceConfig{Partition: 2}); !errors.Is(err, ErrCorruptRun) || !strings.Contains(err.Error(), "partition 1 given to the reduce of partition 2") {
		t.Errorf("a run of another partition: %v", err)
	}
	if _, err := Reduce(ctx, panicky{}, []Opener{open(good)}, out, ReduceConfig{Partition: 1}); err == nil || !strings.Contains(err.Error(), "panic") {
		t.Errorf("a panicking Reduce: %v", err)
	}
	if _, err := Reduce(ctx, concat{}, nil, out, ReduceConfig{MemoryBytes: 1}); err == nil {
		t.Error("a 1-byte budget was accepted")
	}
}

type panicky struct{ concat }

func (panicky) Reduce(context.Context, []byte, iter.Seq[[]byte], func(k, v []byte) error) error {
	panic("boom")
}

// A failed map task stores no run of the partition it was writing.
func TestMap_FailureStoresNothingHalfWritten(t *testing.T) {
	st := newMemStorage()
	job := jobs.Keyed("randsum", randCombine{})
	shard, _ := jobs.EncodeShard(randShard{Seed: 1, N: 1000, Keys: 100})
	ctx, cancel := context.WithCancel(context.Background())
	calls := 0
	sink := func(p int) (io.WriteCloser, error) {
		calls++
		if calls == 2 {
			cancel()
		}
		return PutWriter(ctx, st, runName(0, p)), nil
	}
	_, err := Map(ctx, job, nil, jobs.Task{Shard: shard}, sink, MapConfig{Partitions: 3})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Map = %v", err)
	}
	if len(st.blobs) != 1 {
		t.Errorf("stored %v, want only partition 0's run", slices.Collect(maps.Keys(st.blobs)))
	}
}

func TestOutputWriter_Formats(t *testing.T) {
	var tsv, jsonl bytes.Buffer
	tw, _ := NewOutputWriter(&tsv, FormatTSV)
	jw, _ := NewOutputWriter(&jsonl, FormatJSONL)
	for _, w := range []OutputWriter{tw, jw} {
		for _, r := range [][2]string{{`"ann"`, `12`}, {`"tab\there\\"`, `{"a": [1, 2]}`}, {`7`, `"x\ny"`}} {
			if err := w.WriteRecord([]byte(r[0]), []byte(r[1])); err != nil {
				t.Fatal(err)
			}
		}
		if err := w.WriteRecord([]byte(`"k"`), []byte(`{bad`)); err == nil {
			t.Error("a record that is not JSON was written")
		}
		_ = w.Flush()
	}
	if want := "ann\t12\ntab\\there\\\\\t{\"a\":[1,2]}\n7\tx\\ny\n"; tsv.String() != want {
		t.Errorf("tsv = %q, want %q", tsv.String(), want)
	}
	if want := `{"key":"ann","value":12}` + "\n" + `{"key":"tab\there\\","value":{"a":[1,2]}}` + "\n" + `{"key":7,"value":"x\ny"}` + "\n"; jsonl.String() != want {
		t.Errorf("jsonl = %q, want %q", jsonl.String(), want)
	}
	if tw.Records() != 3 || tw.Bytes() != int64(tsv.Len()) {
		t.Errorf("tsv counted %d records %d bytes", tw.Records(), tw.Bytes())
	}
	if _, err := NewOutputWriter(io.Discard, "csv"); err == nil {
		t.Error("format csv accepted")
	}
}

func TestConfig_Validate(t *testing.T) {
	for _, c := range []MapConfig{{Partitions: 0}, {Partitions: 1, MemoryBytes: 1}, {Partitions: jobs.MaxPartitions + 1}, {Partitions: 1, BlockBytes: -1}} {
		if _, err := NewMapBuffer(c, nil); err == nil {
			t.Errorf("MapConfig %+v accepted", c)
		}
	}
}

// The machinery and jobstest's in-memory reference give the same output, record for record.
func TestShuffle_AgreesWithJobstest(t *testing.T) {
	for _, job := range []jobs.KeyedJob{jobs.Keyed("randsum", randCombine{}), jobs.Keyed("randsum", randSum{})} {
		params := `{"shards":5,"n":3000,"keys":2000,"partitions":3}`
		recs := jobstest.RunKeyed(t, job, nil, params)
		want := map[int]string{}
		for _, r := range recs {
			want[r.Partition] += r.String() + "\n"
		}
		mcfg := MapConfig{Partitions: 3, MemoryBytes: MinMemoryBytes, BlockBytes: 1 << 10, TempDir: t.TempDir()}
		got, _, _ := runJob(t, newMemStorage(), job, params, mcfg, ReduceConfig{TempDir: t.TempDir()})
		compareOutputs(t, got, want)
	}
}

// Random configurations (seeded, so a failure repeats): shards, pairs, key space, partitions,
// block sizes, budgets and combiner drawn at random; the output always equals the sequential
// computation and memory stays within the budgets.
func TestShuffle_Property(t *testing.T) {
	rng := rand.New(rand.NewPCG(20261125, 19))
	for i := range 6 {
		p := randParams{Shards: 1 + rng.IntN(12), N: rng.IntN(20000), Keys: 1 + rng.IntN(20000), Partitions: 1 + rng.IntN(6)}
		var job jobs.KeyedJob = jobs.Keyed("randsum", randSum{})
		if rng.IntN(2) == 0 {
			job = jobs.Keyed("randsum", randCombine{})
		}
		mcfg := MapConfig{Partitions: p.Partitions, MemoryBytes: MinMemoryBytes + rng.Int64N(1<<20), BlockBytes: 64 << rng.IntN(10), TempDir: t.TempDir()}
		rcfg := ReduceConfig{MemoryBytes: MinMemoryBytes + rng.Int64N(1<<20), BlockBytes: 64 << rng.IntN(10), TempDir: t.TempDir()}
		t.Run(fmt.Sprint(i), func(t *testing.T) {
			params := fmt.Sprintf(`{"shards":%d,"n":%d,"keys":%d,"partitions":%d}`, p.Shards, p.N, p.Keys, p.Partitions)
			got, ms, rs := runJob(t, newMemStorage(), job, params, mcfg, rcfg)
			compareOutputs(t, got, expected(p))
			for _, s := range ms {
				if s.PeakMemory > mcfg.MemoryBytes {
					t.Errorf("%s %+v: map peak memory %d", params, mcfg, s.PeakMemory)
				}
			}
			for _, s := range rs {
				if s.PeakMemory > rcfg.MemoryBytes {
					t.Errorf("%s %+v: reduce peak memory %d", params, rcfg, s.PeakMemory)
				}
			}
		})
	}
}

// signedKeys emits integer keys from -n to n; output partitions are in numeric order.
type signedKeys struct{}

func (signedKeys) Split(_ context.Context, _ jobs.Env, p randParams) ([]int, error) {
	return []int{p.N, p.N / 2}, nil
}

func (signedKeys) Map(_ context.Context, _ jobs.Env, n int, emit jobs.Emitter[int64, string]) error {
	for i := -n; i <= n; i++ {
		emit(int64(i)*int64(i)*int64(i), "x")
	}
	return nil
}

func (signedKeys) Reduce(_ context.Context, _ int64, values iter.Seq[string], emit func(int)) error {
	n := 0
	for range values {
		n++
	}
	emit(n)
	return nil
}

func (signedKeys) Partitions(p randParams) int { return p.Partitions }

func TestShuffle_IntegerKeysInNumericOrder(t *testing.T) {
	params := `{"n": 9000, "partitions": 2}`
	mcfg := MapConfig{Partitions: 2, MemoryBytes: MinMemoryBytes, BlockBytes: 1 << 10, TempDir: t.TempDir()}
	got, ms, _ := runJob(t, newMemStorage(), jobs.Keyed("cubes", signedKeys{}), params, mcfg, ReduceConfig{TempDir: t.TempDir()})
	if ms[0].Spills == 0 {
		t.Errorf("no spill: %+v", ms[0])
	}
	total := 0
	for p, out := range got {
		prev := int64(math.MinInt64)
		for line := range strings.Lines(out) {
			k, n, _ := strings.Cut(strings.TrimSuffix(line, "\n"), "\t")
			key, err := strconv.ParseInt(k, 10, 64)
			if err != nil || key <= prev {
				t.Fatalf("partition %d: key %q after %d", p, k, prev)
			}
			prev = key
			c, _ := strconv.Atoi(n)
			total += c
		}
	}
	if total != 18001+9001 {
		t.Errorf("counted %d values, want %d", total, 18001+9001)
	}
}

// A value larger than the budget's share still goes through, spilled on its own.
func TestMapBuffer_ValueLargerThanBudget(t *testing.T) {
	b, err := NewMapBuffer(MapConfig{Partitions: 2, MemoryBytes: MinMemoryBytes, TempDir: t.TempDir()}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	big := bytes.Repeat([]byte("v"), 600<<10)
	for _, k := range []string{"c", "a", "b", "a"} {
		if err := b.Add([]byte(k), big); err != nil {
			t.Fatal(err)
		}
	}
	runs := map[int]*bytes.Buffer{}
	err = b.Finish(context.Background(), func(p int) (io.WriteCloser, error) {
		runs[p] = new(bytes.Buffer)
		return nopCloser{runs[p]}, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	var keys []string
	for p := range 2 {
		_, recs, err := readRun(runs[p].Bytes())
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range recs {
			k, v, _ := strings.Cut(r, "=")
			if len(v) != len(big) {
				t.Errorf("key %s: a %d-byte value", k, len(v))
			}
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	if !slices.Equal(keys, []string{"a", "a", "b", "c"}) || b.Stats().Spills < 3 {
		t.Errorf("keys %v, stats %+v", keys, b.Stats())
	}
}

type nopCloser struct{ io.Writer }

func (nopCloser) Close() error { return nil }

func TestReduce_Cancelled(t *testing.T) {
	data := writeRun(t, 0, 10000, 0)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	out, _ := NewOutputWriter(io.Discard, FormatTSV)
	open := func(context.Context) (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(data)), nil }
	if _, err := Reduce(ctx, concat{}, []Opener{open}, out, ReduceConfig{}); !errors.Is(err, context.Canceled) {
		t.Errorf("a cancelled reduce: %v", err)
	}
}

func TestKeyHash_IsPartitionOf(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for range 1000 {
		key := make([]byte, rng.IntN(20))
		for i := range key {
			key[i] = byte(rng.Uint32())
		}
		n := 1 + rng.IntN(jobs.MaxPartitions)
		if got, want := int(keyHash(key)%uint64(n)), jobs.PartitionOf(key, n); got != want {
			t.Fatalf("key %x of %d partitions: %d, PartitionOf %d", key, n, got, want)
		}
	}
}

// firstOnly is a byte-level Reduce that stops after a key's first value.
type firstOnly struct{ concat }

func (firstOnly) Reduce(_ context.Context, key []byte, values iter.Seq[[]byte], emit func(k, v []byte) error) error {
	for v := range values {
		return emit(jobs.AppendJSONString(nil, string(key)), jobs.AppendJSONString(nil, string(v)))
	}
	return nil
}

// A Reduce that stops early leaves the rest of its key's values unread, not given to the next key.
func TestReduce_StopsEarly(t *testing.T) {
	var openers []Opener
	for range 5 {
		data := writeRun(t, 0, 100, 256)
		openers = append(openers, func(context.Context) (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(data)), nil })
	}
	var buf bytes.Buffer
	out, _ := NewOutputWriter(&buf, FormatTSV)
	stats, err := Reduce(context.Background(), firstOnly{}, openers, out, ReduceConfig{TempDir: t.TempDir()})
	if err != nil || stats.Keys != 100 || stats.OutputRecords != 100 || stats.Records != 500 {
		t.Fatalf("stats %+v, %v", stats, err)
	}
	for i, line := range strings.Split(strings.TrimSuffix(buf.String(), "\n"), "\n") {
		if want := fmt.Sprintf("key%04d\tvalue %d", i, i*i); line != want {
			t.Fatalf("line %d = %q, want %q", i, line, want)
		}
	}
}

// A closed buffer's memory goes to the next buffer (cleared: the next task's pairs are exact),
// unless it is bigger than the next one's budget.
func TestMapBuffer_NextBufferReusesTheMemory(t *testing.T) {
	combine := jobs.Keyed("randsum", randCombine{}).Combiner()
	v, _ := jobs.EncodeValue(int64(1))
	cfg := MapConfig{Partitions: 2, MemoryBytes: 4 << 20, TempDir: t.TempDir()}
	reused := false
	for round := range 20 { // sync.Pool drops some under the race detector
		b, err := NewMapBuffer(cfg, combine)
		if err != nil {
			t.Fatal(err)
		}
		reused = reused || cap(b.entries) > 0
		for i := range 5000 {
			if err := b.Add(fmt.Appendf(nil, "r%d-k%d", round, i%1000), v); err != nil {
				t.Fatal(err)
			}
		}
		if b.used != 1000 || b.Stats().Spills != 0 {
			t.Fatalf("round %d: %d keys buffered, %d spills; want 1000 and none", round, b.used, b.Stats().Spills)
		}
		b.Close()
	}
	if !reused {
		t.Fatal("no buffer reused a closed one's memory")
	}
	small, err := NewMapBuffer(MapConfig{Partitions: 2, MemoryBytes: MinMemoryBytes, TempDir: t.TempDir()}, combine)
	if err != nil {
		t.Fatal(err)
	}
	if small.memory() > MinMemoryBytes {
		t.Fatalf("a %d-byte buffer took %d bytes of memory", MinMemoryBytes, small.memory())
	}
}

// TestMapBuffer_ValuesCrossTheInlineLength combines values whose length moves across
// inlineValue both ways (a sum in its shortest big-endian bytes, 0 to 8 long), in a buffer that
// never spills and in one that spills often, with and without a combiner: every key's values
// must still add up.
func TestMapBuffer_ValuesCrossTheInlineLength(t *testing.T) {
	encode := func(n uint64) []byte {
		var b [8]byte
		binary.BigEndian.PutUint64(b[:], n)
		return bytes.TrimLeft(b[:], "\x00")
	}
	decode := func(v []byte) uint64 {
		var n uint64
		for _, c := range v {
			n = n<<8 | uint64(c)
		}
		return n
	}
	sum := func(dst, a, b []byte) ([]byte, error) { return append(dst, encode(decode(a)+decode(b))...), nil }
	for _, tc := range []struct {
		name    string
		memory  int64
		combine func(dst, a, b []byte) ([]byte, error)
	}{{"combined", 8 << 20, sum}, {"combined-spilling", MinMemoryBytes, sum}, {"uncombined-spilling", MinMemoryBytes, nil}} {
		t.Run(tc.name, func(t *testing.T) {
			b, err := NewMapBuffer(MapConfig{Partitions: 3, MemoryBytes: tc.memory, TempDir: t.TempDir()}, tc.combine)
			if err != nil {
				t.Fatal(err)
			}
			defer b.Close()
			rng := rand.New(rand.NewPCG(7, 8))
			want := map[string]uint64{}
			for range 60_000 {
				// Keys of 5 to 20 bytes, values of 0 to 8 bytes.
				k := fmt.Sprintf("k%0*d", []int{4, 7, 12, 19}[rng.IntN(4)], rng.IntN(2000))
				v := rng.Uint64N(1 << (8 * (1 + rng.IntN(7))))
				want[k] += v
				if err := b.Add([]byte(k), encode(v)); err != nil {
					t.Fatal(err)
				}
			}
			runs := map[int]*bytes.Buffer{}
			if err := b.Finish(context.Background(), func(p int) (io.WriteCloser, error) {
				runs[p] = new(bytes.Buffer)
				return nopCloser{runs[p]}, nil
			}); err != nil {
				t.Fatal(err)
			}
			got := map[string]uint64{}
			for p := range 3 {
				r, err := NewRunReader(bytes.NewReader(runs[p].Bytes()))
				if err != nil {
					t.Fatal(err)
				}
				for r.Next() {
					got[string(r.Key())] += decode(r.Value())
				}
				if err := r.Err(); err != nil {
					t.Fatal(err)
				}
			}
			if !maps.Equal(got, want) {
				t.Errorf("%d keys summed, want %d; stats %+v", len(got), len(want), b.Stats())
			}
			if tc.memory == MinMemoryBytes && b.Stats().Spills == 0 {
				t.Errorf("no spill: %+v", b.Stats())
			}
		})
	}
}
