package election

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob"

	"github.com/mapagg/mapagg/internal/harness/devserver"
	"github.com/mapagg/mapagg/internal/harness/testenv"
)

func TestAzureAPI_EnsureBlob_ConcurrentCreatorsAllSucceed(t *testing.T) {
	t.Parallel()
	api := NewAzureAPI(testClient(t))
	ctx := context.Background()
	container := testenv.Name(t, "ensure")

	const n = 8
	var wg sync.WaitGroup
	errs := make([]error, n)
	start := make(chan struct{})
	for i := range n {
		wg.Go(func() {
			<-start
			// Each creator has its own client, as separate processes would.
			errs[i] = NewAzureAPI(testClient(t)).EnsureBlob(ctx, container, "lease")
		})
	}
	close(start)
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("creator %d: %v", i, err)
		}
	}
	p, err := api.GetProperties(ctx, container, "lease")
	if err != nil {
		t.Fatalf("blob not created: %v", err)
	}
	if p.Held() {
		t.Errorf("new blob is leased: %+v", p)
	}

	// An existing blob is never overwritten: its metadata (the epoch) survives, also while leased.
	if err := api.SetMetadata(ctx, container, "lease", "", map[string]string{MetaEpoch: "41"}); err != nil {
		t.Fatal(err)
	}
	id := newLeaseID()
	if err := api.AcquireLease(ctx, container, "lease", id, 15*time.Second); err != nil {
		t.Fatal(err)
	}
	for _, leased := range []bool{true, false} {
		if !leased {
			if err := api.ReleaseLease(ctx, container, "lease", id); err != nil {
				t.Fatal(err)
			}
		}
		if err := api.EnsureBlob(ctx, container, "lease"); err != nil {
			t.Errorf("EnsureBlob on existing blob (leased=%v): %v", leased, err)
		}
		p, err := api.GetProperties(ctx, container, "lease")
		if err != nil {
			t.Fatal(err)
		}
		if p.Metadata[MetaEpoch] != "41" {
			t.Errorf("EnsureBlob (leased=%v) overwrote the blob: metadata %v", leased, p.Metadata)
		}
	}
}

func TestElector_Run_ConcurrentStartOnMissingContainer(t *testing.T) {
	t.Parallel()
	c := newCluster(t, testenv.Name(t, "fresh"))
	c.add(nil, nil)
	c.add(nil, nil)
	c.startAll() // both create the container and blob at once
	evs := c.waitTerms(1, 10*time.Second)
	if evs[0].term.Epoch != 1 {
		t.Errorf("first epoch on a new blob = %d, want 1", evs[0].term.Epoch)
	}
	if got := len(c.leaders()); got != 1 {
		t.Errorf("%d leaders, want 1", got)
	}
}

func TestAzureAPI_TranslatesErrors(t *testing.T) {
	t.Parallel()
	api := NewAzureAPI(testClient(t))
	ctx := context.Background()
	container := testenv.Name(t, "errs")

	if _, err := api.GetProperties(ctx, container, "lease"); !errors.Is(err, ErrNotFound) || strings.Contains(err.Error(), "not Azure Storage") {
		t.Errorf("properties of missing container: %v, want ErrNotFound from Azure Storage", err)
	}
	if err := api.AcquireLease(ctx, container, "lease", newLeaseID(), 15*time.Second); !errors.Is(err, ErrNotFound) {
		t.Errorf("acquire on missing container: %v, want ErrNotFound", err)
	}
	if err := api.EnsureBlob(ctx, container, "lease"); err != nil {
		t.Fatal(err)
	}
	a, b := newLeaseID(), newLeaseID()
	if err := api.RenewLease(ctx, container, "lease", a); !errors.Is(err, ErrLeaseNotHeld) {
		t.Errorf("renew without a lease: %v, want ErrLeaseNotHeld", err)
	}
	if err := api.AcquireLease(ctx, container, "lease", a, 15*time.Second); err != nil {
		t.Fatal(err)
	}
	if err := api.AcquireLease(ctx, container, "lease", a, 15*time.Second); err != nil {
		t.Errorf("re-acquire with the holder's ID: %v, want success", err)
	}
	err := api.AcquireLease(ctx, container, "lease", b, 15*time.Second)
	if !errors.Is(err, ErrLeaseHeld) {
		t.Errorf("acquire of a held lease: %v, want ErrLeaseHeld", err)
	}
	var se *StorageError
	var re *azcore.ResponseError
	if !errors.As(err, &se) || se.StatusCode != 409 || se.NotStorage || !errors.As(err, &re) {
		t.Errorf("acquire error %v is not a StorageError over an azcore.ResponseError", err)
	}
	for name, call := range map[string]func() error{
		"renew":    func() error { return api.RenewLease(ctx, container, "lease", b) },
		"release":  func() error { return api.ReleaseLease(ctx, container, "lease", b) },
		"setmeta":  func() error { return api.SetMetadata(ctx, container, "lease", b, map[string]string{"x": "1"}) },
		"no lease": func() error { return api.SetMetadata(ctx, container, "lease", "", map[string]string{"x": "1"}) },
	} {
		if err := call(); !errors.Is(err, ErrLeaseNotHeld) {
			t.Errorf("%s with a wrong lease ID: %v, want ErrLeaseNotHeld", name, err)
		}
	}
	if err := api.SetMetadata(ctx, container, "lease", a, map[string]string{"x": "1"}); err != nil {
		t.Errorf("setmeta by the holder: %v", err)
	}
	if err := api.ReleaseLease(ctx, container, "lease", a); err != nil {
		t.Fatal(err)
	}
	if err := api.SetMetadata(ctx, container, "lease", a, map[string]string{"x": "1"}); !errors.Is(err, ErrLeaseNotHeld) {
		t.Errorf("setmeta with a released lease ID: %v, want ErrLeaseNotHeld", err)
	}

	// A transient failure stays transient.
	cctx, cancel := context.WithTimeout(ctx, time.Nanosecond)
	defer cancel()
	<-cctx.Done()
	err = api.RenewLease(cctx, container, "lease", a)
	if err == nil || IsDefinitive(err) || errors.Is(err, ErrLeaseHeld) {
		t.Errorf("timed-out renew: %v, want a transient error", err)
	}
}

func TestReadLeader_ReportsHolderOrNil(t *testing.T) {
	t.Parallel()
	client := testClient(t)
	ctx := context.Background()
	container := testenv.Name(t, "read")

	info, err := ReadLeader(ctx, client, container, "lease")
	if info != nil || err != nil {
		t.Fatalf("missing container: %+v, %v; want nil, nil", info, err)
	}
	c := newCluster(t, container)
	c.add(nil, func(cfg *Config) { cfg.Identity = "alpha" })
	c.add(nil, func(cfg *Config) { cfg.Identity = "beta" })
	if err := c.nodes[0].api.EnsureBlob(ctx, container, "lease"); err != nil {
		t.Fatal(err)
	}
	if info, err := ReadLeader(ctx, client, container, "lease"); info != nil || err != nil {
		t.Fatalf("blob without lease: %+v, %v; want nil, nil", info, err)
	}
	if info, err := c.nodes[1].e.Leader(ctx); info != nil || err != nil {
		t.Fatalf("Leader with nobody leading: %+v, %v; want nil, nil", info, err)
	}

	c.start(c.nodes[0], nil)
	evs := c.waitTerms(1, 10*time.Second)
	for _, read := range []func() (*LeaderInfo, error){
		func() (*LeaderInfo, error) { return ReadLeader(ctx, client, container, "lease") },
		func() (*LeaderInfo, error) { return c.nodes[1].e.Leader(ctx) },
	} {
		info, err := read()
		if err != nil || info == nil {
			t.Fatalf("with a leader: %+v, %v", info, err)
		}
		if info.ID != "alpha" || info.Epoch != evs[0].term.Epoch || !info.Since.Equal(evs[0].term.Since.Round(0).UTC()) {
			t.Errorf("leader info %+v, want alpha, epoch %d, since %v", info, evs[0].term.Epoch, evs[0].term.Since)
		}
	}

	c.nodes[0].stop(t)
	if info, err := ReadLeader(ctx, client, container, "lease"); info != nil || err != nil {
		t.Errorf("after release: %+v, %v; want nil, nil", info, err)
	}
}

// Break Lease is fenced by the ETag of the stamp read: with a stale ETag it is refused (412,
// ErrConditionNotMet) and the holder keeps the lease; with the current one the lease ends at
// once, the old holder's renew is refused for good, and another ID acquires immediately.
func TestAzureAPI_BreakLease_FencedByETag(t *testing.T) {
	t.Parallel()
	api := NewAzureAPI(testClient(t))
	ctx := context.Background()
	container := testenv.Name(t, "break")
	if err := api.EnsureBlob(ctx, container, "lease"); err != nil {
		t.Fatal(err)
	}
	if err := api.BreakLease(ctx, container, "lease", "\"0x1\""); !errors.Is(err, ErrLeaseNotHeld) && !errors.Is(err, ErrConditionNotMet) {
		t.Errorf("break without a lease: %v, want ErrLeaseNotHeld or ErrConditionNotMet", err)
	}
	a, b, c := newLeaseID(), newLeaseID(), newLeaseID()
	if err := api.AcquireLease(ctx, container, "lease", a, 15*time.Second); err != nil {
		t.Fatal(err)
	}
	before, err := api.GetProperties(ctx, container, "lease")
	if err != nil || before.ETag == "" {
		t.Fatalf("properties: %+v, %v; want an ETag", before, err)
	}
	if err := api.SetMetadata(ctx, container, "lease", a, map[string]string{MetaEpoch: "7"}); err != nil {
		t.Fatal(err)
	}
	stamped, err := api.GetProperties(ctx, container, "lease")
	if err != nil || stamped.ETag == before.ETag {
		t.Fatalf("stamp did not change the ETag (%q → %q): %v", before.ETag, stamped.ETag, err)
	}
	if err := api.RenewLease(ctx, container, "lease", a); err != nil {
		t.Fatal(err)
	}
	if p, _ := api.GetProperties(ctx, container, "lease"); p.ETag != stamped.ETag {
		t.Errorf("a renewal changed the ETag %q → %q: it would fence breaks of live terms", stamped.ETag, p.ETag)
	}

	err = api.BreakLease(ctx, container, "lease", before.ETag)
	var se *StorageError
	if !errors.Is(err, ErrConditionNotMet) || !errors.As(err, &se) || se.StatusCode != 412 || IsDefinitive(err) {
		t.Fatalf("break with a stale ETag: %v, want ErrConditionNotMet (412)", err)
	}
	if err := api.RenewLease(ctx, container, "lease", a); err != nil {
		t.Fatalf("holder's renew after a refused break: %v", err)
	}

	if err := api.BreakLease(ctx, container, "lease", stamped.ETag); err != nil {
		t.Fatalf("break with the current ETag: %v", err)
	}
	if p, _ := api.GetProperties(ctx, container, "lease"); p.Held() {
		t.Errorf("lease state %q after a break with period 0, want not held", p.LeaseState)
	}
	if err := api.RenewLease(ctx, container, "lease", a); !errors.Is(err, ErrLeaseNotHeld) {
		t.Errorf("old holder's renew after the break: %v, want ErrLeaseNotHeld", err)
	}
	if err := api.AcquireLease(ctx, container, "lease", b, 15*time.Second); err != nil {
		t.Fatalf("acquire right after the break: %v", err)
	}
	if err := api.RenewLease(ctx, container, "lease", a); !errors.Is(err, ErrLeaseNotHeld) {
		t.Errorf("old holder's renew after a new acquire: %v, want ErrLeaseNotHeld", err)
	}
	// A second breaker that read the same stamp before the new holder stamped anew would still
	// match (lease operations keep the ETag); once the new term is stamped it cannot.
	if err := api.SetMetadata(ctx, container, "lease", b, map[string]string{MetaEpoch: "8"}); err != nil {
		t.Fatal(err)
	}
	if err := api.BreakLease(ctx, container, "lease", stamped.ETag); !errors.Is(err, ErrConditionNotMet) {
		t.Errorf("late break of the old term after the new stamp: %v, want ErrConditionNotMet", err)
	}
	if err := api.AcquireLease(ctx, container, "lease", c, 15*time.Second); !errors.Is(err, ErrLeaseHeld) {
		t.Errorf("acquire after a refused break: %v, want ErrLeaseHeld", err)
	}
	if err := api.BreakLease(ctx, container, "lease", ""); err == nil {
		t.Error("break without an ETag accepted")
	}
}

// A connection string whose blob endpoint is some other HTTP server gets an error that says so,
// not a bare "(HTTP 400)".
func TestAzureAPI_OtherServerIsNamed(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusBadRequest)
	}))
	defer srv.Close()
	port := srv.Listener.Addr().(*net.TCPAddr).Port
	c, err := azblob.NewClientFromConnectionString(devserver.ConnectionString(port, port), nil)
	if err != nil {
		t.Fatal(err)
	}
	_, err = NewAzureAPI(c).GetProperties(context.Background(), "c", "lease")
	var se *StorageError
	if !errors.As(err, &se) || !se.NotStorage || !strings.Contains(err.Error(), "not Azure Storage") {
		t.Fatalf("lease read from a plain HTTP server: %v, want an error naming it not Azure Storage", err)
	}
	if IsDefinitive(err) {
		t.Errorf("%v counted as definitive", err)
	}
}
