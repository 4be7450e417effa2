package coordinator

import (
	"fmt"
	"syscall"
	"testing"
	"time"

	"github.com/mapagg/mapagg/internal/worker"
)

// BenchmarkNoopShards runs no-op shards through a leader and two workers (each with its own NATS
// connection, at default worker settings) in this process, and reports the process's CPU time
// per shard (user+sys, from getrusage: NATS server, leader and workers; Azurite is a separate
// process and not counted) and shards/s.
//
//	go test -run XXX -bench NoopShards -benchtime 5x ./coordinator/
func BenchmarkNoopShards(b *testing.B) {
	for _, shards := range []int{2000, 20000} { // one shard per message; 4 per message
		b.Run(fmt.Sprintf("shards=%d", shards), func(b *testing.B) { benchNoop(b, shards) })
	}
}

func benchNoop(b *testing.B, shards int) {
	r := newRig(b)
	r.lead(1)
	r.work(worker.Config{ID: "w1"})
	r.work(worker.Config{ID: "w2"})
	r.wait(r.submit("sleep", `{"shards":10}`), time.Minute) // warm up
	var cpu time.Duration
	start := time.Now()
	for b.Loop() {
		before := rusage()
		id := r.submit("sleep", fmt.Sprintf(`{"shards":%d}`, shards))
		if st := r.wait(id, 5*time.Minute); st.State != "succeeded" {
			b.Fatalf("state %s: %s", st.State, st.Error)
		}
		cpu += rusage() - before
	}
	n := float64(b.N * shards)
	b.ReportMetric(float64(cpu.Microseconds())/n, "cpu-µs/shard")
	b.ReportMetric(n/time.Since(start).Seconds(), "shards/s")
}

func rusage() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
