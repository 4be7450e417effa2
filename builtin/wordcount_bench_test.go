package builtin

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"runtime"
	"strconv"
	"syscall"
	"testing"

	"github.com/mapagg/mapagg/jobs"
	"github.com/mapagg/mapagg/jobs/jobstest"
)

// benchCorpus is the load test's wordcount corpus (cmd/loadtest uploadCorpus): size bytes of
// words of a vocab-word vocabulary, every word once and then a skewed draw.
func benchCorpus(vocab, size int) []byte {
	words := make([]string, vocab)
	for i := range words {
		words[i] = "w" + strconv.FormatInt(int64(i), 36)
	}
	rng := rand.New(rand.NewPCG(uint64(vocab), 7))
	var b bytes.Buffer
	var total int
	for b.Len() < size-16 {
		i := total
		if i >= vocab {
			i = int(float64(vocab) * rng.Float64() * rng.Float64())
		}
		b.WriteString(words[i])
		total++
		if total%12 == 0 {
			b.WriteByte('\n')
		} else {
			b.WriteByte(' ')
		}
	}
	return b.Bytes()
}

// BenchmarkWordcountCorpus measures, on the load test's corpora (16 MiB in 32 KiB shards, a
// 1k- and a 200k-word vocabulary), the map step of a shard (partial-B: its partial's size) and
// the merge of a partial into an aggregate built up from empty, as a job's leader does.
//
//	go test -run '^$' -bench WordcountCorpus ./builtin/
func BenchmarkWordcountCorpus(b *testing.B) {
	for _, vocab := range []int{1000, 200_000} {
		text := benchCorpus(vocab, 16<<20)
		env := jobstest.NewEnv()
		env.Put("corpus", "c", text)
		params := json.RawMessage(fmt.Sprintf(`{"container":"corpus","shard_bytes":%d}`, 32<<10))
		shards, err := wordcount{}.Split(context.Background(), env, params)
		if err != nil {
			b.Fatal(err)
		}
		var parts [][]byte
		size := 0
		for _, s := range shards {
			p, _ := wordcount{}.Map(context.Background(), env, jobs.Task{Shard: s})
			parts = append(parts, p)
			size += len(p)
		}
		b.Run(fmt.Sprintf("vocab=%d/map", vocab), func(b *testing.B) {
			i := 0
			for b.Loop() {
				if _, err := (wordcount{}).Map(context.Background(), env, jobs.Task{Shard: shards[i%len(shards)]}); err != nil {
					b.Fatal(err)
				}
				i++
			}
			b.ReportMetric(float64(size)/float64(len(parts)), "partial-B")
		})
		b.Run(fmt.Sprintf("vocab=%d/merge", vocab), func(b *testing.B) {
			var agg jobs.Aggregate
			i := 0
			for b.Loop() {
				if i%len(parts) == 0 {
					agg, _ = wordcount{}.NewAggregate(params)
				}
				if err := agg.Merge(parts[i%len(parts)]); err != nil {
					b.Fatal(err)
				}
				i++
			}
		})
	}
}

// BenchmarkWordcountMergeSteady measures merging into an aggregate that holds the whole
// vocabulary already (the look-ups of a job's later partials), and checking a partial alone, in
// CPU time of the merging thread per entry of the partials (less disturbed by other load than
// ns/op).
func BenchmarkWordcountMergeSteady(b *testing.B) {
	for _, vocab := range []int{1000, 200_000} {
		text := benchCorpus(vocab, 16<<20)
		env := jobstest.NewEnv()
		env.Put("corpus", "c", text)
		params := json.RawMessage(fmt.Sprintf(`{"container":"corpus","shard_bytes":%d}`, 32<<10))
		shards, _ := wordcount{}.Split(context.Background(), env, params)
		var parts [][]byte
		entries := 0
		for _, s := range shards {
			p, _ := wordcount{}.Map(context.Background(), env, jobs.Task{Shard: s})
			parts = append(parts, p)
			d, _ := decodeWordcountPartial(p)
			entries += int(d.n)
		}
		agg, _ := wordcount{}.NewAggregate(params)
		for _, p := range parts {
			_ = agg.Merge(p)
		}
		b.Run(fmt.Sprintf("vocab=%d", vocab), func(b *testing.B) {
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			i := 0
			cpu0 := threadCPU()
			for b.Loop() {
				if err := agg.Merge(parts[i%len(parts)]); err != nil {
					b.Fatal(err)
				}
				i++
			}
			b.ReportMetric(float64(threadCPU()-cpu0)/float64(b.N)/float64(entries/len(parts)), "cpu-ns/entry")
		})
		b.Run(fmt.Sprintf("vocab=%d/check", vocab), func(b *testing.B) {
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			i := 0
			cpu0 := threadCPU()
			for b.Loop() {
				if _, err := decodeWordcountPartial(parts[i%len(parts)]); err != nil {
					b.Fatal(err)
				}
				i++
			}
			b.ReportMetric(float64(threadCPU()-cpu0)/float64(b.N)/float64(entries/len(parts)), "cpu-ns/entry")
		})
	}
}

// threadCPU is the CPU time of the calling thread, in ns (lock the goroutine to its thread).
func threadCPU() int64 {
	var ru syscall.Rusage
	_ = syscall.Getrusage(1 /* RUSAGE_THREAD */, &ru)
	return ru.Utime.Nano() + ru.Stime.Nano()
}
