package node

import (
	"strings"
	"testing"

	"github.com/mapagg/mapagg/builtin"
)

// delete, retry and submit --after through the command line, on a running worker.
func TestCommands_DeleteRetryAfter(t *testing.T) {
	c := newCluster(t)
	c.startWorker(t, builtin.Registry(), "w1")
	n := c.node(t, builtin.Registry())
	code, out, stderr := run(t, n, "submit", "--type", "sleep", "--params", `{"shards":2,"fail_always":[0]}`, "--wait", "--quiet", "--poll", "50ms")
	if code != 1 {
		t.Fatalf("failing job: exit %d\n%s%s", code, out, stderr)
	}
	failed := strings.TrimSpace(strings.SplitN(out, "\n", 2)[0])
	code, out, stderr = run(t, n, "submit", "--type", "sleep", "--params", `{"shards":1}`, "--after", failed, "--wait", "--poll", "50ms")
	if code != 1 || !strings.Contains(stderr, "job "+failed+" it runs after failed") {
		t.Fatalf("after a failed job: exit %d\n%s%s", code, out, stderr)
	}
	code, out, stderr = run(t, n, "retry", failed)
	retried := strings.TrimSpace(out)
	if code != 0 || retried == "" || retried == failed {
		t.Fatalf("retry: exit %d %q %s", code, out, stderr)
	}
	if code, out, _ := run(t, n, "status", retried, "--json"); code != 0 || !strings.Contains(out, `"retry_of": "`+failed+`"`) {
		t.Fatalf("status of a retry: %d\n%s", code, out)
	}
	code, out, _ = run(t, n, "submit", "--type", "sleep", "--params", `{"shards":1}`, "--wait", "--quiet", "--poll", "50ms")
	ok := strings.TrimSpace(strings.SplitN(out, "\n", 2)[0])
	if code != 0 {
		t.Fatalf("submit: %d %s", code, out)
	}
	if code, _, stderr := run(t, n, "retry", ok); code != 1 || !strings.Contains(stderr, "only a failed or cancelled job can be retried") {
		t.Fatalf("retry of a succeeded job: %d %s", code, stderr)
	}
	if code, out, stderr := run(t, n, "delete", ok); code != 0 || out != "job "+ok+" deleted\n" {
		t.Fatalf("delete: %d %q %s", code, out, stderr)
	}
	if code, _, stderr := run(t, n, "status", ok); code != 1 || !strings.Contains(stderr, "no such job") {
		t.Fatalf("status of a deleted job: %d %s", code, stderr)
	}
	if code, _, stderr := run(t, n, "delete"); code != 2 || !strings.Contains(stderr, "expected one job id") {
		t.Fatalf("delete without a job: %d %s", code, stderr)
	}
}
