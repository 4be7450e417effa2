package clustertest

import (
	"context"
	"encoding/json"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/mapagg/mapagg/builtin"
	"github.com/mapagg/mapagg/jobs"
)

// A cluster without a worker to build is refused with what to set, before anything starts.
func TestStart_RequiresMainOrBin(t *testing.T) {
	_, err := start(t.TempDir(), Options{})
	if err == nil || !strings.Contains(err.Error(), "Options.Main") {
		t.Fatalf("err %v, want one naming Options.Main", err)
	}
}

// A main package that does not build: the compiler's message, not a hang.
func TestStart_BuildErrorSaysWhat(t *testing.T) {
	_, err := start(t.TempDir(), Options{Main: "./no-such-package"})
	if err == nil || !strings.Contains(err.Error(), "go build ./no-such-package") {
		t.Fatalf("err %v, want the build error", err)
	}
}

// The stock worker as the author's binary: a job survives its leader's SIGKILL with the exact
// answer, and Stop leaves no process behind.
func TestCluster_KillLeaderThenStopByPID(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a cluster")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	c := Start(t, Options{Main: "github.com/mapagg/mapagg/cmd/worker", Workers: 2, MapDelay: 50 * time.Millisecond})
	id, err := c.Client().Submit(ctx, "primes", json.RawMessage(`{"from":0,"to":1000000,"shards":60}`))
	if err != nil {
		t.Fatal(err)
	}
	old, next, err := c.KillLeader(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if next.Epoch <= old.Epoch {
		t.Fatalf("next leader %+v after %+v: the epoch must grow", next, old)
	}
	st, err := c.Wait(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	var res builtin.PrimesResult
	if err := json.Unmarshal(st.Result, &res); err != nil || st.State != jobs.StateSucceeded || res.Count != 78498 {
		t.Fatalf("job %s %s %s (%v): want 78498 primes below 10⁶", id, st.State, st.Result, err)
	}
	pids := c.PIDs()
	if len(pids) != 2 {
		t.Fatalf("running workers %v, want 2 (the killed leader restarted)", pids)
	}
	c.Stop()
	for w, pid := range pids {
		if syscall.Kill(pid, 0) == nil {
			t.Errorf("%s (pid %d) still running after Stop", w, pid)
		}
	}
}
