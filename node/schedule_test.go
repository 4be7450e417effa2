package node

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mapagg/mapagg/builtin"
	"github.com/mapagg/mapagg/client"
	"github.com/mapagg/mapagg/internal/protocol"
	"github.com/mapagg/mapagg/store"
)

func TestSchedule_UsageErrors(t *testing.T) {
	n, err := New(Options{Registry: builtin.Registry(), LookupEnv: func(string) (string, bool) { return "", false }})
	if err != nil {
		t.Fatal(err)
	}
	p := []string{"--type", "primes", "--params", `{"from":0,"to":10,"shards":1}`}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"schedule"}, "a subcommand is required"},
		{[]string{"schedule", "frob"}, `unknown subcommand "frob"`},
		{append([]string{"schedule", "add", "n", "--every", "2s", "--cron", "* * * * *"}, p...), "give --every or --cron, not both"},
		{append([]string{"schedule", "add", "n"}, p...), "give --every DURATION or --cron"},
		{append([]string{"schedule", "add", "n", "--cron", "61 * * * *"}, p...), "--cron \"61 * * * *\""},
		{append([]string{"schedule", "add", "n", "--every", "500ms"}, p...), "whole number of seconds"},
		{append([]string{"schedule", "add", "n", "--every", "2s", "--overlap", "never"}, p...), "use skip, queue or allow"},
		{append([]string{"schedule", "add", "n", "--every", "2s", "--catch-up", "1s"}, p...), "at least 10s"},
		{append([]string{"schedule", "add", "n", "--cron", "0 3 * * *", "--time-zone", "Mars/Base"}, p...), "unknown time zone"},
		{append([]string{"schedule", "add", "n", "--every", "2s", "--time-zone", "UTC"}, p...), "--time-zone applies to --cron only"},
		{append([]string{"schedule", "add", "Bad_Name", "--every", "2s"}, p...), "only a-z"},
		{[]string{"schedule", "add", "n", "--every", "2s"}, "--type is required"},
		{[]string{"schedule", "add", "n", "--every", "2s", "--type", "primes", "--params", "{"}, "--params is not valid JSON"},
		{[]string{"schedule", "add", "n", "--every", "2s", "--type", "primes", "--params", `{"from":5,"to":1,"shards":1}`}, "bad parameters for primes"},
		{[]string{"schedule", "pause"}, "expected one schedule name, got 0"},
		{[]string{"schedule", "list", "x"}, "unexpected arguments"},
		{append([]string{"schedule", "add", "n", "--every", "2s"}, p...), "no storage account"},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			code, stdout, stderr := run(t, n, tc.args...)
			if code != 2 || !strings.Contains(stderr, tc.want) || stdout != "" {
				t.Fatalf("exit %d, stdout %q, stderr:\n%s\nwant exit 2 and %q", code, stdout, stderr, tc.want)
			}
		})
	}
	for _, args := range [][]string{{"schedule", "-h"}, {"schedule", "add", "-h"}, {"schedule", "list", "--help"}} {
		if code, _, stderr := run(t, n, args...); code != 0 || !strings.Contains(stderr, "worker schedule") {
			t.Errorf("%v: exit %d\n%s", args, code, stderr)
		}
	}
}

func TestSchedule_Commands(t *testing.T) {
	c := newCluster(t)
	n := c.node(t, builtin.Registry())
	p := `{"from":0,"to":10,"shards":1}`
	if code, out, stderr := run(t, n, "schedule", "add", "nightly", "--cron", "0 3 * * *", "--time-zone", "Europe/Berlin", "--type", "primes", "--params", p); code != 0 || !strings.Contains(out, "schedule nightly added: cron 0 3 * * * Europe/Berlin, next tick") {
		t.Fatalf("add: exit %d\n%s%s", code, out, stderr)
	}
	if code, _, stderr := run(t, n, "schedule", "add", "nightly", "--every", "1m", "--type", "primes", "--params", p); code != 1 || !strings.Contains(stderr, "schedule exists: nightly") {
		t.Fatalf("add twice: exit %d\n%s", code, stderr)
	}
	if code, out, _ := run(t, n, "schedule", "pause", "nightly"); code != 0 || out != "schedule nightly paused\n" {
		t.Fatalf("pause: %d %q", code, out)
	}
	code, out, _ := run(t, n, "schedule", "list", "--json")
	var infos []client.ScheduleInfo
	if err := json.Unmarshal([]byte(out), &infos); code != 0 || err != nil || len(infos) != 1 || !infos[0].Paused || infos[0].NextTick != nil {
		t.Fatalf("list --json: %d %v\n%s", code, err, out)
	}
	if code, out, _ := run(t, n, "schedule", "resume", "nightly"); code != 0 || out != "schedule nightly resumed\n" {
		t.Fatalf("resume: %d %q", code, out)
	}
	if code, out, _ := run(t, n, "schedule", "list"); code != 0 || !strings.Contains(out, "nightly") || !strings.Contains(out, "active") || !strings.Contains(out, "T02:00:00Z") {
		t.Fatalf("list: %d\n%s", code, out)
	}
	code, id, stderr := run(t, n, "schedule", "trigger", "nightly")
	if code != 0 {
		t.Fatalf("trigger: %d %s", code, stderr)
	}
	code, out, _ = run(t, n, "status", strings.TrimSpace(id), "--json")
	if code != 0 || !strings.Contains(out, `"schedule": "nightly"`) || !strings.Contains(out, `"tick": "`) {
		t.Fatalf("status of a triggered job: %d\n%s", code, out)
	}
	if code, _, stderr := run(t, n, "schedule", "pause", "nope"); code != 1 || !strings.Contains(stderr, "no such schedule: nope") {
		t.Fatalf("pause unknown: %d %s", code, stderr)
	}
	if code, out, _ := run(t, n, "schedule", "delete", "nightly"); code != 0 || !strings.HasPrefix(out, "schedule nightly deleted: fired ") {
		t.Fatalf("delete: %d %q", code, out)
	}
	if code, out, _ := run(t, n, "schedule", "list"); code != 0 || !strings.Contains(out, "no schedules") {
		t.Fatalf("list after delete: %d %q", code, out)
	}
}

// `schedule add --chain FILE`: the file's steps, refused with what is wrong; added, listed with
// its types, and triggered as a whole chain (each step after the previous, "$prev" replaced).
func TestSchedule_Chain(t *testing.T) {
	dir := t.TempDir()
	file := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	good := file("good.json", `[{"type":"primes","params":{"from":0,"to":10,"shards":1}},{"type":"regroup","params":{"job":"$prev","by":"value"}},{"type":"sleep","params":{"shards":1}}]`)
	n, err := New(Options{Registry: builtin.Registry(), LookupEnv: func(string) (string, bool) { return "", false }})
	if err != nil {
		t.Fatal(err)
	}
	for args, want := range map[string]string{
		"--chain " + good + " --type primes":                                                         "give --chain FILE or --type and --params, not both",
		"--chain " + dir + "/none.json":                                                              "--chain: open",
		"--chain " + file("bad.json", `{"type":"primes"}`):                                           "want [{",
		"--chain " + file("prev.json", `[{"type":"regroup","params":{"job":"$prev"}}]`):              "the first step has none",
		"--chain " + file("first.json", `[{"type":"primes","params":{"from":5,"to":1,"shards":1}}]`): "bad parameters for primes",
	} {
		code, _, stderr := run(t, n, append([]string{"schedule", "add", "c", "--every", "1m"}, strings.Fields(args)...)...)
		if code != 2 || !strings.Contains(stderr, want) {
			t.Errorf("%s: exit %d, stderr:\n%s\nwant exit 2 and %q", args, code, stderr, want)
		}
	}
	if code, _, stderr := run(t, n, "schedule", "add", "-h"); code != 0 || !strings.Contains(stderr, "--chain") || !strings.Contains(stderr, "$prev") {
		t.Errorf("schedule add -h does not explain --chain:\n%s", stderr)
	}

	c := newCluster(t)
	n = c.node(t, builtin.Registry())
	if code, _, stderr := run(t, n, "schedule", "add", "c", "--every", "1h", "--chain", file("step2.json",
		`[{"type":"primes","params":{"from":0,"to":10,"shards":1}},{"type":"regroup","params":{"job":"$prev","by":"nope"}}]`)); code != 2 || !strings.Contains(stderr, `chain step 2: bad parameters for regroup: "by" must be`) {
		t.Fatalf("a bad second step: exit %d\n%s", code, stderr)
	}
	if code, out, stderr := run(t, n, "schedule", "add", "c", "--every", "1h", "--chain", good); code != 0 || !strings.Contains(out, "a chain of 3 jobs (primes→regroup→sleep)") {
		t.Fatalf("add: exit %d\n%s%s", code, out, stderr)
	}
	if code, out, _ := run(t, n, "schedule", "list"); code != 0 || !strings.Contains(out, "primes→regroup→sleep") {
		t.Fatalf("list: %d\n%s", code, out)
	}
	code, id, stderr := run(t, n, "schedule", "trigger", "c")
	if code != 0 {
		t.Fatalf("trigger: %d %s", code, stderr)
	}
	id = strings.TrimSpace(id)
	code, out, _ := run(t, n, "status", id+"-2", "--json")
	if code != 0 || !strings.Contains(out, `"schedule": "c"`) {
		t.Fatalf("status of the chain's second step: %d\n%s", code, out)
	}
	bc, err := store.NewClient(c.env["AZURE_STORAGE_CONNECTION_STRING"])
	if err != nil {
		t.Fatal(err)
	}
	data, _, err := store.New(bc, c.env["JOBS_CONTAINER"]).Get(context.Background(), protocol.SpecBlob(id+"-2"))
	if err != nil {
		t.Fatal(err)
	}
	spec, err := protocol.ParseSpec(data)
	if err != nil || len(spec.After) != 1 || spec.After[0] != id || !strings.Contains(string(spec.Params), `"job":"`+id+`"`) {
		t.Fatalf("second step's spec: %+v %v", spec, err)
	}
}
