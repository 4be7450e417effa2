package testenv

import (
	"bytes"
	"sync"
	"testing"

	"github.com/mapagg/mapagg/internal/harness/devserver"
)

// NATS starts an in-process NATS server with JetStream for this test and returns its URL. It is
// shut down when the test ends.
func NATS(t testing.TB) string {
	t.Helper()
	s, err := devserver.StartNATS(t.TempDir())
	if err != nil {
		t.Fatalf("nats: %v", err)
	}
	t.Cleanup(func() {
		s.Shutdown()
		s.WaitForShutdown()
	})
	return s.ClientURL()
}

// SyncBuffer is a bytes.Buffer safe for a goroutine that writes (a command's or a worker's log)
// and a test that reads.
type SyncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *SyncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

// String returns what was written so far.
func (s *SyncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// Reset discards what was written so far.
func (s *SyncBuffer) Reset() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.b.Reset()
}
