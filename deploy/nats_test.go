package deploy_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/mapagg/mapagg/client"
	"github.com/mapagg/mapagg/internal/bus"
	"github.com/mapagg/mapagg/internal/harness/testenv"
)

const (
	primesParams = `{"from":0,"to":1000000,"shards":60}`
	primesWant   = 78498 // primes below 10^6, a public fact
)

// A worker whose NATS user has exactly the permissions docs/deploy.md lists runs jobs (as leader
// and as worker), and a submit-only client with its narrower list can send the submit hint. The
// worker reaches storage by its endpoint URLs and a SAS file (lease, jobs container, queue, Env),
// and its log shows neither the SAS nor the NATS password.
func TestNATSPermissions_WorkerWithDocumentedAllowListRunsAJob(t *testing.T) {
	nc := startNATS(t, 1, []*server.User{
		{Username: "worker", Password: workerPassword, Permissions: workerPerms},
		{Username: "submit", Password: "submit-pa55", Permissions: submitPerms},
	})
	s := newStorage(t)
	pw := passwordFile(t, workerPassword)
	w := startWorker(t, "w1", append(s.sasArgs(t), "--nats-url", nc.URL(0), "--nats-user", "worker", "--nats-password-file", pw,
		"--concurrency", "2")...)
	defer func() {
		w.stop()
		if strings.Contains(w.log.String(), workerPassword) || strings.Contains(w.log.String(), "sig=") {
			t.Errorf("the worker's log shows its NATS password or SAS:\n%s", w.log)
		}
		if !strings.Contains(w.log.String(), `"storage":"sas (blob http://127.0.0.1:`) {
			t.Errorf("the start log does not name the storage auth:\n%s", w.log)
		}
		if !strings.Contains(w.log.String(), `"nats_auth":"user worker"`) {
			t.Errorf("the start log does not name the NATS auth:\n%s", w.log)
		}
	}()

	cl := jobClient(t, s)
	// The submit-only user: its hint reaches the subject, and the server reports no violation.
	var (
		mu       sync.Mutex
		asyncErr error
	)
	hint, err := bus.Connect(nc.URL(0), "submitter", bus.Config{}, append(mustOpts(t, client.NATSAuth{User: "submit", Password: "submit-pa55"}),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) { mu.Lock(); asyncErr = err; mu.Unlock() }))...)
	if err != nil {
		t.Fatal(err)
	}
	defer hint.Close()
	cl.Notify = hint

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	id, err := cl.Submit(ctx, "primes", json.RawMessage(primesParams))
	if err != nil {
		t.Fatal(err)
	}
	if err := hint.Conn().Flush(); err != nil {
		t.Fatal(err)
	}
	st, err := cl.Wait(ctx, id, 50*time.Millisecond, nil)
	if err != nil {
		t.Fatalf("job with the documented worker permissions: %v (%+v)", err, st)
	}
	if got := primesCount(t, cl, id); got != primesWant {
		t.Fatalf("count %d, want %d", got, primesWant)
	}
	time.Sleep(200 * time.Millisecond) // a permission violation arrives asynchronously
	mu.Lock()
	if asyncErr != nil {
		t.Fatalf("submit-only client: %v", asyncErr)
	}
	mu.Unlock()

	// The server enforces the lists: the submit-only user cannot acknowledge a shard.
	if err := hint.Conn().Publish("$JS.ACK.x", nil); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 5*time.Second, 10*time.Millisecond, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return asyncErr != nil && strings.Contains(asyncErr.Error(), "Permissions Violation")
	}, "the submit-only user published outside its list without a violation")
}

func mustOpts(t *testing.T, a client.NATSAuth) []nats.Option {
	t.Helper()
	o, err := a.Options()
	if err != nil {
		t.Fatal(err)
	}
	return o
}

// Replicas above 1 on a server that is not clustered: refused at start with what to do, at once
// (not after the startup timeout).
func TestNATSReplicas_ThreeOnASingleServerRefusedAtStart(t *testing.T) {
	nc := startNATS(t, 1, nil)
	_, err := bus.Connect(nc.URL(0), "t", bus.Config{Replicas: 3})
	if !errors.Is(err, bus.ErrMisconfigured) || !bus.Permanent(err) {
		t.Fatalf("err %v, want ErrMisconfigured", err)
	}
	for _, w := range []string{"not clustered", "--stream-replicas 1"} {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("error %q lacks %q", err, w)
		}
	}
	s := newStorage(t)
	log := &testenv.SyncBuffer{}
	start := time.Now()
	code := runOnce(append(s.args(), "--nats-url", nc.URL(0), "--stream-replicas", "3", "--startup-timeout", "60s"), log)
	if code == 0 || !strings.Contains(log.String(), "not clustered") {
		t.Fatalf("exit %d:\n%s", code, log)
	}
	if time.Since(start) > 30*time.Second {
		t.Fatalf("refusal took %v: a settings error must not be retried until the startup timeout", time.Since(start))
	}
}
