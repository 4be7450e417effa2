package testenv

import (
	"bytes"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"

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

// NATSServer starts an in-process NATS server configured by opts (auth, TLS, a fixed port to
// restart on, JetStream) on 127.0.0.1 and stops it when the test ends. Unset fields get a test's
// defaults: a free port, a JetStream store in the test's temporary folder, no signal handlers,
// and no log unless NATSLOG is set. A test may stop and restart it itself.
func NATSServer(t testing.TB, opts *server.Options) *server.Server {
	t.Helper()
	opts.Host = "127.0.0.1"
	if opts.Port == 0 {
		opts.Port = -1
	}
	if opts.JetStream && opts.StoreDir == "" {
		opts.StoreDir = t.TempDir()
	}
	opts.NoLog, opts.NoSigs = os.Getenv("NATSLOG") == "", true
	s, err := server.NewServer(opts)
	if err != nil {
		t.Fatalf("nats: %v", err)
	}
	if !opts.NoLog {
		s.ConfigureLogger()
	}
	go s.Start()
	if !s.ReadyForConnections(10 * time.Second) {
		s.Shutdown()
		t.Fatal("nats: not ready within 10s")
	}
	t.Cleanup(func() { s.Shutdown(); s.WaitForShutdown() })
	return s
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
