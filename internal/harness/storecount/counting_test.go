package storecount_test

import (
	"context"
	"testing"

	"github.com/Azure/azure-sdk-for-go/sdk/storage/azqueue"

	"github.com/mapagg/mapagg/internal/harness/storecount"
	"github.com/mapagg/mapagg/internal/harness/testenv"
	"github.com/mapagg/mapagg/store"
)

// The counting transport sees every request of the blob and queue clients built from an
// Account, and names each by its service, container, blob and operation.
func TestCounting_CountsEveryRequestOfBothClients(t *testing.T) {
	ctx := context.Background()
	counting := storecount.NewCounting(nil)
	clients, err := store.Account{ConnectionString: testenv.Azurite(t), Transport: counting}.Open()
	if err != nil {
		t.Fatal(err)
	}
	name := testenv.Name(t, "count")
	c := store.New(clients.Blob, name)
	if err := c.Ensure(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Put(ctx, "a/b", []byte("x"), store.Cond{IfNoneMatch: true}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := c.Get(ctx, "a/b"); err != nil {
		t.Fatal(err)
	}
	if err := c.DeleteBatch(ctx, []string{"a/b", "gone"}); err != nil {
		t.Fatal(err)
	}
	q, err := clients.Queue(name, &azqueue.ClientOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := q.Create(ctx, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := q.EnqueueMessage(ctx, "m", nil); err != nil {
		t.Fatal(err)
	}
	got := counting.Counts()
	want := storecount.Counts{
		{Service: "blob", Method: "PUT", Container: name, Op: "container"}:    1,
		{Service: "blob", Method: "PUT", Container: name, Blob: "a/b"}:        1,
		{Service: "blob", Method: "GET", Container: name, Blob: "a/b"}:        1,
		{Service: "blob", Method: "POST", Container: name, Op: "batch"}:       1,
		{Service: "queue", Method: "PUT", Container: name}:                    1,
		{Service: "queue", Method: "POST", Container: name, Blob: "messages"}: 1,
	}
	if len(got) != len(want) {
		t.Errorf("counted %d kinds of request, want %d: %v", len(got), len(want), got)
	}
	for r, n := range want {
		if got[r] != n {
			t.Errorf("%v: counted %d, want %d (all: %v)", r, got[r], n, got)
		}
	}
	if n := got.Total(storecount.Blobs); n != 4 {
		t.Errorf("blob requests %d, want 4", n)
	}
	if n := got.Total(storecount.Queues); n != 2 {
		t.Errorf("queue requests %d, want 2", n)
	}
	before := counting.Counts()
	if ok, err := c.Exists(ctx, "a/b"); ok || err != nil {
		t.Fatalf("Exists = %v %v", ok, err)
	}
	if d := counting.Counts().Sub(before); d.Total(nil) != 1 || d[storecount.Request{Service: "blob", Method: "HEAD", Container: name, Blob: "a/b"}] != 1 {
		t.Errorf("a HEAD counted as %v", d)
	}
	counting.Reset()
	if n := counting.Counts().Total(nil); n != 0 {
		t.Errorf("after Reset: %d", n)
	}
}
