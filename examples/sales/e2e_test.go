package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mapagg/mapagg/clustertest"
	"github.com/mapagg/mapagg/jobs"
)

// The example binary runs a three-worker cluster; the stock CLI submits the job (the workers
// validate it), prints its manifest and streams its output, which must be every customer's
// total. It uses only public packages: a job author can copy it.
func TestEndToEnd(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a cluster")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	reg := jobs.NewRegistry()
	if err := reg.RegisterKeyed(salesJob()); err != nil {
		t.Fatal(err)
	}
	c := clustertest.Start(t, clustertest.Options{Main: ".", Registry: reg})
	stock := clustertest.Build(t, "github.com/mapagg/mapagg/cmd/worker")
	cli := func(t *testing.T, args ...string) string {
		t.Helper()
		cmd := exec.Command(stock, args...)
		cmd.Env = c.Env()
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		if err := cmd.Run(); err != nil {
			t.Fatalf("worker %s: %v\n%s", strings.Join(args, " "), err, stderr.String())
		}
		return stdout.String()
	}

	const container, customers = "data", 3000
	if _, err := c.Blob().CreateContainer(ctx, container, nil); err != nil {
		t.Fatal(err)
	}
	totals := map[string]int64{}
	for b := range 6 {
		var csv bytes.Buffer
		csv.WriteString("customer,cents\n")
		for i := range 2000 {
			customer := fmt.Sprintf("c%04d", (i*7+b*131)%customers)
			cents := int64(i%97 + b)
			totals[customer] += cents
			fmt.Fprintf(&csv, "%s,%d\n", customer, cents)
		}
		if _, err := c.Blob().UploadBuffer(ctx, container, fmt.Sprintf("sales/%d.csv", b), csv.Bytes(), nil); err != nil {
			t.Fatal(err)
		}
	}
	var want []string
	for k, v := range totals {
		want = append(want, fmt.Sprintf("%s\t%d", k, v))
	}
	slices.Sort(want)

	params := fmt.Sprintf(`{"container": %q, "prefix": "sales/", "shard_bytes": 8192}`, container)
	id := strings.TrimSpace(cli(t, "submit", "--type", "sales", "--params", params))
	st, err := c.Wait(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if st.State != jobs.StateSucceeded {
		t.Fatalf("job %s %s: %s", id, st.State, st.Error)
	}
	if out := cli(t, "result", id); !strings.Contains(out, fmt.Sprintf("output of %d records", len(totals))) {
		t.Errorf("worker result:\n%s", out)
	}
	var m struct {
		Partitions []struct{ Records int64 } `json:"partitions"`
	}
	if err := json.Unmarshal([]byte(cli(t, "result", id, "--json")), &m); err != nil || len(m.Partitions) < 2 {
		t.Fatalf("worker result --json: %+v, %v", m, err)
	}
	// Every partition is sorted by customer; together they are every customer's total.
	var got []string
	for p := range m.Partitions {
		lines := strings.Split(strings.TrimSuffix(cli(t, "output", id, "--partition", fmt.Sprint(p)), "\n"), "\n")
		if !slices.IsSorted(lines) || int64(len(lines)) != m.Partitions[p].Records {
			t.Errorf("partition %d: %d lines, sorted %v; manifest says %d", p, len(lines), slices.IsSorted(lines), m.Partitions[p].Records)
		}
		got = append(got, lines...)
	}
	slices.Sort(got)
	if !slices.Equal(got, want) {
		t.Fatalf("output: %d totals, want %d; first %q, want %q", len(got), len(want), got[:min(3, len(got))], want[:3])
	}
	all := strings.Split(strings.TrimSuffix(cli(t, "output", id), "\n"), "\n")
	if slices.Sort(all); !slices.Equal(all, want) {
		t.Errorf("worker output (all partitions): %d lines", len(all))
	}
	if jl := cli(t, "output", id, "--partition", "0", "--format", "jsonl"); !strings.HasPrefix(jl, `{"key":"c`) {
		t.Errorf("jsonl: %.80s", jl)
	}
	// A job whose input is this job's output (BlobInput's "job") reads its output blobs, found in
	// the cluster's jobs container: here they are JSON lines, not customer,cents, so it fails
	// naming the first one.
	next, err := c.Client().Submit(ctx, "sales", json.RawMessage(fmt.Sprintf(`{"job": %q}`, id)))
	if err != nil {
		t.Fatal(err)
	}
	if st, err := c.Wait(ctx, next); err != nil || st.State != jobs.StateFailed || !strings.Contains(st.Error, id+"/out/part-") {
		t.Errorf("a job over the output of %s: %+v, %v", id, st, err)
	}
}
