package node

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/mapagg/mapagg/builtin"
	"github.com/mapagg/mapagg/internal/harness/testenv"
)

// `worker status JOB` of a running job says what it waits for: its slowest task and the worker
// running it (asked over NATS); --json has the same under "why". An ended job waits for nothing.
func TestStatus_WhyRunningJobWaits(t *testing.T) {
	c := newCluster(t)
	reg := builtin.Registry()
	c.startWorker(t, reg, "wwhy")
	cli := c.node(t, reg)
	code, id, errOut := run(t, cli, "submit", "--type", "sleep", "--params", `{"shards":1,"duration":"2m"}`, "--quiet")
	if code != 0 {
		t.Fatalf("submit: %d %s %s", code, id, errOut)
	}
	id = strings.TrimSpace(id)
	var out string
	testenv.Eventually(t, 30*time.Second, 200*time.Millisecond, func() bool {
		_, out, _ = run(t, cli, "status", id)
		return strings.Contains(out, "slowest task: shard 0 attempt 1 on wwhy, running")
	}, "status %s names the slowest task and its worker (last:\n%s)", id, lazyString(func() string { return out }))
	if !strings.Contains(out, "waits for:\n  - ") {
		t.Errorf("status %s:\n%s", id, out)
	}
	code, js, errOut := run(t, cli, "status", id, "--json")
	var got struct {
		ID  string
		Why struct {
			Reasons []struct{ Kind, Text string }
			Tasks   []struct{ Worker string }
		}
	}
	if err := json.Unmarshal([]byte(js), &got); code != 0 || err != nil || got.ID != id || len(got.Why.Tasks) != 1 ||
		got.Why.Tasks[0].Worker != "wwhy" || len(got.Why.Reasons) == 0 {
		t.Fatalf("status --json: %d %v %s %s", code, err, js, errOut)
	}
	if code, _, errOut := run(t, cli, "cancel", id); code != 0 {
		t.Fatalf("cancel: %d %s", code, errOut)
	}
	testenv.Eventually(t, 30*time.Second, 200*time.Millisecond, func() bool {
		_, out, _ = run(t, cli, "status", id, "--json")
		return strings.Contains(out, `"state": "cancelled"`)
	}, "the job cancelled")
	if strings.Contains(out, `"why"`) {
		t.Errorf("an ended job has a why: %s", out)
	}
}

type lazyString func() string

func (l lazyString) String() string { return l() }
