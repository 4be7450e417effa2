package store

import (
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"
)

// The control plane's transport holds requests beyond ControlInFlight in the process, but a
// request that names a lease (a renewal) goes straight through while they wait.
func TestControlLimit_LeaseRequestsNeverWait(t *testing.T) {
	release := make(chan struct{})
	var mu sync.Mutex
	arrived := 0
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		arrived++
		mu.Unlock()
		if r.Header.Get("x-ms-lease-action") == "" {
			<-release
		}
	}))
	defer srv.Close()
	defer close(release)
	const n = 3
	c := &http.Client{Transport: newControlLimit(n, http.DefaultTransport)}
	for range n + 2 {
		go func() {
			if resp, err := c.Get(srv.URL); err == nil {
				resp.Body.Close()
			}
		}()
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		mu.Lock()
		got := arrived
		mu.Unlock()
		if got >= n {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d requests arrived, want %d", got, n)
		}
		time.Sleep(10 * time.Millisecond)
	}
	time.Sleep(100 * time.Millisecond)
	mu.Lock()
	if arrived != n {
		t.Errorf("%d requests out with a limit of %d", arrived, n)
	}
	mu.Unlock()
	// Another endpoint's requests do not wait behind this one's.
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	defer other.Close()
	resp, err := c.Get(other.URL)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	req, _ := http.NewRequest(http.MethodPut, srv.URL+"/lease?comp=lease", nil)
	req.Header.Set("x-ms-lease-action", "renew")
	done := make(chan error, 1)
	go func() {
		resp, err := c.Do(req)
		if err == nil {
			resp.Body.Close()
		}
		done <- err
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("a lease request waited behind the limit")
	}
}
