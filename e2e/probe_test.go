package e2e

import (
	"syscall"
	"testing"
	"time"

	"github.com/mapagg/mapagg/election"
	"github.com/mapagg/mapagg/internal/harness/cluster"
)

// A worker process killed with SIGKILL while it leads is replaced through the probe path: a
// follower's probes of its term find no responders (the kernel closed its socket, NATS dropped
// its subscription), and that follower breaks the lease; the job's answer is exact.
func TestFailover_LeaderSIGKILLConfirmedByNoResponders(t *testing.T) {
	c := start(t, cluster.Options{Workers: 3, Concurrency: 1, MapDelay: 100 * time.Millisecond, LeaseDuration: lease})
	id, old := primesAt40Percent(t, c)
	at, err := c.Signal(old.ID, syscall.SIGKILL)
	if err != nil {
		t.Fatal(err)
	}
	nu, took := newLeader(t, c, old, at, lease+acquireEvery+time.Second)
	ev, ok := c.EventAfter(string(election.EventNoResponders), at)
	if !ok || ev.Epoch != old.Epoch {
		t.Fatalf("no %s event for epoch %d after the kill (got %+v): the takeover did not come from the probe path", election.EventNoResponders, old.Epoch, ev)
	}
	t.Logf("SIGKILL of %s (epoch %d) → %s confirmed it gone after %v → %s (epoch %d) elected after %v",
		old.ID, old.Epoch, ev.Worker, ev.Time.Sub(at).Round(time.Millisecond), nu.ID, nu.Epoch, took.Round(time.Millisecond))
	if _, err := c.StartWorker(old.ID); err != nil {
		t.Fatal(err)
	}
	if got := primesCount(t, finish(t, c, id)); got != primesWant {
		t.Fatalf("primes below 2·10^7 = %d, want %d", got, primesWant)
	}
}
