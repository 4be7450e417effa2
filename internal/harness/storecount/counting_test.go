package storecount_test

import (
	"context"
	"errors"
	"net/http"
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

// statusTransport answers every request with one status, or fails it with err.
type statusTransport struct {
	status int
	err    error
}

func (s statusTransport) Do(req *http.Request) (*http.Response, error) {
	if s.err != nil {
		return nil, s.err
	}
	return &http.Response{StatusCode: s.status, Body: http.NoBody, Request: req}, nil
}

// A request without an answer, or with one the SDK retries, is counted as failed; an answer
// the caller reads (a 404, a 412) is not.
func TestCounting_MarksFailedAttempts(t *testing.T) {
	for _, tt := range []struct {
		next   statusTransport
		failed bool
	}{
		{statusTransport{status: http.StatusOK}, false},
		{statusTransport{status: http.StatusNotFound}, false},
		{statusTransport{status: http.StatusPreconditionFailed}, false},
		{statusTransport{status: http.StatusServiceUnavailable}, true},
		{statusTransport{status: http.StatusInternalServerError}, true},
		{statusTransport{status: http.StatusTooManyRequests}, true},
		{statusTransport{err: errors.New("i/o timeout")}, true},
	} {
		c := storecount.NewCounting(tt.next)
		req, _ := http.NewRequest(http.MethodGet, "http://127.0.0.1:10000/devstoreaccount1/jobs/x/checkpoint", nil)
		resp, _ := c.Do(req)
		if resp != nil {
			resp.Body.Close()
		}
		got := c.Counts()
		want := storecount.Request{Service: "other", Method: "GET", Container: "jobs", Blob: "x/checkpoint", Failed: tt.failed}
		if got.Total(nil) != 1 || got[want] != 1 {
			t.Errorf("status %d err %v: counts %v, want one %v", tt.next.status, tt.next.err, got, want)
		}
		if n := got.Only(storecount.Answered).Total(nil); (n == 0) != tt.failed {
			t.Errorf("status %d err %v: %d answered", tt.next.status, tt.next.err, n)
		}
	}
}
