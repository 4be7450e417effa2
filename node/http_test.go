package node

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mapagg/mapagg/builtin"
	"github.com/mapagg/mapagg/client"
	"github.com/mapagg/mapagg/internal/harness/devserver"
	"github.com/mapagg/mapagg/internal/harness/testenv"
	"github.com/mapagg/mapagg/internal/queue"
	"github.com/mapagg/mapagg/jobs"
	"github.com/mapagg/mapagg/store"
)

func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

func get(url string) (int, string) {
	c := http.Client{Timeout: 5 * time.Second}
	resp, err := c.Get(url)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestObservability runs one worker in process against Azurite and a real NATS server and checks
// what a person or Prometheus sees over HTTP and `worker workers`/`worker health`; then NATS goes
// away and /readyz must say so.
func TestObservability(t *testing.T) {
	conn := testenv.Azurite(t)
	ns, err := devserver.StartNATS(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	natsDown := false
	defer func() {
		if !natsDown {
			ns.Shutdown()
		}
	}()
	name := testenv.Name(t, "obs")
	prefix := strings.ReplaceAll(name, "-", "")
	addr := freeAddr(t)
	base := "http://" + addr
	args := []string{"run", "--azure-connection-string", conn, "--nats-url", ns.ClientURL(), "--jobs-container", name,
		"--queue", name, "--lease-container", name + "-l", "--stream-prefix", prefix, "--id", "obs-w1",
		"--concurrency", "2", "--http-addr", addr, "--log-level", "warn"}
	ctx, cancel := context.WithCancel(context.Background())
	var logs testenv.SyncBuffer
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		if code := stockNode().Run(ctx, args, io.Discard, &logs); code != 0 {
			t.Errorf("worker run exited %d:\n%s", code, logs.String())
		}
	}()
	defer func() { cancel(); wg.Wait() }()

	testenv.Eventually(t, 60*time.Second, 100*time.Millisecond, func() bool {
		code, body := get(base + "/metrics")
		return code == 200 && strings.Contains(body, "\nmapagg_leader 1\n")
	}, "the worker serves /metrics and reports itself leader")
	if code, body := get(base + "/healthz"); code != 200 {
		t.Fatalf("/healthz: %d %s", code, body)
	}
	testenv.Eventually(t, 10*time.Second, 100*time.Millisecond, func() bool { code, _ := get(base + "/readyz"); return code == 200 }, "/readyz 200")

	// A job runs; its merges, checkpoints and map steps show in the metrics.
	bc, err := store.NewClient(conn)
	if err != nil {
		t.Fatal(err)
	}
	q, err := queue.New(conn, name)
	if err != nil {
		t.Fatal(err)
	}
	cl := &client.Client{Store: store.New(bc, name), Queue: q, Registry: builtin.Registry()}
	id, err := cl.Submit(ctx, "pi", json.RawMessage(`{"samples":200000,"shards":8}`))
	if err != nil {
		t.Fatal(err)
	}
	wctx, wcancel := context.WithTimeout(ctx, 60*time.Second)
	st, err := cl.Wait(wctx, id, 100*time.Millisecond, nil)
	wcancel()
	if err != nil || st.State != jobs.StateSucceeded {
		t.Fatalf("job %s: %+v, %v", id, st, err)
	}
	_, metrics := get(base + "/metrics")
	for _, want := range []string{
		"mapagg_leader_epoch ", "mapagg_leader_terms_total 1", "mapagg_results_merged_total 8", "mapagg_shards_executed_total 8",
		`mapagg_map_duration_seconds_count{outcome="ok",type="pi"} 8`, "mapagg_checkpoint_size_bytes_count", "mapagg_checkpoint_write_duration_seconds_bucket",
		`mapagg_coordinator_events_total{kind="first_merge"} 1`, `mapagg_election_events_total{kind="elected"} 1`,
		"mapagg_lease_renew_failures_total 0", "mapagg_shards_in_flight 0", "mapagg_shards_queued 0", `mapagg_build_info{version=`, "go_goroutines",
	} {
		if !strings.Contains(metrics, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}

	// The JSON API: the leader, the member list, the job and this worker's events.
	_, body := get(base + "/api/cluster")
	var cv struct {
		Leader  struct{ ID string }
		Members []struct{ ID string }
		Events  []struct{ Kind string }
	}
	if err := json.Unmarshal([]byte(body), &cv); err != nil {
		t.Fatalf("/api/cluster: %v: %s", err, body)
	}
	if cv.Leader.ID != "obs-w1" || len(cv.Members) != 1 || cv.Members[0].ID != "obs-w1" {
		t.Errorf("/api/cluster: leader %q, members %+v; want obs-w1 leading alone", cv.Leader.ID, cv.Members)
	}
	_, body = get(base + "/api/jobs")
	if !strings.Contains(body, `"id":"`+id+`"`) || !strings.Contains(body, `"state":"succeeded"`) {
		t.Errorf("/api/jobs lacks the succeeded job %s: %.400s", id, body)
	}
	_, body = get(base + "/api/events")
	for _, k := range []string{`"kind":"elected"`, `"kind":"term_started"`, `"kind":"job_planned"`, `"kind":"first_merge"`, `"kind":"job_finished"`} {
		if !strings.Contains(body, k) {
			t.Errorf("/api/events lacks %s: %.600s", k, body)
		}
	}
	if code, body := get(base + "/api/events?since=x"); code != 400 || !strings.Contains(body, "whole number") {
		t.Errorf("/api/events?since=x: %d %s", code, body)
	}
	if code, _ := get(base + "/"); code != 200 {
		t.Errorf("dashboard: %d", code)
	}
	if code, _ := get(base + "/debug/pprof/"); code == 200 {
		t.Error("/debug/pprof/ served without --pprof")
	}
	resp, err := http.Post(base+"/api/jobs/"+id+"/cancel", "", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden {
		t.Errorf("cancel from a read-only dashboard: %d, want 403", resp.StatusCode)
	}

	// worker workers and worker health.
	var out, errOut bytes.Buffer
	if code := stockNode().Run(ctx, []string{"workers", "--json", "--nats-url", ns.ClientURL(), "--stream-prefix", prefix}, &out, &errOut); code != 0 {
		t.Fatalf("worker workers: %d %s", code, errOut.String())
	}
	var ww struct {
		Leader  struct{ ID string }
		Workers []struct {
			ID     string
			Leader bool
		}
	}
	if err := json.Unmarshal(out.Bytes(), &ww); err != nil || ww.Leader.ID != "obs-w1" || len(ww.Workers) != 1 || !ww.Workers[0].Leader {
		t.Errorf("worker workers --json: %v\n%s", err, out.String())
	}
	out.Reset()
	if code := stockNode().Run(ctx, []string{"workers", "--nats-url", ns.ClientURL(), "--stream-prefix", prefix}, &out, &errOut); code != 0 ||
		!strings.Contains(out.String(), "leader: obs-w1 (epoch") || !strings.Contains(out.String(), fmt.Sprintf(" %d ", os.Getpid())) ||
		!strings.Contains(out.String(), addr) || !strings.Contains(out.String(), "HOST") {
		t.Errorf("worker workers: %d\n%s", code, out.String())
	}
	out.Reset()
	if code := stockNode().Run(ctx, []string{"health", "--http-addr", addr}, &out, &errOut); code != 0 {
		t.Errorf("worker health: %d %s", code, errOut.String())
	}
	errOut.Reset()
	if code := stockNode().Run(ctx, []string{"health", "--http-addr", "127.0.0.1:0"}, &out, &errOut); code != 2 || !strings.Contains(errOut.String(), "with its port") {
		t.Errorf("worker health with port 0: %d %s", code, errOut.String())
	}

	// NATS goes away: /readyz turns 503 within seconds and names it; worker health fails.
	ns.Shutdown()
	natsDown = true
	down := time.Now()
	testenv.Eventually(t, 10*time.Second, 100*time.Millisecond, func() bool {
		code, body := get(base + "/readyz")
		return code == 503 && strings.Contains(body, `"name":"nats","ok":false`)
	}, "/readyz 503 naming NATS after NATS stopped")
	t.Logf("/readyz turned 503 %v after NATS stopped", time.Since(down).Round(time.Millisecond))
	errOut.Reset()
	if code := stockNode().Run(ctx, []string{"health", "--http-addr", addr}, &out, &errOut); code != 1 || !strings.Contains(errOut.String(), "not ready (503") {
		t.Errorf("worker health with NATS down: %d %s", code, errOut.String())
	}
}

// TestHealthWhileStarting: while a worker waits for NATS, /healthz is 200 and /readyz 503 says
// why; when the startup timeout passes, the worker exits with an error.
func TestHealthWhileStarting(t *testing.T) {
	conn := testenv.Azurite(t)
	deadNATS := "nats://" + freeAddr(t) // nothing listens there
	addr := freeAddr(t)
	name := testenv.Name(t, "obs")
	done := make(chan int, 1)
	var logs testenv.SyncBuffer
	go func() {
		done <- stockNode().Run(context.Background(), []string{"run", "--azure-connection-string", conn, "--nats-url", deadNATS,
			"--jobs-container", name, "--queue", name, "--id", "starting", "--http-addr", addr, "--startup-timeout", "4s"}, io.Discard, &logs)
	}()
	testenv.Eventually(t, 10*time.Second, 50*time.Millisecond, func() bool { code, _ := get("http://" + addr + "/healthz"); return code == 200 }, "/healthz while starting")
	if code, body := get("http://" + addr + "/readyz"); code != 503 || !strings.Contains(body, "waiting for storage and NATS") {
		t.Errorf("/readyz while starting: %d %s", code, body)
	}
	select {
	case code := <-done:
		if code != 1 || !strings.Contains(logs.String(), "not reachable within") {
			t.Errorf("worker run exited %d:\n%s", code, logs.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatal("worker run did not give up after its startup timeout")
	}
	if code, _ := get("http://" + addr + "/healthz"); code != 0 {
		t.Errorf("the HTTP server outlived the worker: %d", code)
	}
}
