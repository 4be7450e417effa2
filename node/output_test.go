package node

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mapagg/mapagg/builtin"
	"github.com/mapagg/mapagg/internal/harness/testenv"
	"github.com/mapagg/mapagg/internal/harness/testoutput"
	"github.com/mapagg/mapagg/internal/protocol"
	"github.com/mapagg/mapagg/jobs"
	"github.com/mapagg/mapagg/store"
)

// TestOutputCommands: `result` prints a keyed job's manifest, `output` streams its records, and
// every mistake gets an error that says what to do.
func TestOutputCommands(t *testing.T) {
	conn := testenv.Azurite(t)
	name := testenv.Name(t, "out")
	bc, err := store.NewClient(conn)
	if err != nil {
		t.Fatal(err)
	}
	c := store.New(bc, name)
	ctx := context.Background()
	if err := c.Ensure(ctx); err != nil {
		t.Fatal(err)
	}
	id, aggID, runID := "20261125-120000-0000beef", "20261125-120000-00000agg", "20261125-120000-00000run"
	m := testoutput.Put(t, c, id, [][]testoutput.Record{{{`"apple"`, `3`}, {`"b\tc"`, `{"n": 1}`}}, {{`"zebra"`, `9`}}})
	testoutput.PutState(t, c, aggID, jobs.StateSucceeded, []byte(`{"count":3}`))
	if _, err := c.Put(ctx, protocol.ResultBlob(aggID), []byte(`{"count":3}`), store.Cond{}); err != nil {
		t.Fatal(err)
	}
	testoutput.PutState(t, c, runID, jobs.StateRunning, nil)
	n, err := New(Options{Registry: builtin.Registry(), LookupEnv: func(string) (string, bool) { return "", false }})
	if err != nil {
		t.Fatal(err)
	}
	flags := []string{"--azure-connection-string", conn, "--jobs-container", name}
	cmd := func(args ...string) (int, string, string) { return run(t, n, append(args, flags...)...) }

	code, out, stderr := cmd("result", id)
	if code != 0 || !strings.Contains(out, "output of 3 records") || !strings.Contains(out, m.Partitions[1].Blob) ||
		!strings.Contains(out, "worker output "+id) {
		t.Errorf("result of a keyed job: exit %d\n%s%s", code, out, stderr)
	}
	if code, out, _ := cmd("result", id, "--json"); code != 0 || !strings.Contains(out, `"kind": "keyed-output"`) {
		t.Errorf("result --json: exit %d\n%s", code, out)
	}
	if code, out, _ := cmd("result", aggID); code != 0 || out != "{\"count\":3}\n" {
		t.Errorf("result of an aggregate job: exit %d %q", code, out)
	}
	// wait prints what result prints.
	if code, out, stderr := cmd("wait", id); code != 0 || !strings.Contains(out, "output of 3 records") || strings.Contains(out, `"kind"`) {
		t.Errorf("wait for a keyed job: exit %d\n%s%s", code, out, stderr)
	}
	if code, out, _ := cmd("wait", id, "--json"); code != 0 || !strings.Contains(out, `"kind": "keyed-output"`) {
		t.Errorf("wait --json: exit %d\n%s", code, out)
	}
	if code, out, _ := cmd("wait", aggID); code != 0 || out != "{\"count\":3}\n" {
		t.Errorf("wait for an aggregate job: exit %d %q", code, out)
	}
	if code, out, stderr := cmd("output", id); code != 0 || out != "apple\t3\nb\\tc\t{\"n\":1}\nzebra\t9\n" {
		t.Errorf("output: exit %d %q %s", code, out, stderr)
	}
	if code, out, stderr := cmd("output", id, "--partition", "1", "--format", "jsonl"); code != 0 || out != `{"key":"zebra","value":9}`+"\n" {
		t.Errorf("output --partition 1 --format jsonl: exit %d %q %s", code, out, stderr)
	}
	file := filepath.Join(t.TempDir(), "out.tsv")
	if code, out, stderr := cmd("output", id, "-o", file); code != 0 || out != "" {
		t.Errorf("output -o: exit %d %q %s", code, out, stderr)
	}
	if data, err := os.ReadFile(file); err != nil || !strings.HasPrefix(string(data), "apple\t3\n") {
		t.Errorf("-o file: %q, %v", data, err)
	}
	if err := c.Delete(ctx, m.Partitions[1].Blob); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"output", id, "--format", "csv"}, 2, `output format "csv": want "tsv" or "jsonl"`},
		{[]string{"output", id, "--partition", "-2"}, 2, "partitions are numbered from 0"},
		{[]string{"output", id, "--partition", "2"}, 1, "has 2 partitions (0 to 1): no partition 2"},
		{[]string{"output"}, 2, "expected one job id"},
		{[]string{"output", "20261125-120000-0000none"}, 1, "no such job"},
		{[]string{"output", runID}, 1, "has not finished"},
		{[]string{"output", aggID}, 1, "result is a value, not output records: print it with `worker result " + aggID + "`"},
		{[]string{"output", id}, 1, "output blob " + m.Partitions[1].Blob + " (partition 1 of job " + id + ") is missing"},
		{[]string{"output", id, "-o", file}, 1, "is missing"},
	} {
		code, _, stderr := cmd(tc.args...)
		if code != tc.code || !strings.Contains(stderr, tc.want) {
			t.Errorf("%v: exit %d, stderr:\n%s\nwant exit %d and %q", tc.args, code, stderr, tc.code, tc.want)
		}
	}
	// A failed -o leaves the file it would have replaced as it was, and no temporary file.
	if data, err := os.ReadFile(file); err != nil || !strings.HasPrefix(string(data), "apple\t3\n") {
		t.Errorf("-o file after a failed output: %q, %v", data, err)
	}
	if entries, _ := os.ReadDir(filepath.Dir(file)); len(entries) != 1 {
		t.Errorf("-o left %d files", len(entries))
	}
	// A container that does not exist is explained as for the other commands.
	code, _, stderr = run(t, n, "output", id, "--azure-connection-string", conn, "--jobs-container", "no-such-container")
	if code != 1 || !strings.Contains(stderr, `container "no-such-container" does not exist`) {
		t.Errorf("missing container: exit %d %s", code, stderr)
	}
}
