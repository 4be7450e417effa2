package testenv

import (
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// StartNATS starts an in-process NATS server with JetStream on a free 127.0.0.1 port, storing
// in storeDir. The caller owns it and must Shutdown it.
func StartNATS(storeDir string) (*server.Server, error) {
	opts := &server.Options{
		Host:               "127.0.0.1",
		Port:               -1,
		JetStream:          true,
		StoreDir:           storeDir,
		NoLog:              true,
		NoSigs:             true,
		MaxPayload:         8 << 20,
		JetStreamMaxMemory: 256 << 20,
		JetStreamMaxStore:  4 << 30,
	}
	s, err := server.NewServer(opts)
	if err != nil {
		return nil, err
	}
	go s.Start()
	if !s.ReadyForConnections(10 * time.Second) {
		s.Shutdown()
		return nil, errNotReady
	}
	return s, nil
}

type notReady struct{}

func (notReady) Error() string { return "nats server not ready within 10s" }

var errNotReady error = notReady{}

// NATS starts an in-process NATS server with JetStream for this test and returns its URL. It is
// shut down when the test ends.
func NATS(t testing.TB) string {
	t.Helper()
	s, err := StartNATS(t.TempDir())
	if err != nil {
		t.Fatalf("nats: %v", err)
	}
	t.Cleanup(func() {
		s.Shutdown()
		s.WaitForShutdown()
	})
	return s.ClientURL()
}
