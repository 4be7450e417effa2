package testenv

import (
	"testing"

	"github.com/mapagg/mapagg/internal/devserver"
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
