package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
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
// A schedule making such a chain per tick through leader kills is `make chaos`'s
// schedule-chain-leader-kill (a minute, repeating this test per tick); `schedule add --chain` is
// tested in node.
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
