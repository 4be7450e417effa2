package builtin

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mapagg/mapagg/jobs"
)

// vocabPartials returns n encoded partials of perPartial words each, drawn from a vocabulary of
// vocab words, and a partial holding every word once (to preload an aggregate with the whole
// vocabulary).
func vocabPartials(vocab, n, perPartial int) (partials [][]byte, all []byte) {
	word := func(i int) string { return fmt.Sprintf("w%07d", i) }
	t := newWordTable()
	for i := range vocab {
		t.add([]byte(word(i)), 1)
	}
	all = encodeWordcountPartial(uint64(vocab), t)
	rng := rand.New(rand.NewPCG(1, 2))
	for range n {
		t := newWordTable()
		for range perPartial {
			t.add([]byte(word(rng.IntN(vocab))), 1)
		}
		partials = append(partials, encodeWordcountPartial(uint64(perPartial), t))
	}
	return partials, all
}

// A snapshot encodes the aggregate as it was when taken, whatever is merged afterwards (while the
// encoder runs, as the coordinator runs it), and exactly as MarshalBinary did then.
func TestWordcountAggregate_Snapshot(t *testing.T) {
	partials, _ := vocabPartials(5000, 200, 50)
	_, all := vocabPartials(2500, 0, 0) // half the vocabulary: the partials add words between snapshots
	agg, err := wordcount{}.NewAggregate(json.RawMessage(`{"container":"corpus"}`))
	if err != nil {
		t.Fatal(err)
	}
	if err := agg.Merge(all); err != nil {
		t.Fatal(err)
	}
	sn, ok := agg.(jobs.Snapshotter)
	if !ok {
		t.Fatal("the wordcount aggregate is not a jobs.Snapshotter")
	}
	for round := range 4 {
		want, _ := agg.MarshalBinary()
		encode := sn.Snapshot()
		done := make(chan []byte)
		go func() { b, _ := encode(); done <- b }()
		for _, p := range partials[round*50 : (round+1)*50] { // merges go on meanwhile
			if err := agg.Merge(p); err != nil {
				t.Fatal(err)
			}
		}
		if got := <-done; !bytes.Equal(got, want) {
			t.Fatalf("round %d: the snapshot encodes %d bytes unlike MarshalBinary at the time (%d)", round, len(got), len(want))
		}
		after, _ := agg.MarshalBinary()
		if bytes.Equal(after, want) {
			t.Fatalf("round %d: merges after the snapshot changed nothing", round)
		}
	}
}

// BenchmarkWordcountMergeCheckpointing measures the merge loop's throughput (results/s) of a
// wordcount aggregate checkpointed every 200 ms, as the leader's loop does: "none" never
// checkpoints (the merge cost alone, which grows with the vocabulary: map look-ups); "inline" encodes
// the aggregate and the checkpoint's JSON in the loop (as before Snapshotter), "snapshot" copies
// the counts in the loop and encodes them in another goroutine (one encoding at a time; a tick that
// finds one running is skipped, as the coordinator skips a job with a write in flight).
// writer-µs/checkpoint is the encoding moved to the writer goroutine (snapshot mode: it reuses the
// last snapshot's sort, so it grows with the vocabulary but sorts only the new words).
// loop-µs/checkpoint is what a checkpoint costs the loop: the figure that matters, and the one
// least disturbed by other load (results/s is wall-clock).
//
//	go test -run '^$' -bench WordcountMergeCheckpointing -benchtime 3s ./builtin/
func BenchmarkWordcountMergeCheckpointing(b *testing.B) {
	for _, vocab := range []int{1_000, 200_000} {
		partials, all := vocabPartials(vocab, 512, 50)
		for _, mode := range []string{"none", "inline", "snapshot"} {
			b.Run(fmt.Sprintf("vocab=%d/%s", vocab, mode), func(b *testing.B) {
				agg, _ := wordcount{}.NewAggregate(json.RawMessage(`{"container":"corpus"}`))
				if err := agg.Merge(all); err != nil {
					b.Fatal(err)
				}
				sn := agg.(jobs.Snapshotter)
				var busy chan struct{}
				checkpoints := 0
				var inLoop time.Duration  // the loop's time spent checkpointing
				var encoding atomic.Int64 // the encoder goroutines' time, ns
				next := time.Now().Add(200 * time.Millisecond)
				b.ResetTimer()
				start := time.Now()
				for i := 0; i < b.N; i++ {
					if err := agg.Merge(partials[i%len(partials)]); err != nil {
						b.Fatal(err)
					}
					if i%64 != 0 || time.Now().Before(next) {
						continue
					}
					next = time.Now().Add(200 * time.Millisecond)
					began := time.Now()
					switch mode {
					case "none":
					case "inline":
						data, _ := agg.MarshalBinary()
						_, _ = json.Marshal(struct{ A []byte }{data})
						checkpoints++
					case "snapshot":
						if busy != nil {
							select {
							case <-busy:
							default:
								continue
							}
						}
						encode := sn.Snapshot()
						busy = make(chan struct{})
						go func(done chan struct{}) {
							began := time.Now()
							data, _ := encode()
							_, _ = json.Marshal(struct{ A []byte }{data})
							encoding.Add(int64(time.Since(began)))
							close(done)
						}(busy)
						checkpoints++
					}
					inLoop += time.Since(began)
				}
				elapsed := time.Since(start)
				if busy != nil {
					<-busy
				}
				b.ReportMetric(float64(b.N)/elapsed.Seconds(), "results/s")
				b.ReportMetric(float64(checkpoints), "checkpoints")
				if checkpoints > 0 {
					b.ReportMetric(float64(inLoop.Microseconds())/float64(checkpoints), "loop-µs/checkpoint")
					if mode == "snapshot" {
						b.ReportMetric(float64(encoding.Load())/1e3/float64(checkpoints), "writer-µs/checkpoint")
					}
				}
			})
		}
	}
}
