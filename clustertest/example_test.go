package clustertest_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/mapagg/mapagg/clustertest"
	"github.com/mapagg/mapagg/jobs"
)

// A job's end-to-end test: three processes of the author's worker (here the stock one), a job
// submitted, its leader killed mid-job, the exact answer checked.
func Example() {
	var t *testing.T // the test's t
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	c := clustertest.Start(t, clustertest.Options{Main: "github.com/mapagg/mapagg/cmd/worker", MapDelay: 100 * time.Millisecond})
	id, err := c.Client().Submit(ctx, "primes", json.RawMessage(`{"from":0,"to":1000000,"shards":60}`))
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := c.KillLeader(ctx); err != nil {
		t.Fatal(err)
	}
	st, err := c.Wait(ctx, id)
	if err != nil || st.State != jobs.StateSucceeded {
		t.Fatalf("job %s: %v %v", id, st, err)
	}
	// The result must be the exact one: 78498 primes below 10⁶.
}
