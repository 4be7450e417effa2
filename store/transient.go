package store

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"runtime"
	"strings"
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
		resp, err := req.Next()
		if err == nil && azuriteInternal(resp) {
			drain(resp)
			return nil, &AzuriteInternalError{Method: req.Raw().Method, Path: req.Raw().URL.Path, Tries: 1}
		}
		return resp, err
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
			if azuriteInternal(resp) {
				drain(resp)
				return nil, &AzuriteInternalError{Method: req.Raw().Method, Path: req.Raw().URL.Path, Tries: try}
			}
			return resp, err
		}
		drain(resp)
		var cause []any
		if azuriteInternal(resp) {
			cause = []any{"cause", azuriteInternalCause}
		}
		slog.Default().Warn("storage answered with a transient failure; retrying", append([]any{"op", req.Raw().Method,
			"path", req.Raw().URL.Path, "status", status(resp), "err", errString(err), "try", try, "retry_in", pause,
			"gives_up_in", time.Until(deadline).Round(time.Second)}, cause...)...)
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

// Azurite answers a request that failed inside it (an exception, not a storage error) with a
// bare 500: no error code, no request id, no body. On a healthy disk the cause is nearly always
// that it has run out of file descriptors: it leaks one for every ranged read its client stops
// early (a known Azurite bug), and once at its open-file limit it fails every request that opens
// a data file, for good, until it restarts. Left unnamed, a user sees only "500" retried for
// minutes and jobs failing.
const azuriteInternalCause = "Azurite failed inside (HTTP 500 without an error code): most often it has run out of " +
	"file descriptors (it leaks one for every ranged read stopped early, a known Azurite bug) and fails every " +
	"request that opens a data file until it restarts, or its disk is full; restart it with a higher open-file " +
	"limit (ulimit -n; ulimits.nofile under Docker Compose; Azurite/start.sh and the test servers raise it to the " +
	"hard limit), or free disk space"

// AzuriteInternalError is a request Azurite kept failing inside (see azuriteInternalCause).
type AzuriteInternalError struct {
	Method, Path string
	Tries        int
}

func (e *AzuriteInternalError) Error() string {
	tries := "tried once"
	if e.Tries > 1 {
		tries = fmt.Sprintf("tried %d times", e.Tries)
	}
	return fmt.Sprintf("%s %s: %s (%s)", e.Method, e.Path, azuriteInternalCause, tries)
}

// azuriteInternal reports whether resp is Azurite's answer to a failure inside it.
func azuriteInternal(resp *http.Response) bool {
	return resp != nil && resp.StatusCode == http.StatusInternalServerError &&
		strings.HasPrefix(resp.Header.Get("Server"), "Azurite") && resp.Header.Get("x-ms-error-code") == ""
}

// drain reads a little of resp's body and closes it, so its connection can be reused.
func drain(resp *http.Response) {
	if resp != nil && resp.Body != nil {
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
		resp.Body.Close()
	}
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
