package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/mapagg/mapagg/client"
	"github.com/mapagg/mapagg/internal/harness/cluster"
	"github.com/mapagg/mapagg/internal/harness/rig"
	"github.com/mapagg/mapagg/internal/harness/testenv"
	"github.com/mapagg/mapagg/jobs"
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

// A schedule that makes a chain per tick (`schedule add --chain FILE`), with the leader
// SIGKILLed twice while a chain runs: every tick makes its three jobs once (ids from the tick's),
// each after and over the previous one, and every chain's histogram and total are exact.
func TestChain_SchedulePerTickThroughLeaderKills(t *testing.T) {
	c := start(t, cluster.Options{Workers: 3, Concurrency: 1, LeaseDuration: lease, MapDelay: 100 * time.Millisecond})
	ctx := context.Background()
	leader(t, c)
	if err := rig.WriteKeyedCorpus(ctx, c, 3, 1000); err != nil {
		t.Fatal(err)
	}
	var steps []map[string]json.RawMessage
	for _, s := range rig.ChainSteps(4, 2<<10) {
		steps = append(steps, map[string]json.RawMessage{"type": json.RawMessage(fmt.Sprintf("%q", s.Type)), "params": s.Params("$prev")})
	}
	file := filepath.Join(t.TempDir(), "chain.json")
	data, _ := json.Marshal(steps)
	if err := os.WriteFile(file, data, 0o600); err != nil {
		t.Fatal(err)
	}
	const every = 8 * time.Second
	cmd := exec.Command(workerBin, "schedule", "add", "nightly", "--every", every.String(), "--chain", file, "--overlap", "allow", "--catch-up", "1m")
	cmd.Env = c.WorkerEnv("cli")
	if out, err := cmd.CombinedOutput(); err != nil || !strings.Contains(string(out), "a chain of 3 jobs (wordcount→regroup→regroup)") {
		t.Fatalf("schedule add: %v\n%s", err, out)
	}
	begin := time.Now()
	// Kill the leader while a chain's second, then third step runs.
	for _, step := range []string{"-2", "-3"} {
		var running string
		testenv.Eventually(t, time.Minute, 20*time.Millisecond, func() bool {
			page, err := c.Client.Query(ctx, client.Filter{State: jobs.StateRunning, Limit: 50})
			if err != nil {
				return false
			}
			for _, st := range page.Jobs {
				if st.Schedule == "nightly" && strings.HasSuffix(st.ID, step) {
					running = st.ID
					return true
				}
			}
			return false
		}, "no chain step %s running", step)
		k, err := rig.KillLeader(ctx, c, syscall.SIGKILL, true, nil)
		if err != nil {
			t.Fatal(err)
		}
		ev, err := rig.WaitElected(ctx, c, k.Epoch, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%s running: killed leader %s (epoch %d); %s elected %.2f s later", running, k.Worker, k.Epoch, ev.Worker, ev.Time.Sub(k.At).Seconds())
	}
	time.Sleep(time.Until(begin.Add(4 * every)))
	if err := c.Client.PauseSchedule(ctx, "nightly"); err != nil {
		t.Fatal(err)
	}
	time.Sleep(3 * time.Second) // a tick being fired as it was paused lands

	byTick, err := rig.TickJobs(ctx, c, "nightly")
	if err != nil {
		t.Fatal(err)
	}
	ticks := slices.SortedFunc(maps.Keys(byTick), time.Time.Compare)
	if len(ticks) < 3 {
		t.Fatalf("%d ticks made jobs, want at least 3", len(ticks))
	}
	for i, tk := range ticks {
		if i > 0 && tk.Sub(ticks[i-1]) != every {
			t.Errorf("ticks %v and %v: a tick is missing", ticks[i-1], tk)
		}
		ids := byTick[tk]
		slices.Sort(ids)
		if len(ids) != 3 || ids[1] != ids[0]+"-2" || ids[2] != ids[0]+"-3" {
			t.Fatalf("tick %v made %v, want its job and steps -2, -3 once each", tk, ids)
		}
		total, err := rig.CheckChain(ctx, c, ids, 3*time.Minute)
		if err != nil {
			t.Fatalf("tick %v: %v", tk, err)
		}
		t.Logf("tick %s: chain %v, %d words, exact", tk.Format(time.TimeOnly), ids, total)
	}
}
