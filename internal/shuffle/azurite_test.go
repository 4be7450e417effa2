package shuffle

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"testing"

	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/container"

	"github.com/mapagg/mapagg/internal/harness/testenv"
	"github.com/mapagg/mapagg/jobs"
	"github.com/mapagg/mapagg/jobs/jobstest"
	"github.com/mapagg/mapagg/store"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// blobStorage is Storage on one Azure container: streaming upload (staged blocks, committed
// only when the reader ends cleanly) and streaming download. The next session moves it to store.
type blobStorage struct{ cc *container.Client }

var _ Storage = blobStorage{}

func (b blobStorage) Put(ctx context.Context, name string, r io.Reader) error {
	_, err := b.cc.NewBlockBlobClient(name).UploadStream(ctx, r, &azblob.UploadStreamOptions{BlockSize: 1 << 20, Concurrency: 2})
	if err != nil {
		return fmt.Errorf("put %s: %w", name, err)
	}
	return nil
}

func (b blobStorage) Get(ctx context.Context, name string) (io.ReadCloser, error) {
	resp, err := b.cc.NewBlobClient(name).DownloadStream(ctx, nil)
	if err != nil {
		return nil, fmt.Errorf("get %s: %w", name, err)
	}
	return resp.Body, nil
}

// azuriteStorage returns Storage on a new container of the shared Azurite, the container's
// client and its name.
func azuriteStorage(t *testing.T) (blobStorage, *container.Client, string) {
	t.Helper()
	client, err := store.NewClient(testenv.Azurite(t))
	if err != nil {
		t.Fatal(err)
	}
	name := testenv.Name(t, "shuffle")
	c := store.New(client, name)
	if err := c.Ensure(context.Background()); err != nil {
		t.Fatal(err)
	}
	cc := client.ServiceClient().NewContainerClient(name)
	return blobStorage{cc: cc}, cc, name
}

// 3 map shards × 4 partitions through real blob storage: the reduced partitions equal a
// sequential in-memory computation, with spills on both sides.
func TestShuffle_Azurite_3Shards4Partitions(t *testing.T) {
	st, cc, _ := azuriteStorage(t)
	p := randParams{Shards: 3, N: 50000, Keys: 40000, Partitions: 4}
	params := fmt.Sprintf(`{"shards":%d,"n":%d,"keys":%d,"partitions":%d}`, p.Shards, p.N, p.Keys, p.Partitions)
	mcfg := MapConfig{Partitions: p.Partitions, MemoryBytes: 1 << 20, TempDir: t.TempDir()}
	rcfg := ReduceConfig{MemoryBytes: MinMemoryBytes, TempDir: t.TempDir()}
	got, ms, rs := runJob(t, st, jobs.Keyed("randsum", randCombine{}), params, mcfg, rcfg)
	compareOutputs(t, got, expected(p))
	var blobs int
	pager := cc.NewListBlobsFlatPager(nil)
	for pager.More() {
		page, err := pager.NextPage(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		blobs += len(page.Segment.BlobItems)
	}
	if blobs != p.Shards*p.Partitions {
		t.Errorf("%d blobs stored, want %d runs", blobs, p.Shards*p.Partitions)
	}
	if ms[0].Spills == 0 || rs[0].Merges == 0 {
		t.Errorf("map stats %+v, reduce stats %+v: a spill on each side expected", ms[0], rs[0])
	}
	t.Logf("map %+v\nreduce %+v", ms[0], rs[0])
}

// A run cut short on its way to storage is not stored: Put's reader fails, no block list is
// committed.
func TestShuffle_Azurite_AbortedPutStoresNothing(t *testing.T) {
	st, _, _ := azuriteStorage(t)
	ctx := context.Background()
	w := PutWriter(ctx, st, "aborted.run")
	if _, err := w.Write(make([]byte, 3<<20)); err != nil {
		t.Fatal(err)
	}
	_ = w.CloseWithError(errors.New("map failed"))
	if _, err := st.Get(ctx, "aborted.run"); err == nil {
		t.Error("an aborted run was stored")
	}
}

// The layout the execution plan proposes: one blob per map attempt, its partitions' runs back to
// back (ConcatSink), and reduce tasks reading their ranges with ranged blob reads (EnvRuns).
func TestShuffle_Azurite_OneBlobPerMapTask(t *testing.T) {
	st, _, container := azuriteStorage(t)
	client, err := store.NewClient(testenv.Azurite(t))
	if err != nil {
		t.Fatal(err)
	}
	testConcat(t, st, store.NewEnv(client), container)
}

// The same over jobstest's Env, whose reads return one byte at a time.
func TestShuffle_ConcatOneByteReads(t *testing.T) {
	st := newMemStorage()
	env := jobstest.NewEnv()
	env.OneByteReads(true)
	testConcat(t, envStorage{st: st, env: env}, env, "c")
}

// envStorage puts into both st and env's container "c".
type envStorage struct {
	st  *memStorage
	env *jobstest.Env
}

func (e envStorage) Put(ctx context.Context, name string, r io.Reader) error {
	b, err := io.ReadAll(r)
	if err != nil {
		return err
	}
	e.env.Put("c", name, b)
	return e.st.Put(ctx, name, bytes.NewReader(b))
}

func (e envStorage) Get(ctx context.Context, name string) (io.ReadCloser, error) {
	return e.st.Get(ctx, name)
}

func testConcat(t *testing.T, st Storage, env jobs.Env, container string) {
	t.Helper()
	ctx := context.Background()
	p := randParams{Shards: 3, N: 20000, Keys: 15000, Partitions: 4}
	params := fmt.Sprintf(`{"shards":%d,"n":%d,"keys":%d,"partitions":%d}`, p.Shards, p.N, p.Keys, p.Partitions)
	job := jobs.Keyed("randsum", randCombine{})
	shards, _ := job.Split(ctx, nil, []byte(params))
	segs := make([][]Segment, p.Partitions)
	for i, s := range shards {
		name := fmt.Sprintf("job/map/%d.1", i)
		w := PutWriter(ctx, st, name)
		cs := NewConcatSink(w)
		mcfg := MapConfig{Partitions: p.Partitions, MemoryBytes: MinMemoryBytes, BlockBytes: 8 << 10, TempDir: t.TempDir()}
		if _, err := Map(ctx, job, nil, jobs.Task{Index: i, Attempt: 1, Shard: s}, cs.Sink(), mcfg); err != nil {
			t.Fatal(err)
		}
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
		if len(cs.Offsets) != p.Partitions+1 {
			t.Fatalf("offsets %v", cs.Offsets)
		}
		for part := range p.Partitions {
			segs[part] = append(segs[part], Segment{Blob: name, Offset: cs.Offsets[part], Length: cs.Offsets[part+1] - cs.Offsets[part]})
		}
	}
	got := map[int]string{}
	for part := range p.Partitions {
		var buf bytes.Buffer
		out, _ := NewOutputWriter(&buf, FormatTSV)
		if _, err := Reduce(ctx, job, EnvRuns(env, container, segs[part]), out, ReduceConfig{Partition: part, TempDir: t.TempDir()}); err != nil {
			t.Fatalf("reduce partition %d: %v", part, err)
		}
		got[part] = buf.String()
	}
	compareOutputs(t, got, expected(p))
}
