package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mapagg/mapagg/internal/harness/rig"
)

// TestQuick is `chaos --quick` in CI: the cheap faults on real Azurite, nats-server and worker
// processes. They are a leader SIGKILL, forged and garbage results, garbage on the job queue and
// the shards stream, and a cancel during a failover. It asserts the verdicts: every job exact,
// nothing stuck, nothing left behind, every injected message dead-lettered.
func TestQuick(t *testing.T) {
	if testing.Short() {
		t.Skip("starts Azurite, nats-server and worker processes; about a minute")
	}
	cfg := QuickConfig()
	cfg.Dir = t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute) // a loaded 2-core box starts each cluster in up to 30 s
	defer cancel()
	var progress bytes.Buffer
	rep, err := Run(ctx, cfg, &progress)
	t.Logf("progress:\n%s", progress.String())
	if err != nil {
		t.Fatalf("run: %v", err)
	}
	if len(rep.Results) != len(quickFaults) {
		t.Fatalf("%d results, want %d", len(rep.Results), len(quickFaults))
	}
	for _, r := range rep.Results {
		if r.Verdict != verdictOK || !r.Exact || len(r.LeftBehind) > 0 {
			t.Errorf("%s: %s: %s (notes: %s)", r.Fault, r.Verdict, r.Problem, strings.Join(r.Notes, "; "))
		}
		if r.InjectedAt == "" || r.HealedS <= 0 {
			t.Errorf("%s: the fault was not injected: %+v", r.Fault, r)
		}
	}
	if len(rep.LeftRunning) > 0 {
		t.Errorf("left running: %v", rep.LeftRunning)
	}
	if !rep.OK() {
		t.Errorf("report not ok: %d failed, incomplete %q", rep.Failed, rep.Incomplete)
	}

	// The outputs render.
	var md bytes.Buffer
	rep.WriteMarkdown(&md)
	if !strings.Contains(md.String(), "| leader-kill | ok | yes |") {
		t.Errorf("markdown:\n%s", md.String())
	}
	path := filepath.Join(t.TempDir(), "r.json")
	if err := rig.WriteJSON(path, rep); err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	b, _ := os.ReadFile(path)
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatalf("json report: %v", err)
	}
	for _, k := range []string{"results", "references", "failed"} {
		if _, ok := m[k]; !ok {
			t.Errorf("json report lacks %q", k)
		}
	}
}

func TestConfig_Validate(t *testing.T) {
	c := DefaultConfig()
	c.Dir = "x"
	if err := c.Validate(); err != nil {
		t.Fatalf("default config: %v", err)
	}
	c.Faults = []string{"no-such-fault"}
	c.At = 2
	c.LeaseDuration = time.Second
	err := c.Validate()
	if err == nil {
		t.Fatal("bad config accepted")
	}
	for _, want := range []string{`fault "no-such-fault": unknown; the faults are leader-kill`, "at 2", "lease 1s"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q lacks %q", err, want)
		}
	}
}

func TestFlags(t *testing.T) {
	var stderr bytes.Buffer
	if code := realMain([]string{"--faults", "bogus"}, &bytes.Buffer{}, &stderr); code != rig.ExitUsage || !strings.Contains(stderr.String(), `fault "bogus": unknown`) {
		t.Errorf("exit %d, stderr %q", code, stderr.String())
	}
	stderr.Reset()
	if code := realMain([]string{"-h"}, &bytes.Buffer{}, &stderr); code != rig.ExitOK || !strings.Contains(stderr.String(), "forged-result") {
		t.Errorf("-h: exit %d, stderr %q", code, stderr.String())
	}
}
