package builtin

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strconv"
	"testing"
	"time"

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

func TestWordcountProfileJob(t *testing.T) {
	for _, vocab := range []int{1000, 200_000} {
		text := benchCorpus(vocab, 16<<20)
		env := jobstest.NewEnv()
		env.Put("corpus", "c", text)
		params := json.RawMessage(fmt.Sprintf(`{"container":"corpus","shard_bytes":%d}`, 32<<10))
		shards, err := Wordcount{}.Split(context.Background(), env, params)
		if err != nil {
			t.Fatal(err)
		}
		var parts [][]byte
		start := time.Now()
		var psize int
		for _, s := range shards {
			p, err := Wordcount{}.Map(context.Background(), env, jobs.Task{Shard: s})
			if err != nil {
				t.Fatal(err)
			}
			parts = append(parts, p)
			psize += len(p)
		}
		mapT := time.Since(start)
		agg, _ := Wordcount{}.NewAggregate(params)
		start = time.Now()
		for _, p := range parts {
			if err := agg.Merge(p); err != nil {
				t.Fatal(err)
			}
		}
		mergeT := time.Since(start)
		start = time.Now()
		enc := agg.(jobs.Snapshotter).Snapshot()
		loopT := time.Since(start)
		start = time.Now()
		data, _ := enc()
		encT := time.Since(start)
		start = time.Now()
		enc = agg.(jobs.Snapshotter).Snapshot()
		data, _ = enc()
		enc2T := time.Since(start)
		start = time.Now()
		js, _ := json.Marshal(struct{ A []byte }{data})
		jsT := time.Since(start)
		t.Logf("vocab %d: %d shards, map %v (%v/shard), partials avg %d B, merge %v (%v/partial), snapshot loop %v enc %v enc2 %v (%d B) json %v (%d B)",
			vocab, len(shards), mapT, mapT/time.Duration(len(shards)), psize/len(parts), mergeT, mergeT/time.Duration(len(parts)), loopT, encT, enc2T, len(data), jsT, len(js))
	}
}

func BenchmarkWordcountCorpus(b *testing.B) {
	for _, vocab := range []int{1000, 200_000} {
		text := benchCorpus(vocab, 16<<20)
		env := jobstest.NewEnv()
		env.Put("corpus", "c", text)
		params := json.RawMessage(fmt.Sprintf(`{"container":"corpus","shard_bytes":%d}`, 32<<10))
		shards, err := Wordcount{}.Split(context.Background(), env, params)
		if err != nil {
			b.Fatal(err)
		}
		var parts [][]byte
		for _, s := range shards {
			p, _ := Wordcount{}.Map(context.Background(), env, jobs.Task{Shard: s})
			parts = append(parts, p)
		}
		b.Run(fmt.Sprintf("vocab=%d/map", vocab), func(b *testing.B) {
			i := 0
			for b.Loop() {
				if _, err := (Wordcount{}).Map(context.Background(), env, jobs.Task{Shard: shards[i%len(shards)]}); err != nil {
					b.Fatal(err)
				}
				i++
			}
		})
		b.Run(fmt.Sprintf("vocab=%d/merge", vocab), func(b *testing.B) {
			var agg jobs.Aggregate
			i := 0
			for b.Loop() {
				if i%len(parts) == 0 {
					agg, _ = Wordcount{}.NewAggregate(params)
				}
				if err := agg.Merge(parts[i%len(parts)]); err != nil {
					b.Fatal(err)
				}
				i++
			}
		})
	}
}

func BenchmarkWordcountMergeSteady(b *testing.B) {
	for _, vocab := range []int{1000, 200_000} {
		text := benchCorpus(vocab, 16<<20)
		env := jobstest.NewEnv()
		env.Put("corpus", "c", text)
		params := json.RawMessage(fmt.Sprintf(`{"container":"corpus","shard_bytes":%d}`, 32<<10))
		shards, _ := Wordcount{}.Split(context.Background(), env, params)
		var parts [][]byte
		entries := 0
		for _, s := range shards {
			p, _ := Wordcount{}.Map(context.Background(), env, jobs.Task{Shard: s})
			parts = append(parts, p)
			d, _ := decodeWordcountPartial(p)
			entries += int(d.n)
		}
		agg, _ := Wordcount{}.NewAggregate(params)
		for _, p := range parts {
			_ = agg.Merge(p)
		}
		b.Run(fmt.Sprintf("vocab=%d", vocab), func(b *testing.B) {
			i := 0
			for b.Loop() {
				if err := agg.Merge(parts[i%len(parts)]); err != nil {
					b.Fatal(err)
				}
				i++
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(entries/len(parts)), "ns/entry")
		})
		b.Run(fmt.Sprintf("vocab=%d/check", vocab), func(b *testing.B) {
			i := 0
			for b.Loop() {
				if _, err := decodeWordcountPartial(parts[i%len(parts)]); err != nil {
					b.Fatal(err)
				}
				i++
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(entries/len(parts)), "ns/entry")
		})
	}
}
