package shuffle

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"runtime"
	"strconv"
	"syscall"
	"testing"

	"github.com/mapagg/mapagg/jobs"
	"github.com/mapagg/mapagg/jobs/jobstest"
)

// benchTaskMemory is a keyed task's default budget on a 2-core worker (worker.DefaultMemoryBudget / 2).
const benchTaskMemory = 8 << 20

type discardCloser struct{}

func (discardCloser) Write(p []byte) (int, error) { return len(p), nil }
func (discardCloser) Close() error                { return nil }

// benchPairs returns n pairs over a vocabulary of keys words (Zipf-like, as words are).
func benchPairs(n, keys int) (ks [][]byte, v []byte, size int64) {
	rng := rand.New(rand.NewPCG(1, 2))
	zipf := rand.NewZipf(rng, 1.1, 1, uint64(keys-1))
	v, _ = jobs.EncodeValue(int64(1))
	for range n {
		k := fmt.Appendf(nil, "w%07x", zipf.Uint64()*2654435761%(1<<28))
		ks = append(ks, k)
		size += int64(len(k) + len(v))
	}
	return ks, v, size
}

// BenchmarkMapBuffer_CombineSpill: 1M pairs over 200k keys into a 4 MiB buffer (combining,
// spilling, merging the spills) and out as 8 partition runs.
func BenchmarkMapBuffer_CombineSpill(b *testing.B) {
	ks, v, size := benchPairs(1_000_000, 200_000)
	combine := jobs.Keyed("randsum", randCombine{}).Combiner()
	b.SetBytes(size)
	b.ReportAllocs()
	var stats MapStats
	for b.Loop() {
		buf, err := NewMapBuffer(MapConfig{Partitions: 8, MemoryBytes: 4 << 20, TempDir: b.TempDir()}, combine)
		if err != nil {
			b.Fatal(err)
		}
		for _, k := range ks {
			if err := buf.Add(k, v); err != nil {
				b.Fatal(err)
			}
		}
		if err := buf.Finish(context.Background(), func(int) (io.WriteCloser, error) { return discardCloser{}, nil }); err != nil {
			b.Fatal(err)
		}
		stats = buf.Stats()
		buf.Close()
	}
	b.ReportMetric(float64(len(ks))*float64(b.N)/b.Elapsed().Seconds(), "records/s")
	b.ReportMetric(float64(stats.Spills), "spills")
}

// BenchmarkMapBuffer_CSVTask: a map task of the per-user sum's shape (issue 32's csv-sum: 250k
// rows over 100k users of 9-byte names, amounts below 1,000), combining, at a worker's task
// budget, out as 8 partition runs: few repeats a key, so sorting and writing the table are a
// good part of the task. The "url" case keys the same rows by 36-byte URLs that share their
// first 30 bytes, as paths, URLs and timestamps do.
func BenchmarkMapBuffer_CSVTask(b *testing.B) {
	for _, shape := range []struct{ name, format string }{{"user", "user%05d"}, {"url", "https://example.com/items/%05d"}} {
		b.Run(shape.name, func(b *testing.B) {
			const rows, users = 250_000, 100_000
			rng := rand.New(rand.NewPCG(3, 4))
			ks, vs := make([][]byte, rows), make([][]byte, rows)
			for i := range rows {
				ks[i] = fmt.Appendf(nil, shape.format, rng.IntN(users))
				vs[i], _ = jobs.EncodeValue(int64(rng.IntN(1000)))
			}
			combine := jobs.Keyed("randsum", randCombine{}).Combiner()
			cpu0 := cpuSeconds()
			for b.Loop() {
				buf, err := NewMapBuffer(MapConfig{Partitions: 8, MemoryBytes: benchTaskMemory, TempDir: b.TempDir()}, combine)
				if err != nil {
					b.Fatal(err)
				}
				for i, k := range ks {
					if err := buf.Add(k, vs[i]); err != nil {
						b.Fatal(err)
					}
				}
				if err := buf.Finish(context.Background(), func(int) (io.WriteCloser, error) { return discardCloser{}, nil }); err != nil {
					b.Fatal(err)
				}
				if s := buf.Stats(); s.Spills != 0 && shape.name == "user" {
					b.Fatalf("%d spills: the task should fit its budget", s.Spills)
				}
				buf.Close()
			}
			b.ReportMetric((cpuSeconds()-cpu0)/float64(b.N), "cpu-s/op")
		})
	}
}

// BenchmarkReduce_Merge24: a k-way merge of 24 runs (100k records each, keys overlapping),
// combining, into TSV output.
func BenchmarkReduce_Merge24(b *testing.B) {
	job := jobs.Keyed("randsum", randCombine{})
	var runs [][]byte
	var size, records int64
	for r := range 24 {
		var buf bytes.Buffer
		w, _ := NewRunWriter(&buf, 0, 0)
		v, _ := jobs.EncodeValue(int64(r))
		for i := range 100_000 {
			_ = w.Append(fmt.Appendf(nil, "w%08d", i*3+r%3), v)
		}
		_ = w.Close()
		runs = append(runs, buf.Bytes())
		size += int64(buf.Len())
		records += 100_000
	}
	b.SetBytes(size)
	b.ReportAllocs()
	for b.Loop() {
		var openers []Opener
		for _, data := range runs {
			openers = append(openers, func(context.Context) (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(data)), nil })
		}
		out, _ := NewOutputWriter(io.Discard, FormatTSV)
		if _, err := Reduce(context.Background(), job, openers, out, ReduceConfig{TempDir: b.TempDir()}); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(records)*float64(b.N)/b.Elapsed().Seconds(), "records/s")
}

// BenchmarkMapBuffer_Budget: one map task of the keyed bench's 5M-word corpus (a 7 MB blob:
// 700k words, nearly all distinct) with a task's share of a worker's budget. A bigger buffer
// spills less but hashes and sorts over more memory.
func BenchmarkMapBuffer_Budget(b *testing.B) {
	rng := rand.New(rand.NewPCG(3, 4))
	v, _ := jobs.EncodeValue(int64(1))
	var ks [][]byte
	var size int64
	for range 700_000 {
		k := fmt.Appendf(nil, "w%d", rng.IntN(5_000_000))
		ks = append(ks, k)
		size += int64(len(k) + len(v))
	}
	combine := jobs.Keyed("randsum", randCombine{}).Combiner()
	for _, mib := range []int64{4, 8, 16, 64} {
		b.Run(fmt.Sprintf("%dMiB", mib), func(b *testing.B) {
			b.SetBytes(size)
			var stats MapStats
			for b.Loop() {
				buf, err := NewMapBuffer(MapConfig{Partitions: 8, MemoryBytes: mib << 20, TempDir: b.TempDir()}, combine)
				if err != nil {
					b.Fatal(err)
				}
				for _, k := range ks {
					if err := buf.Add(k, v); err != nil {
						b.Fatal(err)
					}
				}
				if err := buf.Finish(context.Background(), func(int) (io.WriteCloser, error) { return discardCloser{}, nil }); err != nil {
					b.Fatal(err)
				}
				stats = buf.Stats()
				buf.Close()
			}
			b.ReportMetric(float64(stats.Spills), "spills")
			b.ReportMetric(float64(stats.PeakMemory)/(1<<20), "peak-MiB")
		})
	}
}

// wordShard is an 8 MiB text of words over a vocabulary of distinct ("w" and a base-36 number,
// as the keyed bench's corpus), spread evenly, 12 a line.
func wordShard(distinct int) []byte {
	rng := rand.New(rand.NewPCG(5, 6))
	var buf bytes.Buffer
	for n := 0; buf.Len() < 8<<20; n++ {
		buf.WriteByte('w')
		buf.Write(strconv.AppendInt(buf.AvailableBuffer(), int64(rng.IntN(distinct)), 36))
		if n%12 == 11 {
			buf.WriteByte('\n')
		} else {
			buf.WriteByte(' ')
		}
	}
	return buf.Bytes()
}

// BenchmarkMapTask_Wordcount: one map task of the built-in keyed wordcount over an 8 MiB shard
// (its default), through Map with a worker's default task budget, into 16 partition runs. The
// user's Map (scanning words) should be most of it.
func BenchmarkMapTask_Wordcount(b *testing.B) {
	for _, distinct := range []int{0, 50_000, 500_000, 5_000_000} {
		name := fmt.Sprintf("%dk-distinct", distinct/1000)
		if distinct == 0 {
			name = "map-only"
		}
		b.Run(name, func(b *testing.B) {
			env := jobstest.NewEnv()
			data := wordShard(max(distinct, 50_000))
			env.Put("texts", "in/0", data)
			params := `{"container":"texts","output":"blob","shard_bytes":16777216}`
			job := keyedWordcount(b)
			shards, err := job.Split(context.Background(), env, json.RawMessage(params))
			if err != nil || len(shards) != 1 {
				b.Fatal(len(shards), err)
			}
			b.SetBytes(int64(len(data)))
			if distinct == 0 {
				// The user's Map alone, emitting into nothing: the floor of a map task.
				cpu0 := cpuSeconds()
				for b.Loop() {
					if err := job.Map(context.Background(), env, jobs.Task{Shard: shards[0]}, func(k, v []byte) error { return nil }); err != nil {
						b.Fatal(err)
					}
				}
				b.ReportMetric((cpuSeconds()-cpu0)/float64(b.N), "cpu-s/op")
				return
			}
			var stats MapStats
			cpu0 := cpuSeconds()
			for b.Loop() {
				cfg := MapConfig{Partitions: 16, MemoryBytes: benchTaskMemory, TempDir: b.TempDir()}
				stats, err = Map(context.Background(), job, env, jobs.Task{Shard: shards[0]}, func(int) (io.WriteCloser, error) { return discardCloser{}, nil }, cfg)
				if err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(stats.Spills), "spills")
			b.ReportMetric((cpuSeconds()-cpu0)/float64(b.N), "cpu-s/op")
			b.ReportMetric(float64(stats.RunBytes)/float64(len(data)), "run/input")
			b.ReportMetric(float64(stats.PeakMemory)/(1<<20), "peak-MiB")
		})
	}
}

// BenchmarkMapTask_WordcountSixAtOnce: six map tasks of the 50k-distinct shard at once, as on
// the load test's cluster (3 workers of 2 slots on 2 cores): the tasks' tables share the
// caches. Run it with -cpu 2; an op is one task.
func BenchmarkMapTask_WordcountSixAtOnce(b *testing.B) {
	env := jobstest.NewEnv()
	data := wordShard(50_000)
	env.Put("texts", "in/0", data)
	job := keyedWordcount(b)
	shards, err := job.Split(context.Background(), env, json.RawMessage(`{"container":"texts","output":"blob","shard_bytes":16777216}`))
	if err != nil || len(shards) != 1 {
		b.Fatal(len(shards), err)
	}
	b.SetBytes(int64(len(data)))
	b.SetParallelism(max(1, 6/runtime.GOMAXPROCS(0)))
	dir := b.TempDir()
	cpu0 := cpuSeconds()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			cfg := MapConfig{Partitions: 16, MemoryBytes: benchTaskMemory, TempDir: dir}
			if _, err := Map(context.Background(), job, env, jobs.Task{Shard: shards[0]}, func(int) (io.WriteCloser, error) { return discardCloser{}, nil }, cfg); err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.ReportMetric((cpuSeconds()-cpu0)/float64(b.N), "cpu-s/op")
}

// cpuSeconds is the CPU time of this process so far (user and system): on a shared box the
// wall time of a benchmark says more about the neighbours than about the code.
func cpuSeconds() float64 {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return float64(ru.Utime.Nano()+ru.Stime.Nano()) / 1e9
}
