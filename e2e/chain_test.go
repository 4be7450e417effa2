package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mapagg/mapagg/internal/harness/cluster"
	"github.com/mapagg/mapagg/internal/harness/rig"
)

// cliSubmit submits with the stock CLI: `worker submit --type T --params P [--after ID]`.
func cliSubmit(c *cluster.Cluster) rig.SubmitFunc {
	return func(ctx context.Context, typ string, params json.RawMessage, after string) (string, error) {
		args := []string{"submit", "--type", typ, "--params", string(params)}
		if after != "" {
			args = append(args, "--after", after)
		}
		cmd := exec.CommandContext(ctx, workerBin, args...)
		cmd.Env = c.WorkerEnv("cli")
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		if err := cmd.Run(); err != nil {
			return "", fmt.Errorf("worker %s: %v: %s", strings.Join(args, " "), err, stderr.String())
		}
		return strings.TrimSpace(stdout.String()), nil
	}
}

// The chain: three built-in jobs submitted from the CLI with --after, each reading the
// previous one's output (wordcount → regroup by value → regroup into one total), with the
// leader SIGKILLed while each runs. The histogram and the total equal the corpus counted here.
func TestChain_ThreeJobsThroughLeaderKills(t *testing.T) {
	c := start(t, cluster.Options{Workers: 3, Concurrency: 1, LeaseDuration: lease, MapDelay: 150 * time.Millisecond})
	ctx := context.Background()
	leader(t, c)
	if err := rig.WriteKeyedCorpus(ctx, c, 6, 3000); err != nil {
		t.Fatal(err)
	}
	r, err := rig.RunChain(ctx, c, rig.ChainSteps(4, 2<<10), cliSubmit(c), true, time.Minute)
	for _, n := range r.Notes {
		t.Log(n)
	}
	if err != nil {
		t.Fatal(err)
	}
	total, err := rig.CheckChain(ctx, c, r.IDs, 3*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("chain %v: %d words, exact", r.IDs, total)
}

// cliAddChain adds the schedule with the stock CLI: `worker schedule add NAME --chain FILE`.
func cliAddChain(t *testing.T, c *cluster.Cluster) rig.AddChainFunc {
	return func(ctx context.Context, name string, every time.Duration, steps []rig.ChainStep) error {
		var list []map[string]any
		for _, s := range steps {
			list = append(list, map[string]any{"type": s.Type, "params": s.Params("$prev")})
		}
		file := filepath.Join(t.TempDir(), "chain.json")
		data, _ := json.Marshal(list)
		if err := os.WriteFile(file, data, 0o600); err != nil {
			return err
		}
		cmd := exec.CommandContext(ctx, workerBin, "schedule", "add", name, "--every", every.String(), "--chain", file, "--overlap", "allow", "--catch-up", "1m")
		cmd.Env = c.WorkerEnv("cli")
		out, err := cmd.CombinedOutput()
		if err != nil || !strings.Contains(string(out), "a chain of 3 jobs (wordcount→regroup→regroup)") {
			return fmt.Errorf("schedule add: %v: %s", err, out)
		}
		return nil
	}
}

// A schedule that makes a chain per tick (`schedule add --chain FILE`), with the leader
// SIGKILLed while a chain's second, then third step runs: every tick makes its three jobs once
// (ids from the tick's), none missing, each after and over the previous one, every chain exact.
func TestChain_SchedulePerTickThroughLeaderKills(t *testing.T) {
	c := start(t, cluster.Options{Workers: 3, Concurrency: 1, LeaseDuration: lease, MapDelay: 100 * time.Millisecond})
	ctx := context.Background()
	leader(t, c)
	if err := rig.WriteKeyedCorpus(ctx, c, 3, 1000); err != nil {
		t.Fatal(err)
	}
	r, err := rig.RunScheduleChain(ctx, c, "nightly", rig.ChainSteps(4, 2<<10), cliAddChain(t, c), 8*time.Second, 4, 3*time.Minute)
	for _, n := range r.Notes {
		t.Log(n)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%d ticks, each a chain of 3 jobs, totals %v: exact", r.Ticks, r.Totals)
}
