package shuffle

import (
	"context"
	"errors"
	"fmt"
	"io"
	"testing"

	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/container"

	"github.com/mapagg/mapagg/internal/harness/testenv"
	"github.com/mapagg/mapagg/jobs"
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

func azuriteStorage(t *testing.T) (blobStorage, *container.Client) {
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
	return blobStorage{cc: cc}, cc
}

// 3 map shards × 4 partitions through real blob storage: the reduced partitions equal a
// sequential in-memory computation, with spills on both sides.
func TestShuffle_Azurite_3Shards4Partitions(t *testing.T) {
	st, cc := azuriteStorage(t)
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
	st, _ := azuriteStorage(t)
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
