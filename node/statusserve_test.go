package node

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mapagg/mapagg/builtin"
	"github.com/mapagg/mapagg/internal/harness/testenv"
)

// `worker status` is answered by a running worker over NATS, and by storage when no worker
// answers; both give the same jobs, and a deleted job leaves the worker's cache.
func TestStatus_ServedByWorker(t *testing.T) {
	c := newCluster(t)
	c.startWorker(t, builtin.Registry(), "st-w1")
	cli := c.node(t, builtin.Registry())
	var ids []string
	for range 3 {
		code, out, errOut := run(t, cli, "submit", "--quiet", "--wait", "--type", "primes", "--params", `{"from":0,"to":1000,"shards":2}`)
		if code != 0 {
			t.Fatalf("submit: %d %s", code, errOut)
		}
		ids = append(ids, strings.Fields(out)[0])
	}
	slices.Sort(ids) // listings are in id order; ids made in one second order by their random part
	read := func(args ...string) statusJSON {
		t.Helper()
		code, out, errOut := run(t, cli, append([]string{"status", "--json"}, args...)...)
		var st statusJSON
		if code != 0 || json.Unmarshal([]byte(out), &st) != nil {
			t.Fatalf("status --json %v: %d %s %s", args, code, out, errOut)
		}
		return st
	}
	var served statusJSON
	testenv.Eventually(t, 10*time.Second, 50*time.Millisecond, func() bool {
		served = read()
		return served.ServedBy == "st-w1" && len(served.Jobs) == 3
	}, "a worker answers status with the 3 jobs")
	if served.Leader == nil || served.Leader.ID != "st-w1" || served.Jobs[2].ID != ids[2] || served.Jobs[0].State != "succeeded" {
		t.Fatalf("served status: %+v", served)
	}
	// Twice: the second answer comes from the worker's cache of ended jobs, and equals storage's.
	again := read()
	direct := read("--nats-url", "nats://127.0.0.1:1")
	if direct.ServedBy != "" || len(direct.Jobs) != 3 || len(again.Jobs) != 3 {
		t.Fatalf("direct read: %+v; again %+v", direct, again)
	}
	for i := range direct.Jobs {
		a, b, d := *again.Jobs[i], *served.Jobs[i], *direct.Jobs[i]
		if a.ID != d.ID || a.State != d.State || a.ShardsDone != d.ShardsDone || b.ID != d.ID || !a.SubmittedAt.Equal(d.SubmittedAt) {
			t.Errorf("job %d: worker says %+v, storage %+v", i, a, d)
		}
	}
	if code, _, errOut := run(t, cli, "delete", ids[0]); code != 0 {
		t.Fatalf("delete: %s", errOut)
	}
	if after := read(); after.ServedBy == "" || len(after.Jobs) != 2 || after.Jobs[0].ID != ids[1] {
		t.Fatalf("after a delete the worker lists %+v", after)
	}
	code, out, _ := run(t, cli, "status", ids[1])
	if code != 0 || !strings.Contains(out, ids[1]) || !strings.Contains(out, "leader: st-w1") {
		t.Fatalf("status %s: %d %s", ids[1], code, out)
	}
	if code, _, errOut := run(t, cli, "status", "20261125-120000-0000dead"); code != 1 || !strings.Contains(errOut, "20261125-120000-0000dead") {
		t.Fatalf("status of a missing job: %d %s", code, errOut)
	}
}

func FuzzDecodeStatusRequest(f *testing.F) {
	f.Add([]byte(`{"container":"jobs","state":"running","limit":5}`))
	f.Add([]byte(`{"container":"jobs","job":"20261125-120000-0000beef"}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		r, err := decodeStatusRequest(data)
		if err != nil {
			return
		}
		if r.Job == "" && r.filter().Check() != nil {
			t.Fatalf("accepted a bad filter %+v", r)
		}
	})
}

func FuzzDecodeStatusReply(f *testing.F) {
	f.Add([]byte(`{"worker":"w1","leader":{"id":"w1","epoch":2},"jobs":[{"id":"x","state":"running"}]}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		r, err := decodeStatusReply(data)
		if err == nil && r.Worker == "" {
			t.Fatal("accepted a reply without a worker")
		}
	})
}
