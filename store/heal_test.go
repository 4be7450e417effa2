package store_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/lease"

	"github.com/mapagg/mapagg/internal/harness/testenv"
	"github.com/mapagg/mapagg/store"
)

// A container deleted under the cluster (a wiped account) is created again by the next write,
// which then succeeds, and the rebuild is reported.
func TestContainer_PutRecreatesMissingContainer(t *testing.T) {
	ctx := context.Background()
	c := newContainer(t)
	var rebuilt atomic.Int32
	c.OnRebuilt(func(container, op string) {
		if container != c.Name() || !strings.HasPrefix(op, "put ") {
			t.Errorf("OnRebuilt(%q, %q)", container, op)
		}
		rebuilt.Add(1)
	})
	client, err := store.NewClient(testenv.Azurite(t))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := client.DeleteContainer(ctx, c.Name(), nil); err != nil {
		t.Fatal(err)
	}
	// Azurite deletes at once; the real service takes a while (ContainerBeingDeleted).
	if _, err := c.Put(ctx, "a/spec.json", []byte("x"), store.Cond{IfNoneMatch: true}); err != nil {
		t.Fatalf("put into a deleted container: %v", err)
	}
	if data, _, err := c.Get(ctx, "a/spec.json"); err != nil || string(data) != "x" {
		t.Fatalf("Get = %q, %v", data, err)
	}
	if rebuilt.Load() != 1 {
		t.Fatalf("rebuilt reported %d times, want 1", rebuilt.Load())
	}
	// A read of a missing blob stays a plain not-found.
	if _, _, err := c.Get(ctx, "nothing"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("Get of a missing blob: %v", err)
	}
}

// A container's generation stays while blobs in it are written and deleted, and changes when
// the container is deleted and created again; a missing container's is ErrNotFound.
func TestContainer_GenerationChangesOnlyWithTheContainer(t *testing.T) {
	ctx := context.Background()
	c := newContainer(t)
	gen, err := c.Generation(ctx)
	if err != nil || gen == "" {
		t.Fatalf("Generation = %q, %v", gen, err)
	}
	if _, err := c.Put(ctx, "a/spec.json", []byte("x"), store.Cond{}); err != nil {
		t.Fatal(err)
	}
	if err := c.Delete(ctx, "a/spec.json"); err != nil {
		t.Fatal(err)
	}
	if again, err := c.Generation(ctx); err != nil || again != gen {
		t.Fatalf("after a blob's write and delete: Generation = %q, %v; want %q", again, err, gen)
	}
	client, err := store.NewClient(testenv.Azurite(t))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := client.DeleteContainer(ctx, c.Name(), nil); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Generation(ctx); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("Generation of a deleted container: %v, want ErrNotFound", err)
	}
	if err := c.Ensure(ctx); err != nil {
		t.Fatal(err)
	}
	if again, err := c.Generation(ctx); err != nil || again == gen {
		t.Fatalf("after the container was created again: Generation = %q, %v; want other than %q", again, err, gen)
	}
}

// flaky answers the first n requests 503 ServerBusy (as a throttled or full account does) and
// passes the rest to the real server: the one failure Azurite does not produce on demand.
type flaky struct {
	n, seen atomic.Int32
}

func (f *flaky) Do(req *http.Request) (*http.Response, error) {
	if f.seen.Add(1) <= f.n.Load() {
		return &http.Response{StatusCode: http.StatusServiceUnavailable, Status: "503 Server Busy",
			Header:  http.Header{"X-Ms-Error-Code": {"ServerBusy"}},
			Body:    io.NopCloser(strings.NewReader("")),
			Request: req}, nil
	}
	return http.DefaultClient.Do(req)
}

func TestClients_TransientFailuresRetriedForTheirTime(t *testing.T) {
	ctx := context.Background()
	conn := testenv.Azurite(t)
	name := testenv.Name(t, "transient")
	for _, tc := range []struct {
		name     string
		retryFor time.Duration
		wantErr  bool
	}{
		{"within the retry time", 30 * time.Second, false},
		{"retries off", -1, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := &flaky{}
			clients, err := store.Account{ConnectionString: conn, Transport: f, TransientRetryFor: tc.retryFor}.Open()
			if err != nil {
				t.Fatal(err)
			}
			c := store.New(clients.Control, name)
			if err := c.Ensure(ctx); err != nil {
				t.Fatal(err)
			}
			f.seen.Store(0)
			f.n.Store(6) // more than the SDK's own four quick tries
			_, err = c.Put(ctx, "k", []byte("v"), store.Cond{})
			if tc.wantErr != (err != nil) {
				t.Fatalf("Put after 6 busy answers: %v (want error: %v)", err, tc.wantErr)
			}
		})
	}
}

// slowTransport holds every request for a while, counting how many are in flight at once.
type slowTransport struct {
	in, peak atomic.Int32
}

func (s *slowTransport) Do(req *http.Request) (*http.Response, error) {
	n := s.in.Add(1)
	for {
		p := s.peak.Load()
		if n <= p || s.peak.CompareAndSwap(p, n) {
			break
		}
	}
	time.Sleep(20 * time.Millisecond)
	s.in.Add(-1)
	return http.DefaultClient.Do(req)
}

// The data plane's requests in flight are bounded per process; bodies held open do not count, so
// a reader that holds more open bodies than the bound still makes progress.
func TestClients_DataRequestsBounded(t *testing.T) {
	ctx := context.Background()
	conn := testenv.Azurite(t)
	s := &slowTransport{}
	clients, err := store.Account{ConnectionString: conn, Transport: s, DataRequests: 3}.Open()
	if err != nil {
		t.Fatal(err)
	}
	c := store.New(clients.Data, testenv.Name(t, "data"))
	if err := c.Ensure(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Put(ctx, "b", []byte(strings.Repeat("x", 1000)), store.Cond{}); err != nil {
		t.Fatal(err)
	}
	// Hold 8 bodies open at once (more than the 3 slots), as a reduce over 8 runs does.
	var bodies []io.ReadCloser
	for i := 0; i < 8; i++ {
		r, err := c.ReadRange(ctx, "b", 0, 0)
		if err != nil {
			t.Fatal(err)
		}
		bodies = append(bodies, r)
	}
	for _, r := range bodies {
		if n, err := io.Copy(io.Discard, r); err != nil || n != 1000 {
			t.Fatalf("read %d, %v", n, err)
		}
		r.Close()
	}
	s.peak.Store(0)
	var wg sync.WaitGroup
	for i := 0; i < 24; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := c.Exists(ctx, "b"); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	if p := s.peak.Load(); p > 3 || p < 2 {
		t.Fatalf("peak in flight %d, want 2..3", p)
	}
}

// Lease renewals on the control plane's client stay prompt while the data plane saturates the
// same storage account (a keyed job's shuffle): the data plane's requests in flight are bounded,
// and the two never share a connection pool.
func TestClients_ControlRenewsUnderDataLoad(t *testing.T) {
	if testing.Short() {
		t.Skip("storage load")
	}
	ctx := context.Background()
	clients, err := store.Account{ConnectionString: testenv.Azurite(t)}.Open()
	if err != nil {
		t.Fatal(err)
	}
	name := testenv.Name(t, "load")
	data := store.New(clients.Data, name)
	if err := data.Ensure(ctx); err != nil {
		t.Fatal(err)
	}
	ctl := store.New(clients.Control, name)
	if _, err := ctl.Put(ctx, "lease", nil, store.Cond{}); err != nil {
		t.Fatal(err)
	}
	lc, err := lease.NewBlobClient(clients.Control.ServiceClient().NewContainerClient(name).NewBlobClient("lease"), nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := lc.AcquireLease(ctx, 15, nil); err != nil {
		t.Fatal(err)
	}
	block := []byte(strings.Repeat("x", 256<<10))
	lctx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	var moved atomic.Int64
	for w := 0; w < 64; w++ { // far more writers than the data plane's slots
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; lctx.Err() == nil; i++ {
				n := fmt.Sprintf("d/%d-%d", w, i%4)
				if _, err := data.Put(lctx, n, block, store.Cond{}); err == nil {
					moved.Add(int64(len(block)))
				}
				if r, err := data.ReadRange(lctx, n, 0, 0); err == nil {
					k, _ := io.Copy(io.Discard, r)
					r.Close()
					moved.Add(k)
				}
			}
		}()
	}
	var worst time.Duration
	deadline := time.Now().Add(8 * time.Second)
	for time.Now().Before(deadline) {
		time.Sleep(500 * time.Millisecond)
		start := time.Now()
		rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		_, err := lc.RenewLease(rctx, nil)
		cancel()
		took := time.Since(start)
		worst = max(worst, took)
		if err != nil {
			t.Errorf("renew under data load failed after %v: %v", took, err)
		}
		if in := clients.DataInFlight(); in > store.DefaultDataRequests() {
			t.Errorf("%d data requests in flight, above the bound %d", in, store.DefaultDataRequests())
		}
	}
	stop()
	wg.Wait()
	t.Logf("worst renewal %v while the data plane moved %d MiB", worst.Round(time.Millisecond), moved.Load()>>20)
	// The lease (15 s) less the election's safety margin (2 s) is the budget of a renewal.
	if worst > 5*time.Second {
		t.Errorf("worst renewal %v under data load", worst)
	}
}
