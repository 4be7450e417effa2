package jobstore

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mapagg/mapagg/internal/harness/testenv"
	"github.com/mapagg/mapagg/internal/protocol"
	"github.com/mapagg/mapagg/internal/queue"
	"github.com/mapagg/mapagg/store"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// lossy answers a share of writes with an error although they were done, as a server answers 5xx
// or a proxy times out after the storage account stored the write: the failure that makes a
// retry without a key run a job twice. Only the first attempt of each key meets it (the flag
// travels in the context), so every key succeeds within two attempts.
type lossy struct {
	Store
	q     Queue
	every int64
	n     atomic.Int64
}

type firstTry struct{}

func (l *lossy) lose(ctx context.Context) bool {
	return ctx.Value(firstTry{}) != nil && l.n.Add(1)%l.every == 0
}

func (l *lossy) Put(ctx context.Context, name string, data []byte, c store.Cond) (store.ETag, error) {
	etag, err := l.Store.Put(ctx, name, data, c)
	if err == nil && strings.HasSuffix(name, "/spec.json") && l.lose(ctx) {
		return "", errors.New("503 Service Unavailable (the write was stored)")
	}
	return etag, err
}

func (l *lossy) Enqueue(ctx context.Context, text string) error {
	err := l.q.Enqueue(ctx, text)
	if err == nil && l.lose(ctx) {
		return errors.New("504 Gateway Timeout (the message was queued)")
	}
	return err
}

func newJobs(t *testing.T) (*Jobs, *store.Container, *queue.Queue) {
	t.Helper()
	ctx := context.Background()
	conn := testenv.Azurite(t)
	client, err := store.NewClient(conn)
	if err != nil {
		t.Fatal(err)
	}
	c := store.New(client, testenv.Name(t, "jobs"))
	if err := c.Ensure(ctx); err != nil {
		t.Fatal(err)
	}
	q, err := queue.New(conn, testenv.Name(t, "intake"))
	if err != nil {
		t.Fatal(err)
	}
	if err := q.Ensure(ctx); err != nil {
		t.Fatal(err)
	}
	return &Jobs{Store: c, Queue: q}, c, q
}

func newSpec(now time.Time, params string) *protocol.Spec {
	return &protocol.Spec{ID: protocol.NewID(now), Type: "sleep", Params: json.RawMessage(params), SubmittedAt: now.UTC()}
}

// Concurrent submits with idempotency keys (100; JOBSTORE_BURST=500 for the figure), a
// share of the first attempts answered with an error after their write was done, each retried
// once on any error: one job a key, and every acknowledged id is that job's.
func TestJobs_SubmitOnceBurst(t *testing.T) {
	ctx := context.Background()
	j, c, q := newJobs(t)
	l := &lossy{Store: c, q: q, every: 3}
	j.Store, j.Queue = l, l
	keys := 100
	if n, err := strconv.Atoi(os.Getenv("JOBSTORE_BURST")); err == nil && n > 0 {
		keys = n
	}
	var (
		mu    sync.Mutex
		acked = map[string]string{} // key -> id
		wg    sync.WaitGroup
		fails atomic.Int64
	)
	for k := range keys {
		wg.Add(1)
		go func() {
			defer wg.Done()
			key := fmt.Sprintf("key-%d", k)
			params := fmt.Sprintf(`{"n":%d}`, k)
			id, _, err := j.SubmitOnce(context.WithValue(ctx, firstTry{}, true), newSpec(time.Now(), params), key, time.Now())
			if err != nil {
				fails.Add(1)
				id, _, err = j.SubmitOnce(ctx, newSpec(time.Now(), params), key, time.Now())
			}
			if err != nil {
				t.Errorf("%s: %v", key, err)
				return
			}
			mu.Lock()
			acked[key] = id
			mu.Unlock()
		}()
	}
	wg.Wait()
	t.Logf("%d first attempts answered with an error", fails.Load())
	if fails.Load() == 0 {
		t.Fatal("no attempt failed: the test proves nothing")
	}
	blobs, err := c.List(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	specs := map[string]bool{}
	for _, b := range blobs {
		if id, ok := strings.CutSuffix(b.Name, "/spec.json"); ok {
			specs[id] = true
		}
	}
	if len(specs) != keys {
		t.Errorf("%d jobs for %d keys", len(specs), keys)
	}
	ids := map[string]bool{}
	for key, id := range acked {
		if !specs[id] {
			t.Errorf("%s: acknowledged id %s has no job", key, id)
		}
		if ids[id] {
			t.Errorf("id %s acknowledged for two keys", id)
		}
		ids[id] = true
	}
}

// A repeat returns the first id and creates nothing; a repeat asking for another job is refused;
// an expired key names a new job; a bad key is refused before anything is written.
func TestJobs_SubmitOnceRules(t *testing.T) {
	ctx := context.Background()
	j, c, _ := newJobs(t)
	now := time.Now()
	id, created, err := j.SubmitOnce(ctx, newSpec(now, `{"a":1}`), "k1", now)
	if err != nil || !created {
		t.Fatalf("first submit: %s %v %v", id, created, err)
	}
	again, created, err := j.SubmitOnce(ctx, newSpec(now.Add(time.Second), `{ "a": 1 }`), "k1", now.Add(time.Hour))
	if err != nil || created || again != id {
		t.Fatalf("repeat: %s %v %v, want %s not created", again, created, err, id)
	}
	if _, _, err := j.SubmitOnce(ctx, newSpec(now, `{"a":2}`), "k1", now.Add(time.Hour)); !errors.Is(err, ErrKeyReused) {
		t.Fatalf("other params under the key: %v, want ErrKeyReused", err)
	}
	jsonl := newSpec(now, `{"a":1}`)
	jsonl.OutputFormat = "jsonl"
	if _, _, err := j.SubmitOnce(ctx, jsonl, "k1", now.Add(time.Hour)); !errors.Is(err, ErrKeyReused) {
		t.Fatalf("another output format under the key: %v, want ErrKeyReused", err)
	}
	later := now.Add(IdempotencyWindow + time.Minute)
	fresh, created, err := j.SubmitOnce(ctx, newSpec(later, `{"a":1}`), "k1", later)
	if err != nil || !created || fresh == id {
		t.Fatalf("after the window: %s %v %v, want a new job", fresh, created, err)
	}
	if old, err := j.ExpiredKeys(ctx, later.Add(IdempotencyWindow)); err != nil || len(old) != 1 {
		t.Fatalf("ExpiredKeys = %v, %v", old, err)
	}
	for _, bad := range []string{"", strings.Repeat("k", 256), "tab\tkey", "é"} {
		if _, _, err := j.SubmitOnce(ctx, newSpec(now, `{}`), bad, now); err == nil {
			t.Errorf("key %q accepted", bad)
		}
	}
	blobs, _ := c.List(ctx, IdempotencyPrefix)
	if len(blobs) != 1 {
		t.Fatalf("%d key records, want 1", len(blobs))
	}
}

// A spec without an output format hashes as an earlier build hashed it (its keys still match);
// each output format asks for another job.
func TestRequestHash_OutputFormat(t *testing.T) {
	spec := &protocol.Spec{Type: "sleep", Params: json.RawMessage(`{ "a": 1 }`), Priority: 2, Retries: 1}
	earlier := sha256.Sum256([]byte(`{"Type":"sleep","Params":{"a":1},"After":null,"Priority":2,"Retries":1}`))
	if got := requestHash(spec); got != hex.EncodeToString(earlier[:]) {
		t.Errorf("no output format: hash %s, want the earlier build's %x", got, earlier)
	}
	seen := map[string]string{requestHash(spec): `""`}
	for _, f := range []string{"tsv", "jsonl", "tsv.zst", "jsonl.zst"} {
		s := *spec
		s.OutputFormat = f
		h := requestHash(&s)
		if other, ok := seen[h]; ok {
			t.Errorf("output format %q hashes as %s", f, other)
		}
		seen[h] = f
	}
}
