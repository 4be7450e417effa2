package e2e

import (
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/mapagg/mapagg/internal/harness/cluster"
	"github.com/mapagg/mapagg/internal/harness/rig"
	"github.com/mapagg/mapagg/internal/harness/testenv"
	"github.com/mapagg/mapagg/internal/telemetry"
	"github.com/mapagg/mapagg/internal/telemetry/telemetrytest"
	"github.com/mapagg/mapagg/jobs"
)

// TestTraces_KeyedJobSpansReachCollector runs a keyed job, submitted from the CLI, on a real
// 2-worker cluster whose OTLP endpoint is a local collector: the job's spans (submit, intake,
// plan, map, reduce, merge, checkpoint, finish and the job span) arrive in one trace, the
// tasks' spans from the workers that ran them, and no span carries a secret.
func TestTraces_KeyedJobSpansReachCollector(t *testing.T) {
	col, err := telemetrytest.Start()
	if err != nil {
		t.Fatal(err)
	}
	defer col.Close()
	otel := []string{telemetry.EnvEndpoint + "=" + col.URL, "OTEL_BSP_SCHEDULE_DELAY=100"}
	c := start(t, cluster.Options{Workers: 2, LeaseDuration: lease, Concurrency: 2, Env: otel})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	leader(t, c)
	if err := rig.WriteKeyedCorpus(ctx, c, 4, 2000); err != nil {
		t.Fatal(err)
	}
	cmd := exec.CommandContext(ctx, workerBin, "submit", "--type", "wordcount", "--params", string(rig.KeyedWordcountParams(2, 4<<10)))
	cmd.Env = append(c.WorkerEnv("cli"), otel...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("worker submit: %v: %s", err, stderr.String())
	}
	id := strings.TrimSpace(stdout.String())
	st, err := c.Client.Wait(ctx, id, 100*time.Millisecond, nil)
	if err != nil || st.State != jobs.StateSucceeded {
		t.Fatalf("job %s: %+v, %v", id, st, err)
	}

	trace := telemetry.TraceID(id)
	want := []string{"submit", "intake", "plan", "map", "reduce", "merge", "checkpoint", "finish", "job"}
	var got map[string][]telemetrytest.Span
	testenv.Eventually(t, 30*time.Second, 200*time.Millisecond, func() bool {
		got = map[string][]telemetrytest.Span{}
		for _, s := range col.Spans() {
			if s.Attrs["mapagg.job"] == id {
				got[s.Name] = append(got[s.Name], s)
			}
		}
		for _, n := range want {
			if len(got[n]) == 0 {
				return false
			}
		}
		return true
	}, "every span of job %s at the collector (have %v)", id, lazy(func() string { return names(got) }))
	workers := map[string]bool{}
	for _, m := range c.Members() {
		workers[m.ID] = true
	}
	jobSpan := got["job"][0]
	for name, ss := range got {
		for _, s := range ss {
			if s.TraceID != trace {
				t.Errorf("%s span in trace %s, want the job's %s", name, s.TraceID, trace)
			}
			if name != "job" && s.ParentID != jobSpan.SpanID {
				t.Errorf("%s span's parent %s, want the job span %s", name, s.ParentID, jobSpan.SpanID)
			}
			for k, v := range s.Attrs {
				if strings.Contains(v, "AccountKey") || strings.Contains(v, "SharedAccessSignature") {
					t.Errorf("%s span's %s carries a secret: %q", name, k, v)
				}
			}
		}
	}
	for _, name := range []string{"map", "reduce"} {
		for _, s := range got[name] {
			if !workers[s.Instance] || s.Attrs["mapagg.worker"] != s.Instance {
				t.Errorf("%s span from %q (worker attribute %q), not a worker of the cluster", name, s.Instance, s.Attrs["mapagg.worker"])
			}
		}
	}
	if s := got["submit"][0]; s.Service != "mapagg-cli" {
		t.Errorf("submit span from service %q, want the CLI's", s.Service)
	}
	t.Logf("job %s: trace %s with %s", id, trace, names(got))
}

func names(m map[string][]telemetrytest.Span) string {
	var out []string
	for n, ss := range m {
		out = append(out, fmt.Sprintf("%s×%d", n, len(ss)))
	}
	sort.Strings(out)
	return strings.Join(out, " ")
}
