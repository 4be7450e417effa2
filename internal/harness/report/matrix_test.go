package report

import (
	"bytes"
	"strings"
	"testing"
)

// TestReport_FailuresAreNotPaperedOver: every verdict but ok fails the report, and the table
// shows it.
func TestReport_FailuresAreNotPaperedOver(t *testing.T) {
	lost := 1.5
	rep := &Matrix{Results: []FaultResult{
		{Fault: "leader-kill", Verdict: VerdictOK, Exact: true, TimeLostS: &lost},
		{Fault: "forged-result", Verdict: "WRONG", State: "succeeded", Problem: "index_sum off"},
	}}
	rep.Tally()
	if rep.OK() || rep.Failed != 1 {
		t.Fatalf("ok=%v failed=%d, want a failed report", rep.OK(), rep.Failed)
	}
	var md bytes.Buffer
	rep.WriteMarkdown(&md)
	for _, want := range []string{"| leader-kill | ok | yes | +1.5 s | 0 | nothing |", "| forged-result | **WRONG** | **no** (succeeded) |", "1 of 2 faults failed"} {
		if !strings.Contains(md.String(), want) {
			t.Errorf("markdown lacks %q:\n%s", want, md.String())
		}
	}
	rep = &Matrix{Results: []FaultResult{{Fault: "x", Verdict: VerdictOK, Exact: true}}, LeftRunning: []string{"worker w1 (pid 1) still running"}}
	if rep.OK() {
		t.Error("a report with a process left running is ok")
	}
}
