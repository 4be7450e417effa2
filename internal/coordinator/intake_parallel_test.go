package coordinator

import (
	"sync"
	"testing"
	"time"

	"github.com/mapagg/mapagg/internal/worker"
	"github.com/mapagg/mapagg/jobs"
)

// A burst of jobs is taken in side by side, yet never more jobs run at once than
// MaxActiveJobs: a receive asks only for the free places. Every job ends exact.
func TestIntake_BurstKeepsTheActiveLimit(t *testing.T) {
	const limit, n = 3, 12
	r := newRig(t)
	var mu sync.Mutex
	running, most := 0, 0
	r.leadWith(1, func(c *Config) {
		c.MaxActiveJobs = limit
		c.OnEvent = func(ev Event) {
			mu.Lock()
			defer mu.Unlock()
			switch ev.Kind {
			case EventJobPlanned:
				running++
				most = max(most, running)
			case EventJobFinished:
				running--
			}
		}
	})
	r.work(worker.Config{Concurrency: 4})
	ids := make([]string, n)
	for i := range ids {
		ids[i] = r.submit("sleep", `{"shards":1,"duration":"150ms"}`)
	}
	for _, id := range ids {
		if st := r.wait(id, 60*time.Second); st.State != jobs.StateSucceeded {
			t.Fatalf("job %s: %s %s", id, st.State, st.Error)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if most > limit {
		t.Errorf("%d jobs planned and not finished at once, want at most MaxActiveJobs %d", most, limit)
	}
	if most < 2 {
		t.Errorf("at most %d job running at once: the burst was taken in one by one", most)
	}
}
