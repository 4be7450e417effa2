// Package keyed5m is issue 19's "done when" test of keyed jobs: wordcount with "output":"blob"
// over 5,000,000 distinct words (about 170 MB in 24 blobs) on 3 worker processes (built without
// the race detector: peak RSS is measured), the leader SIGKILLed in the map phase and the leader
// and a follower SIGKILLed in the reduce phase. The output must equal an independent count,
// every worker's peak RSS stay under 300 MiB, and nothing but the output and the job's metadata
// be left in storage. It takes minutes: `make test-keyed5m` (MAPAGG_KEYED5M=1).
package keyed5m

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/mapagg/mapagg/internal/harness/cluster"
	"github.com/mapagg/mapagg/internal/harness/testenv"
	"github.com/mapagg/mapagg/internal/protocol"
	"github.com/mapagg/mapagg/jobs"
	"github.com/mapagg/mapagg/store"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// Sizes: overridable for a quicker run (MAPAGG_KEYED5M_WORDS).
const (
	distinctWords = 5_000_000
	tokens        = 17_000_000 // about 170 MB of text
	blobs         = 24
	rssLimit      = 300 << 20
)

// word i is "w" and a bijective 32-bit mix of i in hex: distinct, in no particular order.
func appendWord(b []byte, i uint32) []byte {
	return strconv.AppendUint(append(b, 'w'), uint64(i*2654435761), 16)
}

// wordID inverts appendWord (2654435761 · 244002641 ≡ 1 mod 2³²).
func wordID(w string) (uint32, bool) {
	if !strings.HasPrefix(w, "w") {
		return 0, false
	}
	x, err := strconv.ParseUint(w[1:], 16, 32)
	if err != nil {
		return 0, false
	}
	return uint32(x) * 244002641, true
}

// corpus writes the blobs and returns every word's count.
func corpus(t *testing.T, ctx context.Context, c *store.Container, words, total int) []uint32 {
	t.Helper()
	counts := make([]uint32, words)
	rng := rand.New(rand.NewPCG(1, 2))
	per := total / blobs
	var buf []byte
	for b := range blobs {
		buf = buf[:0]
		for k := range per {
			tok := b*per + k
			id := uint32(rng.IntN(words))
			if tok < words { // every word at least once
				id = uint32(tok)
			}
			counts[id]++
			buf = appendWord(buf, id)
			if k%12 == 11 {
				buf = append(buf, '\n')
			} else {
				buf = append(buf, ' ')
			}
		}
		if _, err := c.Put(ctx, fmt.Sprintf("in/%02d.txt", b), buf, store.Cond{}); err != nil {
			t.Fatal(err)
		}
	}
	if blobs*per < words {
		t.Fatalf("%d tokens cannot hold %d distinct words", blobs*per, words)
	}
	return counts
}

// rssWatch samples every worker process's peak RSS (VmHWM) until stopped.
type rssWatch struct {
	mu   sync.Mutex
	peak map[string]int64 // "w1 pid 123" → bytes
}

func vmHWM(pid int) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "VmHWM:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return kb << 10
		}
	}
	return 0
}

func (w *rssWatch) sample(c *cluster.Cluster) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, id := range c.Running() {
		p := c.Proc(id)
		if p == nil {
			continue
		}
		k := fmt.Sprintf("%s (pid %d)", id, p.PID)
		w.peak[k] = max(w.peak[k], vmHWM(p.PID))
	}
}

func TestKeyed5M_WordcountBlobOutput(t *testing.T) {
	if os.Getenv("MAPAGG_KEYED5M") == "" {
		t.Skip("set MAPAGG_KEYED5M=1 (make test-keyed5m): minutes and 170 MB of storage")
	}
	words, total := distinctWords, tokens
	if v := os.Getenv("MAPAGG_KEYED5M_WORDS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1000 {
			t.Fatalf("MAPAGG_KEYED5M_WORDS=%q: a number of words, at least 1000", v)
		}
		words, total = n, n*tokens/distinctWords
	}
	dir := t.TempDir()
	bin, err := cluster.Build(dir, false)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	opts := cluster.Options{Dir: dir, WorkerBin: bin, ConnStr: testenv.Azurite(t), Namespace: testenv.Name(t, "k5m"),
		// The product's shard timeout, as chaos uses: the harness default (30s) is how long the
		// killed leader's map tasks would wait, since backups wait for the reduce tasks' dispatch.
		Workers: 3, Concurrency: 2, LeaseDuration: 15 * time.Second, ShardTimeout: 5 * time.Second, Env: append([]string{"PARTITIONS=12"}, strings.Fields(os.Getenv("MAPAGG_KEYED5M_ENV"))...)}
	sctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	c, err := cluster.Start(sctx, opts)
	cancel()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		c.Stop()
		if t.Failed() || os.Getenv("MAPAGG_KEYED5M_LOGS") != "" {
			logs, _ := filepath.Glob(filepath.Join(dir, "*.log"))
			for _, l := range logs {
				b, _ := os.ReadFile(l)
				t.Logf("--- %s, last lines:\n%s", filepath.Base(l), b[max(0, len(b)-6000):])
			}
		}
	})
	data := store.New(c.Blob(), testenv.Name(t, "corpus"))
	if err := data.Ensure(ctx); err != nil {
		t.Fatal(err)
	}
	began := time.Now()
	counts := corpus(t, ctx, data, words, total)
	t.Logf("corpus: %d distinct words, %d tokens in %d blobs, written in %v", words, total, blobs, time.Since(began).Round(time.Second))

	rss := &rssWatch{peak: map[string]int64{}}
	stopWatch := make(chan struct{})
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		for {
			rss.sample(c)
			select {
			case <-stopWatch:
				return
			case <-time.After(200 * time.Millisecond):
			}
		}
	}()

	start := time.Now()
	id, err := c.Client.Submit(ctx, "wordcount", json.RawMessage(fmt.Sprintf(`{"container":%q,"prefix":"in/","output":"blob"}`, data.Name())))
	if err != nil {
		t.Fatal(err)
	}
	jobsC := store.New(c.Blob(), c.JobsContainer())
	record := func() *protocol.StatusRecord {
		p, err := jobsC.Props(ctx, protocol.CheckpointBlob(id))
		if err != nil {
			return nil
		}
		r, _ := protocol.DecodeStatusRecord(p.Meta)
		return r
	}
	waitPhase := func(phase string, done int) *protocol.StatusRecord {
		var r *protocol.StatusRecord
		testenv.Eventually(t, 10*time.Minute, 50*time.Millisecond, func() bool {
			r = record()
			return r != nil && (r.Phase == phase && r.PhaseDone >= done || r.State.Terminal())
		}, "job %s did not reach phase %s with %d done", id, phase, done)
		if r.State.Terminal() {
			t.Fatalf("job %s ended (%s %s) before phase %s had %d done", id, r.State, r.Error, phase, done)
		}
		return r
	}
	kill := func(who string, ids ...string) {
		rss.sample(c)
		for _, w := range ids {
			if _, err := c.Signal(w, syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
		}
		for _, w := range ids {
			if _, err := c.StartWorker(w); err != nil {
				t.Fatal(err)
			}
		}
		t.Logf("%.1f s: SIGKILLed %s (%s) and restarted", time.Since(start).Seconds(), strings.Join(ids, ", "), who)
	}
	leaderID := func() string {
		var l string
		testenv.Eventually(t, time.Minute, 50*time.Millisecond, func() bool {
			li, err := c.Leader(ctx)
			if err == nil && li != nil && li.Epoch > 0 {
				l = li.ID
			}
			return l != ""
		}, "no leader")
		return l
	}

	r := waitPhase(protocol.PhaseMap, 1)
	kill(fmt.Sprintf("leader, map phase %d/%d", r.PhaseDone, r.PhaseTotal), leaderID())
	r = waitPhase(protocol.PhaseReduce, 0)
	t.Logf("%.1f s: reduce phase", time.Since(start).Seconds())
	r = waitPhase(protocol.PhaseReduce, 1)
	l := leaderID()
	follower := "w1"
	for _, w := range []string{"w1", "w2", "w3"} {
		if w != l {
			follower = w
			break
		}
	}
	kill(fmt.Sprintf("leader and a follower, reduce phase %d/%d", r.PhaseDone, r.PhaseTotal), l, follower)

	wctx, cancel := context.WithTimeout(ctx, 15*time.Minute)
	st, err := c.Client.Wait(wctx, id, 250*time.Millisecond, nil)
	cancel()
	close(stopWatch)
	<-watched
	if err != nil {
		t.Fatal(err)
	}
	if st.State != jobs.StateSucceeded {
		t.Fatalf("job %s: %s %s", id, st.State, st.Error)
	}
	t.Logf("job %s succeeded in %.1f s (submit to end), %d duplicates dropped", id, st.FinishedAt.Sub(start).Seconds(), st.Duplicates)

	// The output equals the independent count.
	res, _, err := jobsC.Get(ctx, protocol.ResultBlob(id))
	if err != nil {
		t.Fatal(err)
	}
	m, err := protocol.DecodeOutputManifest(id, res)
	if err != nil {
		t.Fatal(err)
	}
	seen := make([]bool, words)
	var n int64
	for _, p := range m.Partitions {
		rc, err := jobsC.Streams().Get(ctx, p.Blob)
		if err != nil {
			t.Fatal(err)
		}
		var prev []byte
		err = m.ReadRecords(rc, func(key, value []byte) error {
			var rec struct {
				Key   string
				Value uint32
			}
			if err := json.Unmarshal(key, &rec.Key); err != nil {
				return fmt.Errorf("key %q: %v", key, err)
			}
			if err := json.Unmarshal(value, &rec.Value); err != nil {
				return fmt.Errorf("value %q: %v", value, err)
			}
			wid, ok := wordID(rec.Key)
			if !ok || int(wid) >= words || seen[wid] || counts[wid] != rec.Value {
				return fmt.Errorf("%q %d: not a word of the corpus, seen twice, or its count is not %d", rec.Key, rec.Value, counts[min(int(wid), words-1)])
			}
			if prev != nil && bytes.Compare([]byte(rec.Key), prev) <= 0 {
				return fmt.Errorf("key %q after %q", rec.Key, prev)
			}
			prev = append(prev[:0], rec.Key...)
			seen[wid] = true
			n++
			return nil
		})
		rc.Close()
		if err != nil {
			t.Fatalf("%s: %v", p.Blob, err)
		}
	}
	if n != int64(words) || m.Records != n {
		t.Fatalf("%d records output (manifest: %d), want %d", n, m.Records, words)
	}
	t.Logf("output: %d records, %.1f MB in %d partitions, equal to the independent count", n, float64(m.Bytes)/1e6, len(m.Partitions))

	// Nothing but the output and the job's metadata.
	keep := map[string]bool{protocol.SpecBlob(id): true, protocol.CheckpointBlob(id): true, protocol.ResultBlob(id): true}
	for _, p := range m.Partitions {
		keep[p.Blob] = true
	}
	testenv.Eventually(t, 30*time.Second, 200*time.Millisecond, func() bool {
		left, err := jobsC.List(ctx, id+"/")
		if err != nil {
			return false
		}
		for _, b := range left {
			if !keep[b.Name] {
				return false
			}
		}
		return true
	}, "intermediates of %s left in storage", id)

	for _, ev := range c.Events() {
		if ev.Kind == cluster.Elected || ev.Kind == cluster.TermStarted || ev.Kind == cluster.JobFinished {
			t.Logf("%.1f s: %s %s epoch %d %s", ev.Time.Sub(start).Seconds(), ev.Worker, ev.Kind, ev.Epoch, ev.Err)
		}
	}
	var worst int64
	for k, v := range rss.peak {
		t.Logf("peak RSS %s: %.1f MiB", k, float64(v)/(1<<20))
		worst = max(worst, v)
	}
	if worst >= rssLimit {
		t.Errorf("a worker's peak RSS was %.1f MiB, the limit is %d MiB", float64(worst)/(1<<20), rssLimit>>20)
	}
}
