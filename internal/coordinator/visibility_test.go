package coordinator

import (
	"context"
	"testing"
	"time"

	"github.com/mapagg/mapagg/internal/worker"
)

// Job messages a leader took off the queue and never planned (it died) come back within
// QueueVisibility (6 s), not a minute: the next leader runs them soon after it is elected.
func TestCoordinator_DeadLeadersMessagesComeBackInSeconds(t *testing.T) {
	r := newRig(t)
	var ids []string
	for range 3 {
		ids = append(ids, r.submit("sleep", `{"shards":2}`))
	}
	// The dead leader: it received the messages with the default visibility and did nothing.
	taken, err := r.q.Receive(context.Background(), 16, DefaultConfig().QueueVisibility)
	if err != nil || len(taken) != 3 {
		t.Fatalf("receive: %d messages, %v", len(taken), err)
	}
	start := time.Now()
	r.leadWith(2, func(c *Config) { c.QueueVisibility = 0 }) // the default
	r.work(worker.Config{})
	for _, id := range ids {
		r.wait(id, 30*time.Second)
	}
	took := time.Since(start)
	t.Logf("all 3 jobs ended %v after the new leader started", took.Round(time.Millisecond))
	if bound := DefaultConfig().QueueVisibility + 4*time.Second; took > bound {
		t.Fatalf("the dead leader's jobs ended after %v, want within %v", took, bound)
	}
}
