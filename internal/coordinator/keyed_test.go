package coordinator

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"iter"
	"maps"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mapagg/mapagg/builtin"
	"github.com/mapagg/mapagg/client"
	"github.com/mapagg/mapagg/internal/harness/testenv"
	"github.com/mapagg/mapagg/internal/protocol"
	"github.com/mapagg/mapagg/internal/worker"
	"github.com/mapagg/mapagg/jobs"
	"github.com/mapagg/mapagg/store"
)

// keyedCorpus stores a few blobs of text with many distinct words and returns its container and
// the words' counts, counted independently (strings.Fields).
func (r *rig) keyedCorpus(blobs, lines int) (string, map[string]int64) {
	r.t.Helper()
	ctx := context.Background()
	data := store.New(r.blob, testenv.Name(r.t, "corpus"))
	if err := data.Ensure(ctx); err != nil {
		r.t.Fatal(err)
	}
	want := map[string]int64{}
	for b := range blobs {
		var sb strings.Builder
		for l := range lines {
			fmt.Fprintf(&sb, "w%d ünï%d common  x%d\tw%d\n", (b*lines+l)%997, l%13, b*lines+l, l%5)
		}
		for _, w := range strings.Fields(sb.String()) {
			want[w]++
		}
		if _, err := data.Put(ctx, fmt.Sprintf("in/%02d.txt", b), []byte(sb.String()), store.Cond{}); err != nil {
			r.t.Fatal(err)
		}
	}
	return data.Name(), want
}

// keyedOutput reads a keyed job's result (its OutputManifest) and every output record, checking
// that keys are sorted within each partition.
func (r *rig) keyedOutput(id string) (*protocol.OutputManifest, map[string]int64) {
	r.t.Helper()
	ctx := context.Background()
	data, err := r.cl.Result(ctx, id)
	if err != nil {
		r.t.Fatal(err)
	}
	m, err := protocol.DecodeOutputManifest(id, data)
	if err != nil {
		r.t.Fatalf("result of %s: %v (%s)", id, err, data)
	}
	got := map[string]int64{}
	for _, p := range m.Partitions {
		rc, err := r.st.Streams().Get(ctx, p.Blob)
		if err != nil {
			r.t.Fatal(err)
		}
		prev, n := "", int64(0)
		err = m.ReadRecords(rc, func(key, value []byte) error {
			var rec struct {
				Key   string
				Value int64
			}
			if err := json.Unmarshal(key, &rec.Key); err != nil {
				return fmt.Errorf("key %q: %v", key, err)
			}
			if err := json.Unmarshal(value, &rec.Value); err != nil {
				return fmt.Errorf("value %q: %v", value, err)
			}
			if n > 0 && rec.Key <= prev {
				return fmt.Errorf("key %q after %q", rec.Key, prev)
			}
			if jobs.PartitionOf([]byte(rec.Key), len(m.Partitions)) != p.Partition {
				return fmt.Errorf("key %q is not of partition %d", rec.Key, p.Partition)
			}
			if _, dup := got[rec.Key]; dup {
				return fmt.Errorf("key %q output twice", rec.Key)
			}
			got[rec.Key] = rec.Value
			prev = rec.Key
			n++
			return nil
		})
		if err != nil {
			r.t.Fatalf("%s (%s): %v", p.Blob, m.Format, err)
		}
		rc.Close()
		if n != p.Records {
			r.t.Fatalf("%s: %d records, the manifest says %d", p.Blob, n, p.Records)
		}
	}
	return m, got
}

// noLeftovers waits until a keyed job's intermediates are deleted.
func (r *rig) noLeftovers(id string, m *protocol.OutputManifest) {
	r.t.Helper()
	var left []string
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if left = r.keyedLeftovers(id, m); len(left) == 0 {
			return
		}
	}
	r.t.Fatalf("left in storage: %v", left)
}

func sameCounts(t *testing.T, got, want map[string]int64) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%d keys output, want %d", len(got), len(want))
	}
	for k, v := range want {
		if got[k] != v {
			t.Fatalf("key %q: %d, want %d", k, got[k], v)
		}
	}
}

// keyedLeftovers lists what a keyed job left under its prefix besides its metadata and outputs.
func (r *rig) keyedLeftovers(id string, m *protocol.OutputManifest) []string {
	r.t.Helper()
	keep := map[string]bool{protocol.SpecBlob(id): true, protocol.CheckpointBlob(id): true, protocol.ResultBlob(id): true}
	for _, p := range m.Partitions {
		keep[p.Blob] = true
	}
	blobs, err := r.st.List(context.Background(), id+"/")
	if err != nil {
		r.t.Fatal(err)
	}
	var extra []string
	for _, b := range blobs {
		if !keep[b.Name] {
			extra = append(extra, b.Name)
		}
	}
	return extra
}

// wordcount with "output":"blob" on a leader and two workers, with small shards and a small
// memory budget (both sides spill): every word's count, equal to an independent count, sorted in
// each partition; nothing left but the outputs and the job's metadata.
func TestKeyed_WordcountBlobOutput(t *testing.T) {
	r := newRig(t)
	container, want := r.keyedCorpus(4, 3000)
	r.lead(1)
	for i := range 2 {
		r.work(worker.Config{ID: fmt.Sprintf("w%d", i), Concurrency: 2, MemoryBudget: 2 << 20, TempDir: t.TempDir()})
	}
	id := r.submit("wordcount", fmt.Sprintf(`{"container":%q,"prefix":"in/","output":"blob","partitions":3,"shard_bytes":20000}`, container))
	st := r.wait(id, 60*time.Second)
	if st.State != jobs.StateSucceeded {
		t.Fatalf("job %s: %s %s", id, st.State, st.Error)
	}
	m, got := r.keyedOutput(id)
	sameCounts(t, got, want)
	if m.Records != int64(len(want)) || len(m.Partitions) != 3 || m.Container != r.st.Name() {
		t.Fatalf("manifest: %d records in %d partitions of %q", m.Records, len(m.Partitions), m.Container)
	}
	r.noLeftovers(id, m)
	rec := r.record(id)
	if rec.Phase != protocol.PhaseReduce || rec.PhaseDone != 3 || rec.PhaseTotal != 3 {
		t.Errorf("status record: phase %q %d/%d", rec.Phase, rec.PhaseDone, rec.PhaseTotal)
	}
}

// The leader stops during the map phase and again during the reduce phase: each new leader
// resumes the phase from the checkpoint (the manifest is rewritten from the committed map
// attempts), the output is exact and the dead attempts' blobs are deleted.
func TestKeyed_LeaderReplacedInBothPhases(t *testing.T) {
	r := newRig(t)
	container, want := r.keyedCorpus(3, 2000)
	l := r.lead(1)
	for i := range 2 {
		r.work(worker.Config{ID: fmt.Sprintf("w%d", i), Concurrency: 2, MapDelay: 150 * time.Millisecond, TempDir: t.TempDir()})
	}
	id := r.submit("wordcount", fmt.Sprintf(`{"container":%q,"prefix":"in/","output":"blob","partitions":40,"shard_bytes":8000}`, container)) // reduce tasks of 3 partitions
	phase := func(want string, done int) func() bool {
		return func() bool {
			rec, err := readRecord(r, id)
			return err == nil && rec.Phase == want && rec.PhaseDone >= done
		}
	}
	eventually(t, 30*time.Second, "map phase under way", phase(protocol.PhaseMap, 1))
	if err := l.stop(); err != nil {
		t.Fatal(err)
	}
	l = r.lead(2)
	eventually(t, 60*time.Second, "reduce phase under way", phase(protocol.PhaseReduce, 1))
	if err := l.stop(); err != nil {
		t.Fatal(err)
	}
	r.lead(3)
	st := r.wait(id, 60*time.Second)
	if st.State != jobs.StateSucceeded {
		t.Fatalf("job %s: %s %s", id, st.State, st.Error)
	}
	m, got := r.keyedOutput(id)
	sameCounts(t, got, want)
	r.noLeftovers(id, m)
}

func readRecord(r *rig, id string) (*protocol.StatusRecord, error) {
	p, err := r.st.Props(context.Background(), protocol.CheckpointBlob(id))
	if err != nil {
		return nil, err
	}
	return protocol.DecodeStatusRecord(p.Meta)
}

// panicky is a keyed job whose Reduce panics on one key.
type panicky struct{}

type panickyParams struct{ N int }

func (panicky) Split(_ context.Context, _ jobs.Env, p panickyParams) ([]int, error) {
	return []int{0, 1, 2}, nil
}

func (panicky) Map(_ context.Context, _ jobs.Env, s int, emit jobs.Emitter[int, int]) error {
	for i := range 50 {
		emit(i, s)
	}
	return nil
}

func (panicky) Reduce(_ context.Context, k int, values iter.Seq[int], emit func(int)) error {
	if k == 17 {
		panic("reduce of 17")
	}
	n := 0
	for v := range values {
		n += v
	}
	emit(n)
	return nil
}

// A panic in a keyed job's Reduce fails the job (after the worker's retries), naming the panic;
// the worker and the leader go on, and the job's intermediates are deleted.
func TestKeyed_ReducePanicFailsTheJobOnly(t *testing.T) {
	r := newRig(t)
	reg := builtin.Registry()
	if err := reg.RegisterKeyed(jobs.Keyed("panicky", panicky{})); err != nil {
		t.Fatal(err)
	}
	r.cl.Registry = reg
	r.leadWith(1, func(c *Config) { c.Registry = reg; c.Partitions = 2 })
	r.work(worker.Config{Registry: reg, Concurrency: 2, RetryBackoff: time.Millisecond, TempDir: t.TempDir()})
	id := r.submit("panicky", `{}`)
	st := r.wait(id, 60*time.Second)
	if st.State != jobs.StateFailed || !strings.Contains(st.Error, "reduce of 17") {
		t.Fatalf("job %s: %s %q", id, st.State, st.Error)
	}
	r.noLeftovers(id, &protocol.OutputManifest{})
	// The same cluster runs the next job.
	id2 := r.submit("wordcount", fmt.Sprintf(`{"container":%q,"output":"blob"}`, r.wordcountInput()))
	if st := r.wait(id2, 60*time.Second); st.State != jobs.StateSucceeded {
		t.Fatalf("next job: %s %s", st.State, st.Error)
	}
	_, got := r.keyedOutput(id2)
	keys := make([]string, 0, len(got))
	for k := range got {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	if len(keys) == 0 || got["alpha"] == 0 {
		t.Fatalf("next job's output: %v", keys)
	}
}

// lossyStore's first listing of map runs leaves out every run of the lowest shard it lists: what
// a storage rollback does to a run whose commit survived (Azurite cannot lose one on demand).
type lossyStore struct {
	Store
	lost  atomic.Int32
	shard atomic.Int32 // the shard left out
}

func (s *lossyStore) List(ctx context.Context, prefix string) ([]jobs.BlobInfo, error) {
	blobs, err := s.Store.List(ctx, prefix)
	if err != nil || !strings.HasSuffix(prefix, "/map/") || len(blobs) == 0 || !s.lost.CompareAndSwap(0, 1) {
		return blobs, err
	}
	job := strings.TrimSuffix(prefix, "/map/")
	low := -1
	for _, b := range blobs {
		if sh, _, err := protocol.ParseMapRunBlob(job, b.Name); err == nil && (low < 0 || sh < low) {
			low = sh
		}
	}
	s.shard.Store(int32(low))
	return slices.DeleteFunc(blobs, func(b jobs.BlobInfo) bool {
		sh, _, err := protocol.ParseMapRunBlob(job, b.Name)
		return err == nil && sh == low
	}), nil
}

// A committed map run found gone before the manifest is written is taken back and its task run
// again: the output is exact.
func TestKeyed_LostMapRunRunAgain(t *testing.T) {
	r := newRig(t)
	container, want := r.keyedCorpus(3, 1500)
	ls := &lossyStore{Store: r.st}
	var mu sync.Mutex
	var events []Event
	r.leadOn(1, ls, func(c *Config) {
		c.OnEvent = func(ev Event) {
			mu.Lock()
			events = append(events, ev)
			mu.Unlock()
		}
	})
	r.work(worker.Config{Concurrency: 2, TempDir: t.TempDir()})
	id := r.submit("wordcount", fmt.Sprintf(`{"container":%q,"prefix":"in/","output":"blob","partitions":2,"shard_bytes":20000}`, container))
	if st := r.wait(id, 60*time.Second); st.State != jobs.StateSucceeded {
		t.Fatalf("job %s: %s %s", id, st.State, st.Error)
	}
	if ls.lost.Load() != 1 {
		t.Fatal("no map run was reported lost")
	}
	mu.Lock()
	again := repairedFrom(events, id, int(ls.shard.Load()))
	mu.Unlock()
	if !again {
		t.Errorf("map task %d, its run left out of the listing, was not run again", ls.shard.Load())
	}
	m, got := r.keyedOutput(id)
	sameCounts(t, got, want)
	r.noLeftovers(id, m)
}

// rollbackJob runs wordcount "output":"blob" on slow workers (each task starts 300ms after it is
// pulled) and calls lose with the job's id while it runs; the output must be exact and nothing
// left behind. It returns the events of the term.
func rollbackJob(t *testing.T, lose func(r *rig, id string)) []Event {
	r := newRig(t)
	container, want := r.keyedCorpus(3, 1500)
	var mu sync.Mutex
	var events []Event
	r.leadObserved(1, func(ev Event) {
		mu.Lock()
		events = append(events, ev)
		mu.Unlock()
	})
	r.work(worker.Config{Concurrency: 2, MapDelay: 300 * time.Millisecond, TempDir: t.TempDir()})
	// 34 partitions: 12 reduce tasks of 3 partitions, the last of 1 (jobs.PartitionsPerReduceTask).
	id := r.submit("wordcount", fmt.Sprintf(`{"container":%q,"prefix":"in/","output":"blob","partitions":34,"shard_bytes":30000}`, container))
	lose(r, id)
	if st := r.wait(id, 60*time.Second); st.State != jobs.StateSucceeded {
		t.Fatalf("job %s: %s %s", id, st.State, st.Error)
	}
	m, got := r.keyedOutput(id)
	sameCounts(t, got, want)
	r.noLeftovers(id, m)
	mu.Lock()
	defer mu.Unlock()
	return slices.Clone(events)
}

// firstBlob waits for the first blob under prefix and returns its name.
func (r *rig) firstBlob(prefix string) string {
	r.t.Helper()
	var name string
	testenv.Eventually(r.t, 30*time.Second, 5*time.Millisecond, func() bool {
		blobs, err := r.st.List(context.Background(), prefix)
		if err == nil && len(blobs) > 0 {
			name = blobs[0].Name
		}
		return name != ""
	}, "no blob under "+prefix)
	return name
}

// repairedFrom reports whether events has a repair of job id that starts at task i.
func repairedFrom(events []Event, id string, i int) bool {
	for _, ev := range events {
		if ev.Kind == EventRepaired && ev.Job == id && ev.Shard == i {
			return true
		}
	}
	return false
}

// A storage rollback after the map manifest (Azurite's kill -9 loses its last seconds of
// writes): a committed map run, or the manifest itself, is gone when the reduce tasks read it.
// They report it; the leader runs the lost map task again, rewrites the manifest, and runs the
// reduce tasks again: the output is exact.
func TestKeyed_InputLostAfterTheManifestRunAgain(t *testing.T) {
	t.Run("map run", func(t *testing.T) {
		var lost int
		var jobID string
		events := rollbackJob(t, func(r *rig, id string) {
			jobID = id
			r.firstBlob(protocol.MapManifestBlob(id))
			data, _, err := r.st.Get(context.Background(), protocol.MapManifestBlob(id))
			if err != nil {
				t.Fatal(err)
			}
			var m protocol.MapManifest
			if err := json.Unmarshal(data, &m); err != nil {
				t.Fatal(err)
			}
			lost, _, _ = protocol.ParseMapRunBlob(id, m.Maps[len(m.Maps)-1].Blob)
			if err := r.st.Delete(context.Background(), m.Maps[len(m.Maps)-1].Blob); err != nil {
				t.Fatal(err)
			}
		})
		if !repairedFrom(events, jobID, lost) {
			t.Errorf("map task %d was not run again: %+v", lost, events)
		}
	})
	t.Run("map manifest", func(t *testing.T) {
		rollbackJob(t, func(r *rig, id string) {
			r.firstBlob(protocol.MapManifestBlob(id))
			if err := r.st.Delete(context.Background(), protocol.MapManifestBlob(id)); err != nil {
				t.Fatal(err)
			}
		})
	})
}

// A committed output lost by a storage rollback before the output manifest is written is found
// (every output is checked with its size first) and its reduce task runs again.
func TestKeyed_OutputLostAfterItsCommitRunAgain(t *testing.T) {
	var p int
	var jobID string
	events := rollbackJob(t, func(r *rig, id string) {
		jobID = id
		blob := r.firstBlob(protocol.OutputPrefix(id))
		p, _, _ = protocol.ParseOutputBlob(id, blob)
		if err := r.st.Delete(context.Background(), blob); err != nil {
			t.Fatal(err)
		}
	})
	if !slices.ContainsFunc(events, func(ev Event) bool { return ev.Kind == EventRepaired && ev.Job == jobID && ev.Count == 1 }) {
		t.Errorf("the reduce task of partition %d was not run again: %+v", p, events)
	}
}

// firstRecordStore keeps the status record of the first checkpoint stored.
type firstRecordStore struct {
	Store
	mu    sync.Mutex
	first map[string]string
}

func (s *firstRecordStore) PutMeta(ctx context.Context, name string, data []byte, meta map[string]string, cond store.Cond) (store.ETag, error) {
	if strings.HasSuffix(name, "/checkpoint") && cond.IfNoneMatch {
		s.mu.Lock()
		if s.first == nil {
			s.first = maps.Clone(meta)
		}
		s.mu.Unlock()
	}
	return s.Store.PutMeta(ctx, name, data, meta, cond)
}

// A keyed job's first status record (written at intake) already shows the map phase.
func TestKeyed_FirstStatusRecordHasThePhase(t *testing.T) {
	r := newRig(t)
	fs := &firstRecordStore{Store: r.st}
	r.leadOn(1, fs, func(*Config) {})
	id := r.submit("wordcount", fmt.Sprintf(`{"container":%q,"output":"blob","partitions":2}`, r.wordcountInput()))
	var meta map[string]string
	testenv.Eventually(t, 20*time.Second, 10*time.Millisecond, func() bool {
		fs.mu.Lock()
		defer fs.mu.Unlock()
		meta = fs.first
		return meta != nil
	}, "no first checkpoint of %s", id)
	rec, err := protocol.DecodeStatusRecord(meta)
	if err != nil {
		t.Fatal(err)
	}
	if rec.Phase != protocol.PhaseMap || rec.PhaseDone != 0 || rec.PhaseTotal < 1 || rec.PhaseTotal != rec.Total-2 {
		t.Fatalf("first status record: phase %q %d/%d of %d tasks", rec.Phase, rec.PhaseDone, rec.PhaseTotal, rec.Total)
	}
}

// slowManifestStore holds the leader's write of the map manifest until release is closed.
type slowManifestStore struct {
	Store
	writing chan struct{} // closed when the write starts
	release chan struct{}
	stored  chan struct{} // closed when it is stored
	once    sync.Once
}

func (s *slowManifestStore) Put(ctx context.Context, name string, data []byte, cond store.Cond) (store.ETag, error) {
	if !strings.HasSuffix(name, "/map-manifest") {
		return s.Store.Put(ctx, name, data, cond)
	}
	first := false
	s.once.Do(func() { first = true; close(s.writing) })
	<-s.release
	etag, err := s.Store.Put(ctx, name, data, cond)
	if first {
		close(s.stored)
	}
	return etag, err
}

// A job cancelled while its map manifest is being written: the write lands after the job's
// clean-up, and the writer deletes what it wrote; nothing is left but the job's metadata.
func TestKeyed_CancelWhileTheManifestIsWrittenLeavesNothing(t *testing.T) {
	r := newRig(t)
	container, _ := r.keyedCorpus(2, 1000)
	ss := &slowManifestStore{Store: r.st, writing: make(chan struct{}), release: make(chan struct{}), stored: make(chan struct{})}
	r.leadOn(1, ss, func(*Config) {})
	r.work(worker.Config{Concurrency: 2, TempDir: t.TempDir()})
	id := r.submit("wordcount", fmt.Sprintf(`{"container":%q,"prefix":"in/","output":"blob","partitions":2,"shard_bytes":20000}`, container))
	select {
	case <-ss.writing:
	case <-time.After(30 * time.Second):
		t.Fatal("the map manifest was never written")
	}
	ctx := context.Background()
	// An output manifest stored as the job is cancelled (it can only be stale): removed too.
	if _, err := r.st.Put(ctx, protocol.ResultBlob(id), []byte(`{"kind":"output"}`), store.Cond{}); err != nil {
		t.Fatal(err)
	}
	if _, err := r.cl.Cancel(ctx, id); err != nil {
		t.Fatal(err)
	}
	if st := r.wait(id, 30*time.Second); st.State != jobs.StateCancelled {
		t.Fatalf("job %s: %s %s", id, st.State, st.Error)
	}
	testenv.Eventually(t, 20*time.Second, 20*time.Millisecond, func() bool {
		ok, err := r.st.Exists(ctx, protocol.ActiveBlob(id))
		return err == nil && !ok
	}, "the job's clean-up did not end")
	close(ss.release)
	<-ss.stored
	left := &protocol.OutputManifest{Partitions: []protocol.OutputPartition{{Blob: protocol.CancelBlob(id)}}} // kept: metadata
	r.noLeftovers(id, left)
	if ok, err := r.st.Exists(ctx, protocol.ResultBlob(id)); err != nil || ok {
		t.Fatalf("a cancelled job's result.json left behind (%v)", err)
	}
}

// blindStore is a worker's storage that cannot see map runs, though they are there.
type blindStore struct{ *store.Container }

func (s blindStore) ReadRange(ctx context.Context, name string, offset, count int64) (io.ReadCloser, error) {
	if strings.Contains(name, "/map/") {
		return nil, fmt.Errorf("read %s: %w", name, store.ErrNotFound)
	}
	return s.Container.ReadRange(ctx, name, offset, count)
}

func (s blindStore) Props(ctx context.Context, name string) (store.Props, error) {
	if strings.Contains(name, "/map/") {
		return store.Props{}, fmt.Errorf("stat %s: %w", name, store.ErrNotFound)
	}
	return s.Container.Props(ctx, name)
}

// Reduce tasks that keep reporting a run lost which the leader finds whole: after a few checks
// the job fails with a reason naming the blob, instead of running the map tasks forever.
func TestKeyed_RunReportedLostButWholeFailsTheJob(t *testing.T) {
	r := newRig(t)
	container, _ := r.keyedCorpus(2, 500)
	r.lead(1)
	w, err := worker.New(worker.Config{ID: "blind", Concurrency: 2, Logger: quietLog(), Registry: builtin.Registry(), TempDir: t.TempDir()},
		connect(t, r.url), blindStore{r.st}, store.NewEnv(r.blob))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = w.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	id := r.submit("wordcount", fmt.Sprintf(`{"container":%q,"prefix":"in/","output":"blob","partitions":2}`, container))
	st := r.wait(id, 60*time.Second)
	if st.State != jobs.StateFailed || !strings.Contains(st.Error, "but the leader finds it whole") || !strings.Contains(st.Error, id+"/map/") {
		t.Fatalf("job %s: %s %q", id, st.State, st.Error)
	}
}

// A keyed job stores its outputs in the format it chose: wordcount's words are text, so TSV by
// default; JSON lines or either compressed when asked. Every form reads back to the same
// counts, each blob's name ends with its format, and an aggregate job that asks for a format
// fails, saying why.
func TestKeyed_OutputFormats(t *testing.T) {
	r := newRig(t)
	container, want := r.keyedCorpus(3, 2000)
	r.lead(1)
	r.work(worker.Config{ID: "w0", Concurrency: 2, TempDir: t.TempDir()})
	params := fmt.Sprintf(`{"container":%q,"prefix":"in/","output":"blob","partitions":2}`, container)
	for _, c := range []struct{ ask, format string }{{"", "tsv"}, {"jsonl", "jsonl"}, {"tsv.zst", "tsv.zst"}, {"jsonl.zst", "jsonl.zst"}} {
		id, err := r.cl.Submit(context.Background(), "wordcount", json.RawMessage(params), client.WithOutputFormat(c.ask))
		if err != nil {
			t.Fatal(err)
		}
		if st := r.wait(id, 60*time.Second); st.State != jobs.StateSucceeded {
			t.Fatalf("%q: job %s: %s %s", c.ask, id, st.State, st.Error)
		}
		m, got := r.keyedOutput(id)
		sameCounts(t, got, want)
		if m.Format != c.format || m.KeyText != (c.format == "tsv" || c.format == "tsv.zst") || m.ValueText {
			t.Errorf("asked %q: manifest format %q, key text %v, value text %v", c.ask, m.Format, m.KeyText, m.ValueText)
		}
		for _, p := range m.Partitions {
			if !strings.HasSuffix(p.Blob, "."+c.format) {
				t.Errorf("asked %q: output blob %s", c.ask, p.Blob)
			}
		}
		r.noLeftovers(id, m)
	}
	id, err := r.cl.Submit(context.Background(), "wordcount", json.RawMessage(fmt.Sprintf(`{"container":%q,"prefix":"in/"}`, container)), client.WithOutputFormat("tsv"))
	if err != nil {
		t.Fatal(err)
	}
	if st := r.wait(id, 60*time.Second); st.State != jobs.StateFailed || !strings.Contains(st.Error, "output_format") || !strings.Contains(st.Error, "aggregate") {
		t.Fatalf("an aggregate job with an output format: %s %q", st.State, st.Error)
	}
}

// A reduce task groups more partitions when the cluster's slots are fewer than the tasks: one
// wave of tasks, each reading every map run once.
func TestReduceGroup(t *testing.T) {
	for _, c := range []struct{ maps, parts, slots, want int }{
		{24, 8, 0, 1},   // slots unknown: as jobs.PartitionsPerReduceTask
		{24, 8, 6, 2},   // 3 workers of 2 slots: 4 tasks
		{8, 8, 2, 4},    // one worker of 2 slots: 2 tasks
		{24, 8, 120, 1}, // more slots than partitions
		{1000, 1000, 4, 250},
		{1000, 1000, 200, 8}, // jobs.PartitionsPerReduceTask's is larger
		{5, 1, 3, 1},
	} {
		if g := reduceGroup(c.maps, c.parts, c.slots); g != c.want {
			t.Errorf("reduceGroup(%d maps, %d partitions, %d slots) = %d, want %d", c.maps, c.parts, c.slots, g, c.want)
		}
	}
}
