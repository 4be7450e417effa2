package bus_test

import (
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/mapagg/mapagg/internal/bus"
	"github.com/mapagg/mapagg/internal/harness/testenv"
)

type logSink struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *logSink) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *logSink) has(sub string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return strings.Contains(s.b.String(), sub)
}

// A NATS restart is logged (disconnect with its reason, reconnect with the server), and so is a
// slow consumer, through the logger given to ConnEvents.
func TestConnEvents_DisconnectReconnectSlowConsumerLogged(t *testing.T) {
	var sink logSink
	log := slog.New(slog.NewTextHandler(&sink, nil))
	s := startNATS(t, -1, t.TempDir())
	port := serverPort(t, s)
	b, err := bus.Connect(s.ClientURL(), "events", bus.Config{}, bus.ConnEvents(log)...)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()

	s.Shutdown()
	s.WaitForShutdown()
	testenv.Eventually(t, 10*time.Second, 10*time.Millisecond, func() bool { return sink.has("nats disconnected") }, "disconnect not logged")
	s2 := startNATS(t, port, t.TempDir())
	defer s2.Shutdown()
	testenv.Eventually(t, 10*time.Second, 10*time.Millisecond, func() bool { return sink.has("nats reconnected") }, "reconnect not logged")
	if !sink.has("server=nats://127.0.0.1:") {
		t.Errorf("reconnect does not name the server: %s", sink.b.String())
	}

	// A subscription that cannot keep up: a handler that blocks, a pending limit of 1 message.
	release := make(chan struct{})
	sub, err := b.Conn().Subscribe("slow", func(*nats.Msg) { <-release })
	if err != nil {
		t.Fatal(err)
	}
	defer close(release)
	if err := sub.SetPendingLimits(1, 1<<20); err != nil {
		t.Fatal(err)
	}
	for range 10 {
		_ = b.Conn().Publish("slow", []byte("x"))
	}
	_ = b.Conn().Flush()
	testenv.Eventually(t, 10*time.Second, 10*time.Millisecond, func() bool { return sink.has("nats slow consumer") }, "slow consumer not logged")
	if !sink.has("subject=slow") {
		t.Errorf("slow consumer does not name the subject: %s", sink.b.String())
	}
}
