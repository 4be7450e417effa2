package observe

import (
	"errors"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/mapagg/mapagg/internal/coordinator"
)

func TestMetrics_JobCodeFailuresByTypeAndCall(t *testing.T) {
	m := NewMetrics("test", Sources{})
	failed := &coordinator.UserCodeError{Type: "bad-merge", Call: "merge", Panic: "assignment to entry in nil map", Err: errors.New("x")}
	m.CoordinatorEvent(coordinator.Event{Kind: coordinator.EventJobCodeFailed, Job: "j1", Err: failed})
	m.CoordinatorEvent(coordinator.Event{Kind: coordinator.EventJobCodeFailed, Job: "j2", Err: failed})
	want := `
# HELP mapagg_job_code_failures_total Calls of job code on the leader that panicked or failed, failing their job, by job type and call (split, merge, result, ...).
# TYPE mapagg_job_code_failures_total counter
mapagg_job_code_failures_total{call="merge",type="bad-merge"} 2
`
	if err := testutil.GatherAndCompare(m.Registry, strings.NewReader(want), "mapagg_job_code_failures_total"); err != nil {
		t.Error(err)
	}
	if n := testutil.ToFloat64(m.coordinatorEvents.WithLabelValues(string(coordinator.EventJobCodeFailed))); n != 2 {
		t.Errorf("job_code_failed events: %v", n)
	}
}
