package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mapagg/mapagg/internal/coordinator"
	"github.com/mapagg/mapagg/internal/harness/cluster"
	"github.com/mapagg/mapagg/internal/harness/devserver"
	"github.com/mapagg/mapagg/internal/harness/testenv"
	"github.com/mapagg/mapagg/internal/harness/testworker/badjobs"
	"github.com/mapagg/mapagg/jobs"
)

// buildTestWorker compiles the test worker (the built-ins and the bad job types) with the race
// detector.
func buildTestWorker(t *testing.T) string {
	t.Helper()
	root, err := devserver.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), "testworker")
	cmd := exec.Command("go", "build", "-race", "-o", out, "./internal/harness/testworker")
	cmd.Dir = root
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build testworker: %v\n%s", err, b)
	}
	return out
}

// On a 3-worker cluster of the test worker, each bad job fails within seconds, alone: its error
// names the panic and the user's frame (or the permanent error and its shard), a primes job
// beside them is exact, and the leader and its epoch never change.
func TestBadJobs_FailAloneLeaderStays(t *testing.T) {
	bin := buildTestWorker(t)
	c := startWith(t, bin, cluster.Options{Workers: 3, Concurrency: 2, LeaseDuration: lease})
	c.Client.Registry = badjobs.Registry()
	l := leader(t, c)
	ctx := context.Background()

	const primes, primesBelow2M = `{"from":0,"to":2000000,"shards":40}`, 148933
	good, err := c.Client.Submit(ctx, "primes", json.RawMessage(primes))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string][]string{
		"bad-merge":  {"bad-merge merge: panic: assignment to entry in nil map", "badjobs.mergeCounts (badjobs/badjobs.go:"},
		"bad-split":  {"bad-split split: panic: runtime error: index out of range [4] with length 4", "badjobs.BadSplit.Split (badjobs/badjobs.go:"},
		"bad-check":  {"bad-check merge: panic: runtime error: invalid memory address or nil pointer dereference", "badjobs.BadCheck.Check (badjobs/badjobs.go:"},
		"bad-result": {"bad-result result: panic: bad-result: cannot summarize 3 keys", "badjobs.BadResult.Result (badjobs/badjobs.go:"},
		"permanent":  {"shard 1 of job", "failed permanently (attempt 1, not retried): parse record 1: unexpected byte 0xff"},
	}
	submitted := time.Now()
	ids := map[string]string{}
	for _, typ := range badjobs.Types {
		if ids[typ], err = c.Client.Submit(ctx, typ, json.RawMessage(`{"shards":4}`)); err != nil {
			t.Fatal(err)
		}
	}
	for _, typ := range badjobs.Types {
		// Within seconds: the bound is the behaviour (a crash loop would take minutes).
		wctx, cancel := context.WithTimeout(ctx, 15*time.Second)
		st, err := c.Client.Wait(wctx, ids[typ], 50*time.Millisecond, nil)
		cancel()
		if err != nil {
			t.Fatalf("%s: %v", typ, err)
		}
		if st.State != jobs.StateFailed {
			t.Errorf("%s: %s, want failed", typ, st.State)
			continue
		}
		for _, w := range want[typ] {
			if !strings.Contains(st.Error, w) {
				t.Errorf("%s: error %q, want it to hold %q", typ, st.Error, w)
			}
		}
		t.Logf("%s failed %v after the submits: %s", typ, time.Since(submitted).Round(time.Millisecond), st.Error)
	}
	st := finish(t, c, good)
	if got := primesCount(t, st); got != primesBelow2M {
		t.Fatalf("primes below 2·10^6 = %d, want %d", got, primesBelow2M)
	}
	now := leader(t, c)
	if now.ID != l.ID || now.Epoch != l.Epoch {
		t.Fatalf("the leader changed: %s (epoch %d) → %s (epoch %d)", l.ID, l.Epoch, now.ID, now.Epoch)
	}
	for _, ev := range c.Events() {
		if ev.Kind == cluster.Elected && ev.Epoch != l.Epoch {
			t.Errorf("another election: %+v", ev)
		}
	}
	// The leader reported each failure of job code as an event, and counted it by type and call.
	for _, typ := range badjobs.Types[:4] {
		found := false
		for _, ev := range c.Events() {
			found = found || ev.Kind == string(coordinator.EventJobCodeFailed) && ev.Job == ids[typ] && strings.Contains(ev.Err, "panic")
		}
		if !found {
			t.Errorf("no %s event for the %s job", coordinator.EventJobCodeFailed, typ)
		}
	}
	body := metrics(t, c, l.ID)
	for _, w := range []string{`mapagg_job_code_failures_total{call="merge",type="bad-merge"} 1`, `mapagg_job_code_failures_total{call="split",type="bad-split"} 1`,
		`mapagg_job_code_failures_total{call="merge",type="bad-check"} 1`, `mapagg_job_code_failures_total{call="result",type="bad-result"} 1`} {
		if !strings.Contains(body, w) {
			t.Errorf("the leader's /metrics lacks %q", w)
		}
	}
}

func startWith(t *testing.T, bin string, opts cluster.Options) *cluster.Cluster {
	t.Helper()
	saved := workerBin
	workerBin = bin
	defer func() { workerBin = saved }()
	return start(t, opts)
}

func metrics(t *testing.T, c *cluster.Cluster, id string) string {
	t.Helper()
	var body string
	testenv.Eventually(t, 10*time.Second, 50*time.Millisecond, func() bool {
		addr := c.HTTPAddr(id)
		if addr == "" {
			return false
		}
		resp, err := http.Get(fmt.Sprintf("http://%s/metrics", addr))
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		body = string(b)
		return err == nil && resp.StatusCode == 200
	}, "no /metrics from %s", id)
	return body
}
