package store

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"runtime"
	"sync/atomic"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
)

// A storage account that says it is unavailable (503), busy (500 ServerBusy, throttling), or
// cannot write for a moment (a full disk on the emulator answers 500) is not a reason to fail a
// job: each request is tried again with backoff until the account answers, for at most
// TransientRetryFor, and only then fails. The SDK's own retry policy (three quick tries) runs
// inside each of these attempts. A caller's context still bounds every request: a lease renewal
// with a one-second budget gives up after a second.

// DefaultTransientRetryFor is how long a request that meets transient failures is tried again.
const DefaultTransientRetryFor = 3 * time.Minute

// transientFailures counts the transient failures every client of this process met.
var transientFailures atomic.Uint64

// TransientFailures is how many requests of this process's storage clients met a transient
// failure (the account unreachable, unavailable or busy), retried or not. A caller that keeps
// what it wrote in memory compares it across its work: a change says the account was in
// trouble, and an emulator that restarted may have lost writes it acknowledged before.
func TransientFailures() uint64 { return transientFailures.Load() }

// transientPolicy retries a request the account answered with a transient failure, with backoff
// (1 s doubling to 15 s), until retryFor has passed since its first try.
type transientPolicy struct {
	retryFor time.Duration
}

func (p transientPolicy) Do(req *policy.Request) (*http.Response, error) {
	if p.retryFor <= 0 {
		return req.Next()
	}
	ctx := req.Raw().Context()
	deadline := time.Now().Add(p.retryFor)
	pause := time.Second
	for try := 1; ; try++ {
		resp, err := req.Next()
		if !transient(ctx, resp, err) {
			return resp, err
		}
		transientFailures.Add(1)
		if time.Now().Add(pause).After(deadline) {
			return resp, err
		}
		if resp != nil && resp.Body != nil {
			_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
			resp.Body.Close()
		}
		slog.Default().Warn("storage answered with a transient failure; retrying", "op", req.Raw().Method,
			"path", req.Raw().URL.Path, "status", status(resp), "err", errString(err), "try", try, "retry_in", pause,
			"gives_up_in", time.Until(deadline).Round(time.Second))
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(pause):
		}
		pause = min(2*pause, 15*time.Second)
		if rerr := req.RewindBody(); rerr != nil {
			return nil, errors.Join(err, rerr)
		}
	}
}

// transient reports whether a request's outcome says the account cannot answer now but may soon:
// 500, 502, 503 or 504 (server busy, unavailable, a full disk, throttling), or a connection that
// could not be made or was cut. A failure of the caller's own context is not.
func transient(ctx context.Context, resp *http.Response, err error) bool {
	if ctx.Err() != nil {
		return false
	}
	if err != nil {
		if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
			return false
		}
		var ne net.Error
		return errors.As(err, &ne) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF)
	}
	switch resp.StatusCode {
	case http.StatusInternalServerError, http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout,
		http.StatusInsufficientStorage, http.StatusTooManyRequests:
		return true
	}
	return false
}

func status(resp *http.Response) int {
	if resp == nil {
		return 0
	}
	return resp.StatusCode
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// DefaultDataRequests is how many requests the data plane's clients of one process have in flight
// at once: 8 a core, at least 16.
func DefaultDataRequests() int { return max(16, 8*runtime.GOMAXPROCS(0)) }

// limitedTransport admits at most cap(slots) requests at once. A slot is held from sending a
// request until its response's headers are in, not while the caller reads the body, so a reduce
// that holds one open body per run while it opens more can never wait on itself.
type limitedTransport struct {
	slots chan struct{}
	next  policy.Transporter
}

func newLimitedTransport(n int, next policy.Transporter) *limitedTransport {
	return &limitedTransport{slots: make(chan struct{}, max(n, 1)), next: next}
}

func (t *limitedTransport) Do(req *http.Request) (*http.Response, error) {
	select {
	case t.slots <- struct{}{}:
	case <-req.Context().Done():
		return nil, req.Context().Err()
	}
	defer func() { <-t.slots }()
	return t.next.Do(req)
}

// InFlight is how many requests hold a slot now.
func (t *limitedTransport) InFlight() int { return len(t.slots) }
