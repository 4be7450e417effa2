// Package storecount counts a storage client's requests (by service, container, blob and
// operation) for tests and the load test's request budgets.
package storecount

import (
	"maps"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"

	"github.com/mapagg/mapagg/store"
)

// Counting is an HTTP transport for the storage clients that counts every request sent through
// it, by service, method, container, blob and operation. Set it as Account.Transport (or as
// the Transport of ClientOptions) to learn what an operation costs in requests, which is what
// Azure's limits count: 500 a second on one blob, 20,000 a second on one account. Retries are
// requests too and are counted each. A batch is one request whatever it carries.
type Counting struct {
	next policy.Transporter

	mu     sync.Mutex
	counts Counts
}

var _ policy.Transporter = (*Counting)(nil)

// NewCounting counts the requests sent through next (nil: Transport(), the control plane's).
func NewCounting(next policy.Transporter) *Counting {
	if next == nil {
		next = store.Transport()
	}
	return &Counting{next: next, counts: Counts{}}
}

// Do sends req through the wrapped transport and counts it, whatever the answer. A request the
// server did not answer, or answered with a status the SDK retries (408, 429, 5xx), is counted
// with Failed set: a budget that counts what the design asks for leaves those out, as the retry
// that follows is counted too.
func (c *Counting) Do(req *http.Request) (*http.Response, error) {
	r := ParseRequest(req)
	resp, err := c.next.Do(req)
	if err != nil || resp == nil || retried(resp.StatusCode) {
		r.Failed = true
	}
	c.mu.Lock()
	c.counts[r]++
	c.mu.Unlock()
	return resp, err
}

// retried reports whether the storage SDK's retry policy sends a request again after status.
func retried(status int) bool {
	switch status {
	case http.StatusRequestTimeout, http.StatusTooManyRequests, http.StatusInternalServerError,
		http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout:
		return true
	}
	return false
}

// Counts returns a copy of the counts so far.
func (c *Counting) Counts() Counts {
	c.mu.Lock()
	defer c.mu.Unlock()
	return maps.Clone(c.counts)
}

// Reset forgets the counts so far.
func (c *Counting) Reset() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.counts = Counts{}
}

// Request is a storage request as Counting counts it.
type Request struct {
	Service   string // "blob" or "queue" (by the SDK that sent it), else "other"
	Method    string // GET, HEAD, PUT, POST, DELETE
	Container string // the container or queue ("" for a request to the account)
	Blob      string // the blob's name; "messages" or "messages/<id>" for a queue's messages
	Op        string // the comp or restype parameter ("metadata", "list", "batch", "lease:renew", …), or ""
	Failed    bool   // no answer, or an answer the SDK retries (408, 429, 5xx)
}

// String is the request as "blob PUT jobs/x/checkpoint" or "blob PUT leader/lease?comp=lease".
func (r Request) String() string {
	s := r.Service + " " + r.Method + " " + r.Container
	if r.Blob != "" {
		s += "/" + r.Blob
	}
	if r.Op != "" {
		s += "?comp=" + r.Op
	}
	if r.Failed {
		s += " (failed)"
	}
	return s
}

// ParseRequest reads what req asks of which blob or queue. Path-style URLs (the emulator's,
// http://127.0.0.1:10000/devstoreaccount1/container/blob) have the account dropped.
func ParseRequest(req *http.Request) Request {
	r := Request{Service: "other", Method: req.Method}
	ua := req.Header.Get("User-Agent")
	switch {
	case strings.Contains(ua, "azblob"):
		r.Service = "blob"
	case strings.Contains(ua, "azqueue"):
		r.Service = "queue"
	}
	if req.URL == nil {
		return r
	}
	path := strings.TrimPrefix(req.URL.Path, "/")
	if pathStyle(req.URL) {
		_, path, _ = strings.Cut(path, "/")
	}
	if p, err := url.PathUnescape(path); err == nil {
		path = p
	}
	r.Container, r.Blob, _ = strings.Cut(path, "/")
	q := req.URL.Query()
	r.Op = q.Get("comp")
	if r.Op == "" {
		r.Op = q.Get("restype")
	}
	if r.Op == "lease" {
		for k, v := range req.Header { // the SDK sets it in lower case, which Get does not find
			if strings.EqualFold(k, "x-ms-lease-action") && len(v) > 0 {
				r.Op += ":" + v[0] // acquire, renew, break, release, change
			}
		}
	}
	return r
}

// pathStyle reports an endpoint whose first path segment is the account: an IP address, a host
// without a dot (localhost, a compose service) or the emulator's.
func pathStyle(u *url.URL) bool {
	h := u.Hostname()
	return net.ParseIP(h) != nil || !strings.Contains(h, ".") || strings.HasPrefix(u.Path, "/devstoreaccount1/")
}

// Counts are requests counted, by request.
type Counts map[Request]int64

// Total is the number of requests that keep accepts (nil: all).
func (c Counts) Total(keep func(Request) bool) int64 {
	var n int64
	for r, k := range c {
		if keep == nil || keep(r) {
			n += k
		}
	}
	return n
}

// Sub is c minus earlier: the requests counted since earlier was taken.
func (c Counts) Sub(earlier Counts) Counts {
	out := Counts{}
	for r, n := range c {
		if d := n - earlier[r]; d != 0 {
			out[r] = d
		}
	}
	return out
}

// Only is the counts of the requests keep keeps.
func (c Counts) Only(keep func(Request) bool) Counts {
	out := Counts{}
	for r, n := range c {
		if keep(r) {
			out[r] = n
		}
	}
	return out
}

// Add adds other's counts to c.
func (c Counts) Add(other Counts) {
	for r, n := range other {
		c[r] += n
	}
}

// Answered keeps the requests the server answered with a status the SDK does not retry.
func Answered(r Request) bool { return !r.Failed }

// Blobs keeps the blob service's requests.
func Blobs(r Request) bool { return r.Service == "blob" }

// Queues keeps the queue service's requests.
func Queues(r Request) bool { return r.Service == "queue" }

// InContainer keeps the requests to one container (or queue).
func InContainer(name string) func(Request) bool {
	return func(r Request) bool { return r.Container == name }
}
