// Package testenv gives product tests the real servers the system runs on.
//
// Azurite starts at most once per test binary and is stopped by pid when its TestMain returns
// (use Main). Each test gets an in-process NATS server with JetStream. If Azurite's npm packages
// are missing, tests fail with the command that installs them; nothing is skipped.
package testenv

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mapagg/mapagg/internal/harness/devserver"
)

// Re-exported for tests.
const (
	AccountName = devserver.AccountName
	AccountKey  = devserver.AccountKey
)

var (
	sharedMu  sync.Mutex
	shared    *devserver.AzuriteServer
	sharedErr error
	sharedDir string
)

// Azurite returns the connection string of the test binary's shared Azurite, starting it on first
// use. It fails the test (never skips) when Azurite cannot be started.
func Azurite(t testing.TB) string {
	t.Helper()
	sharedMu.Lock()
	defer sharedMu.Unlock()
	if shared == nil && sharedErr == nil {
		sharedDir, sharedErr = os.MkdirTemp("", "azurite-test-")
		if sharedErr == nil {
			shared, sharedErr = devserver.StartAzurite(sharedDir)
		}
	}
	if sharedErr != nil {
		t.Fatalf("azurite: %v", sharedErr)
	}
	return shared.ConnectionString()
}

// Main runs the package's tests and then stops the shared Azurite. Use it as TestMain:
//
//	func TestMain(m *testing.M) { testenv.Main(m) }
func Main(m *testing.M) {
	code := m.Run()
	sharedMu.Lock()
	if shared != nil {
		shared.Stop()
		shared = nil
	}
	if sharedDir != "" {
		_ = os.RemoveAll(sharedDir)
	}
	sharedMu.Unlock()
	os.Exit(code)
}

// Name returns a lower-case name unique to this test, valid as a container or queue name
// (3–63 characters of a-z, 0-9 and single hyphens).
func Name(t testing.TB, prefix string) string {
	t.Helper()
	nameMu.Lock()
	nameSeq++
	n := nameSeq
	nameMu.Unlock()
	s := fmt.Sprintf("%s-%d-%d", prefix, os.Getpid()%100000, n)
	s = strings.ToLower(s)
	if len(s) > 63 {
		s = s[:63]
	}
	return strings.Trim(s, "-")
}

var (
	nameMu  sync.Mutex
	nameSeq int
)

// Eventually polls cond every tick until it returns true or within passes, then fails the test
// with msg. It is the only way tests wait for a state.
func Eventually(t testing.TB, within, tick time.Duration, cond func() bool, msg string, args ...any) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), within)
	defer cancel()
	for {
		if cond() {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("not within %v: "+msg, append([]any{within}, args...)...)
		case <-time.After(tick):
		}
	}
}
