package deploy_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/mapagg/mapagg/client"
)

// The production topology on 127.0.0.1: a 3-node NATS cluster, R3 streams, three workers each
// given a different node, the NATS user with the documented permissions. The node the leader is
// connected to is stopped mid-job. The job keeps progressing while it is down: the leader
// reconnected to another node. The node is restarted, and the result is exact, from the same
// leader and lease term. The time lost against an identical job without the fault is logged.
func TestNATSCluster_R3SurvivesTheLeadersNodeDyingMidJob(t *testing.T) {
	nc := startNATS(t, 3, []*server.User{{Username: "worker", Password: workerPassword, Permissions: workerPerms}})
	s := newStorage(t)
	pw := passwordFile(t, workerPassword)
	args := func(node int) []string {
		return append(s.args(), "--nats-url", nc.URL(node), "--nats-user", "worker", "--nats-password-file", pw,
			"--stream-replicas", "3", "--concurrency", "2", "--map-delay", "100ms", "--shard-timeout", "5s",
			"--acquire-interval", "200ms", "--startup-timeout", "60s")
	}
	events := watchEvents(t, nc.URL(1), "worker", workerPassword)
	leader := startWorker(t, "w0", args(0)...)
	testenv_eventually(t, 30*time.Second, func() bool { return events.count("w0", "elected") == 1 }, "w0 not elected")
	startWorker(t, "w1", args(1)...)
	startWorker(t, "w2", args(2)...)
	cl := jobClient(t, s)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	run := func(fault func(id string)) (time.Duration, *client.Status) {
		start := time.Now()
		id, err := cl.Submit(ctx, "primes", json.RawMessage(clusterPrimes))
		if err != nil {
			t.Fatal(err)
		}
		if fault != nil {
			fault(id)
		}
		st, err := cl.Wait(ctx, id, 50*time.Millisecond, nil)
		if err != nil {
			t.Fatalf("wait: %v (%+v)", err, st)
		}
		if got := primesCount(t, cl, id); got != primesWant {
			t.Fatalf("count %d, want %d (status %+v)", got, primesWant, st)
		}
		return time.Since(start), st
	}
	baseline, _ := run(nil)
	checkR3(t, nc.URL(1))

	var down time.Duration
	faulted, st := run(func(id string) {
		done := func() int {
			st, err := cl.Status(ctx, id)
			if err != nil {
				return 0
			}
			return st.ShardsDone
		}
		testenv_eventually(t, time.Minute, func() bool { return done() >= 30 }, "job did not reach 30 shards")
		killed := time.Now()
		nc.StopNode(0)
		at := done()
		// Merges continue while node 0 is down: the leader reconnected elsewhere. (Stopping the
		// node can take as long as the rest of the job: then progress is the job's end.)
		testenv_eventually(t, time.Minute, func() bool { return done() >= min(at+20, 120) }, "no progress while node 0 is down")
		time.Sleep(time.Until(killed.Add(2 * time.Second))) // down at least 2s
		if err := nc.Start(0); err != nil {
			t.Error(err)
		}
		down = time.Since(killed)
	})
	if st.PlanEpoch != st.Epoch {
		t.Errorf("planned in epoch %d, finished in %d: the leader lost its lease", st.PlanEpoch, st.Epoch)
	}
	if n := events.count("w0", "elected"); n != 1 {
		t.Errorf("w0 elected %d times, want once:\n%s", n, leader.log)
	}
	for _, kind := range []string{"lost", "stepped_down"} {
		if n := events.count("w0", kind); n != 0 {
			t.Errorf("w0 reported %q:\n%s", kind, leader.log)
		}
	}
	t.Logf("120-shard primes job: %v without a fault, %v with the leader's NATS node down for %v: %v lost; %d duplicate results dropped",
		baseline.Round(time.Millisecond), faulted.Round(time.Millisecond), down.Round(time.Millisecond),
		(faulted - baseline).Round(time.Millisecond), st.Duplicates)
}

// clusterPrimes is primesParams in 120 shards (about 2s of map delay on 6 slots).
const clusterPrimes = `{"from":0,"to":1000000,"shards":120}`

// checkR3 checks that every stream of the system has 3 replicas, all current.
func checkR3(t *testing.T, url string) {
	t.Helper()
	conn, err := nats.Connect(url, nats.UserInfo("worker", workerPassword))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	js, err := jetstream.New(conn)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"MAPAGG_SHARDS", "MAPAGG_RESULTS", "MAPAGG_DEAD"} {
		info, err := js.Stream(context.Background(), name)
		if err != nil {
			t.Fatalf("stream %s: %v", name, err)
		}
		ci := info.CachedInfo()
		if ci.Config.Replicas != 3 || ci.Cluster == nil || len(ci.Cluster.Replicas) != 2 {
			t.Fatalf("stream %s: replicas %d, cluster %+v", name, ci.Config.Replicas, ci.Cluster)
		}
	}
}

func testenv_eventually(t *testing.T, within time.Duration, cond func() bool, msg string) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal(msg)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
