package node

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/mapagg/mapagg/builtin"
	"github.com/mapagg/mapagg/client"
	"github.com/mapagg/mapagg/internal/harness/testenv"
	"github.com/mapagg/mapagg/internal/protocol"
	"github.com/mapagg/mapagg/internal/queue"
	"github.com/mapagg/mapagg/jobs"
	"github.com/mapagg/mapagg/store"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// cluster is what the commands of one test reach: Azurite, an in-process NATS and names of its
// own, given to the commands through the environment (as compose does).
type cluster struct {
	env map[string]string
}

func newCluster(t *testing.T) *cluster {
	t.Helper()
	return &cluster{env: map[string]string{
		"AZURE_STORAGE_CONNECTION_STRING": testenv.Azurite(t),
		"NATS_URL":                        testenv.NATS(t),
		"JOBS_CONTAINER":                  testenv.Name(t, "jobs"),
		"JOBS_QUEUE":                      testenv.Name(t, "q"),
		"LEASE_CONTAINER":                 testenv.Name(t, "lease"),
		"STREAM_PREFIX":                   "clitest",
		"LOG_LEVEL":                       "warn",
	}}
}

// node returns a node with reg that reads the cluster's environment (and only it).
func (c *cluster) node(t *testing.T, reg *jobs.Registry) *Node {
	t.Helper()
	env := map[string]string{}
	for k, v := range c.env {
		env[k] = v
	}
	n, err := New(Options{Registry: reg, LookupEnv: func(k string) (string, bool) { v, ok := env[k]; return v, ok }})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// run runs one command to its end.
func run(t *testing.T, n *Node, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var out, errb bytes.Buffer
	code = n.Run(ctx, args, &out, &errb)
	return code, out.String(), errb.String()
}

// startWorker runs `run` with reg in a goroutine until the test ends, and waits until it answers
// the cluster's types request.
func (c *cluster) startWorker(t *testing.T, reg *jobs.Registry, id string) {
	t.Helper()
	n := c.node(t, reg)
	ctx, cancel := context.WithCancel(context.Background())
	var logs testenv.SyncBuffer
	done := make(chan int)
	go func() {
		done <- n.Run(ctx, []string{"run", "--id", id, "--concurrency", "2", "--checkpoint-interval", "50ms", "--startup-timeout", "30s", "--http-addr", "127.0.0.1:0"}, &logs, &logs)
	}()
	t.Cleanup(func() {
		cancel()
		if code := <-done; code != 0 {
			t.Errorf("worker %s exited %d:\n%s", id, code, logs.String())
		}
	})
	cli := c.node(t, jobs.NewRegistry())
	testenv.Eventually(t, 60*time.Second, 100*time.Millisecond, func() bool {
		select {
		case code := <-done:
			t.Fatalf("worker %s exited %d:\n%s", id, code, logs.String())
		default:
		}
		_, out, _ := run(t, cli, "types", "--wait", "200ms")
		return strings.Contains(out, id)
	}, "worker %s does not answer types; its log:\n%s", id, &logs)
}

// jobCount is the number of jobs in the cluster's storage (0 when the container does not exist).
func (c *cluster) jobCount(t *testing.T) int {
	t.Helper()
	bc, err := store.NewClient(c.env["AZURE_STORAGE_CONNECTION_STRING"])
	if err != nil {
		t.Fatal(err)
	}
	q, err := queue.New(c.env["AZURE_STORAGE_CONNECTION_STRING"], c.env["JOBS_QUEUE"])
	if err != nil {
		t.Fatal(err)
	}
	list, err := (&client.Client{Store: store.New(bc, c.env["JOBS_CONTAINER"]), Queue: q}).List(context.Background(), 0)
	if err != nil {
		t.Fatal(err)
	}
	return len(list)
}

func withSquares(base *jobs.Registry) *jobs.Registry {
	if err := base.Register(squares{}); err != nil {
		panic(err)
	}
	return base
}

// TestCommands_UsageErrors needs no server: every mistake is found before anything is reached.
func TestCommands_UsageErrors(t *testing.T) {
	n, err := New(Options{Registry: withSquares(builtin.Registry()), LookupEnv: func(string) (string, bool) { return "", false }})
	if err != nil {
		t.Fatal(err)
	}
	conn := "--azure-connection-string=UseDevelopmentStorage=true"
	for _, tc := range []struct {
		args []string
		code int
		want string // in stderr
	}{
		{nil, 2, "usage: worker <command>"},
		{[]string{"frobnicate"}, 2, `unknown command "frobnicate"`},
		{[]string{"submit", "--type", "primes", "--params", "{}", "--params-file", "x"}, 2, "not both"},
		{[]string{"submit", "--type", "primes", "--params-file", "/nonexistent/p.json"}, 2, "no such file"},
		{[]string{"submit", "--type", "primes", "extra"}, 2, "unexpected arguments"},
		{[]string{"submit", "--no-such-flag"}, 2, "flag provided but not defined: -no-such-flag"},
		// The job itself is checked by client.Submit (TestSubmit_RefusalMessages): storage first.
		{[]string{"submit", "--type", "primes", "--params", `{"from":0,"to":10,"shards":1}`}, 2, "no storage account: pass --storage-account-url"},
		{[]string{"status", "a", "b"}, 2, "at most one job id"},
		{[]string{"status"}, 2, "no storage account"},
		{[]string{"result"}, 2, "expected one job id, got 0"},
		{[]string{"cancel", conn, "a", "b"}, 2, "expected one job id, got 2"},
		{[]string{"types", "extra"}, 2, "unexpected arguments"},
		{[]string{"types", "--wait", "0s"}, 2, "--wait 0s: use a duration above 0"},
		{[]string{"env", "extra"}, 2, "unexpected arguments"},
		{[]string{"run", "extra"}, 2, "unexpected arguments"},
		{[]string{"run"}, 2, "no storage account"},
		{[]string{"run", conn, "--log-level", "loud"}, 2, `log level "loud": use debug, info, warn or error`},
		{[]string{"run", conn, "--lease-duration", "5s", "--concurrency", "-1"}, 2, "LeaseDuration 5s is outside Azure's range: set it between 15s and 1m0s\nworker: invalid config: Concurrency -1"},
		{[]string{"run", conn, "--concurrency", "-1"}, 2, "Concurrency -1: use 1 to 1024"},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			code, stdout, stderr := run(t, n, tc.args...)
			if code != tc.code || !strings.Contains(stderr, tc.want) {
				t.Fatalf("exit %d, stderr:\n%s\nwant exit %d and %q", code, stderr, tc.code, tc.want)
			}
			if stdout != "" {
				t.Errorf("a refused command wrote to stdout: %q", stdout)
			}
		})
	}
}

func TestCommands_Help(t *testing.T) {
	n, err := New(Options{Registry: builtin.Registry(), Name: "mybin"})
	if err != nil {
		t.Fatal(err)
	}
	code, out, _ := run(t, n, "--help")
	if code != 0 || !strings.Contains(out, "usage: mybin <command>") {
		t.Fatalf("--help: exit %d\n%s", code, out)
	}
	for _, c := range n.commands() {
		code, stdout, stderr := run(t, n, c.name, "--help")
		if code != 0 || !strings.Contains(stderr, "mybin "+c.name+": "+c.summary) || !strings.Contains(stderr, "flags of mybin "+c.name) || stdout != "" {
			t.Errorf("%s --help: exit %d, stderr:\n%s", c.name, code, stderr)
		}
		if c.name != "env" && c.name != "health" && !strings.Contains(stderr, "(env AZURE_STORAGE_CONNECTION_STRING)") {
			t.Errorf("%s --help does not name the connection string's variable:\n%s", c.name, stderr)
		}
	}
}

func TestCommands_EnvFallbacks(t *testing.T) {
	env := map[string]string{"LEASE_DURATION": "soon", "AZURE_STORAGE_CONNECTION_STRING": "UseDevelopmentStorage=true"}
	n, err := New(Options{Registry: builtin.Registry(), LookupEnv: func(k string) (string, bool) { v, ok := env[k]; return v, ok }})
	if err != nil {
		t.Fatal(err)
	}
	// A bad value in the environment names the variable; a flag given on the command line wins.
	if code, _, stderr := run(t, n, "run"); code != 2 || !strings.Contains(stderr, `environment LEASE_DURATION="soon"`) {
		t.Fatalf("run with LEASE_DURATION=soon: exit %d\n%s", code, stderr)
	}
	f := n.newRunFlags()
	env["LEASE_DURATION"], env["WORKER_CONCURRENCY"], env["JOBS_CONTAINER"] = "20s", "7", "fromenv"
	if err := f.fs.parse([]string{"--jobs-container", "fromflag"}); err != nil {
		t.Fatal(err)
	}
	cfg := f.config(nil)
	if cfg.LeaseDuration != 20*time.Second || cfg.Concurrency != 7 || cfg.JobsContainer != "fromflag" || cfg.Storage.ConnectionString != "UseDevelopmentStorage=true" {
		t.Fatalf("config from env and flags: %+v", cfg)
	}
	code, out, _ := run(t, n, "env")
	if code != 0 {
		t.Fatalf("env: exit %d", code)
	}
	for _, v := range []string{"AZURE_STORAGE_CONNECTION_STRING", "NATS_URL", "WORKER_ID", "LEASE_DURATION", "STREAM_PREFIX"} {
		if !regexp.MustCompile(`(?m)^` + v + ` +--`).MatchString(out) {
			t.Errorf("env does not list %s:\n%s", v, out)
		}
	}
}

func TestOptionsAndConfig_Validate(t *testing.T) {
	if _, err := New(Options{}); !errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), "builtin.Registry()") {
		t.Fatalf("New without a registry = %v", err)
	}
	if _, err := New(Options{Registry: jobs.NewRegistry(), Name: "my worker"}); !errors.Is(err, ErrInvalidConfig) {
		t.Fatalf("New with a spaced name = %v", err)
	}
	if _, err := New(Options{Registry: jobs.NewRegistry(), Control: ControlConfig{Window: time.Hour}}); !errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), "Window up to 1m") {
		t.Fatalf("New with an hour's window = %v", err)
	}
	d := DefaultConfig()
	d.Storage.ConnectionString = "UseDevelopmentStorage=true"
	if err := d.Validate(); err != nil {
		t.Fatalf("DefaultConfig with a connection string: %v", err)
	}
	if err := (Config{Storage: store.Account{ConnectionString: "x"}}).Validate(); err != nil {
		t.Fatalf("zero fields take their defaults: %v", err)
	}
	// Every problem is reported at once.
	bad := Config{LeaseDuration: 5 * time.Second, StartupTimeout: -1, StreamPrefix: "a b"}
	err := bad.Validate()
	if !errors.Is(err, ErrInvalidConfig) {
		t.Fatalf("Validate = %v", err)
	}
	for _, want := range []string{"no storage account", "startup timeout", "5s"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("Validate does not report %q:\n%v", want, err)
		}
	}
	n, _ := New(Options{Registry: jobs.NewRegistry()})
	if err := n.Serve(context.Background(), bad); !errors.Is(err, ErrInvalidConfig) {
		t.Fatalf("Serve with a bad config = %v", err)
	}
}

// TestSubmit_NoWorkerRunning: NATS and storage are up, no worker runs.
func TestSubmit_NoWorkerRunning(t *testing.T) {
	c := newCluster(t)
	n := c.node(t, builtin.Registry())
	code, stdout, stderr := run(t, n, "submit", "--type", "squares", "--params", `{"n":10,"shards":2}`)
	want := "no worker is running on NATS at " + c.env["NATS_URL"]
	if code != 1 || !strings.Contains(stderr, want) || !strings.Contains(stderr, "worker run") || stdout != "" {
		t.Fatalf("exit %d, stdout %q, stderr:\n%s\nwant exit 1 and %q", code, stdout, stderr, want)
	}
	if code, _, stderr := run(t, n, "types"); code != 1 || !strings.Contains(stderr, want) {
		t.Fatalf("types: exit %d\n%s", code, stderr)
	}
	if got := c.jobCount(t); got != 0 {
		t.Fatalf("%d jobs written", got)
	}
	// A type the binary has is refused too: no running worker has it.
	if code, stdout, stderr := run(t, n, "submit", "--type", "primes", "--params", `{"from":0,"to":100,"shards":2}`); code != 1 || !strings.Contains(stderr, want) || stdout != "" {
		t.Fatalf("submit primes: exit %d, stdout %q\n%s", code, stdout, stderr)
	}
	if got := c.jobCount(t); got != 0 {
		t.Fatalf("%d jobs written", got)
	}
}

func TestSubmit_NATSUnreachable(t *testing.T) {
	c := newCluster(t)
	c.env["NATS_URL"] = "nats://127.0.0.1:1"
	code, _, stderr := run(t, c.node(t, builtin.Registry()), "submit", "--type", "squares", "--params", `{"n":10,"shards":2}`)
	if code != 1 || !strings.Contains(stderr, `this program does not have job type "squares" (it has: pi, primes, regroup, sleep, wordcount), and NATS at nats://127.0.0.1:1`) {
		t.Fatalf("exit %d\n%s", code, stderr)
	}
	if got := c.jobCount(t); got != 0 {
		t.Fatalf("%d jobs written", got)
	}
}

// A type the submitting binary has, but no live worker has (a cluster of another build), is
// refused with the types the cluster knows, and nothing is written.
func TestSubmit_BuiltinNoLiveWorkerHasIt(t *testing.T) {
	c := newCluster(t)
	cubes := jobs.NewRegistry()
	if err := cubes.Register(named{squares{}, "cubes"}); err != nil {
		t.Fatal(err)
	}
	c.startResponderOnly(t, cubes, "w-cubes")
	code, stdout, stderr := run(t, c.node(t, builtin.Registry()), "submit", "--type", "primes", "--params", `{"from":0,"to":100,"shards":2}`)
	want := `unknown job type "primes"; known: cubes`
	if code != 2 || !strings.Contains(stderr, want) || stdout != "" {
		t.Fatalf("exit %d, stdout %q, stderr:\n%s\nwant exit 2 and %q", code, stdout, stderr, want)
	}
	if got := c.jobCount(t); got != 0 {
		t.Fatalf("%d jobs written", got)
	}
	c.env["NATS_URL"] = "nats://127.0.0.1:1"
	code, _, stderr = run(t, c.node(t, builtin.Registry()), "submit", "--type", "primes", "--params", `{"from":0,"to":100,"shards":2}`)
	if code != 1 || !strings.Contains(stderr, `cannot check that a running worker has job type "primes": NATS at nats://127.0.0.1:1 is unreachable`) {
		t.Fatalf("NATS unreachable: exit %d\n%s", code, stderr)
	}
}

// TestCommands_Cluster runs the real `run` command with the built-ins and a custom type, and
// drives every other command from a binary that has the built-ins only (the stock worker).
func TestCommands_Cluster(t *testing.T) {
	c := newCluster(t)
	c.startWorker(t, withSquares(builtin.Registry()), "w-custom")
	// A second member that has only "cubes": its control responder alone, in process.
	cubes := jobs.NewRegistry()
	if err := cubes.Register(named{squares{}, "cubes"}); err != nil {
		t.Fatal(err)
	}
	c.startResponderOnly(t, cubes, "w-cubes")
	stock := c.node(t, builtin.Registry())

	t.Run("types", func(t *testing.T) {
		code, out, stderr := run(t, stock, "types")
		if code != 0 {
			t.Fatalf("exit %d\n%s", code, stderr)
		}
		for _, want := range []string{`cubes +1 of 2: w-cubes`, `squares +1 of 2: w-custom`, `primes +1 of 2: w-custom`} {
			if !regexp.MustCompile(`(?m)^` + want + `$`).MatchString(out) {
				t.Errorf("types lacks %q:\n%s", want, out)
			}
		}
		code, out, _ = run(t, stock, "types", "--json")
		var got typesJSON
		if err := json.Unmarshal([]byte(out), &got); err != nil || code != 0 {
			t.Fatalf("types --json: exit %d, %v\n%s", code, err, out)
		}
		if len(got.Workers) != 2 || got.Workers[0].Worker != "w-cubes" || len(got.Types) != 7 || got.Types[0].Type != "cubes" {
			t.Fatalf("types --json = %+v", got)
		}
	})

	t.Run("unknown type refused with the cluster's types", func(t *testing.T) {
		code, stdout, stderr := run(t, stock, "submit", "--type", "nope", "--params", `{}`)
		want := `unknown job type "nope"; known: cubes, pi, primes, regroup, sleep, squares, wordcount`
		if code != 2 || !strings.Contains(stderr, want) || stdout != "" {
			t.Fatalf("exit %d, stderr:\n%s\nwant exit 2 and %q", code, stderr, want)
		}
		if got := c.jobCount(t); got != 0 {
			t.Fatalf("%d jobs written", got)
		}
	})

	t.Run("bad params refused by the worker that has the type", func(t *testing.T) {
		code, _, stderr := run(t, stock, "submit", "--type", "squares", "--params", `{"n":10,"shards":11}`)
		want := `worker submit: bad parameters for squares: "shards" must be 1 to n (got 11)` + "\n"
		if code != 2 || stderr != want {
			t.Fatalf("exit %d, stderr %q, want exit 2 and %q", code, stderr, want)
		}
		if got := c.jobCount(t); got != 0 {
			t.Fatalf("%d jobs written", got)
		}
	})

	var squaresID string
	t.Run("submit a type only a worker has, and wait", func(t *testing.T) {
		code, stdout, stderr := run(t, stock, "submit", "--type", "squares", "--params", `{"n":1000,"shards":7}`, "--wait", "--poll", "20ms")
		// Only the result on stdout (it pipes into jq); the id first on stderr.
		if code != 0 || stdout != `{"sum":333833500}`+"\n" {
			t.Fatalf("exit %d, stdout:\n%s\nstderr:\n%s", code, stdout, stderr)
		}
		squaresID, _, _ = strings.Cut(stderr, "\n")
		if protocol.CheckID(squaresID) != nil {
			t.Fatalf("stderr does not start with the job id:\n%s", stderr)
		}
		// worker wait on the finished job: the result again, exit 0.
		if code, stdout, stderr := run(t, stock, "wait", squaresID); code != 0 || stdout != `{"sum":333833500}`+"\n" {
			t.Fatalf("wait %s: exit %d, stdout %q\n%s", squaresID, code, stdout, stderr)
		}
		// --quiet: only the id.
		code, stdout, stderr = run(t, stock, "submit", "--quiet", "--wait", "--type", "squares", "--params", `{"n":10,"shards":2}`)
		if code != 0 || protocol.CheckID(strings.TrimSuffix(stdout, "\n")) != nil || stderr != "" {
			t.Fatalf("submit --quiet --wait: exit %d, stdout %q, stderr %q", code, stdout, stderr)
		}
	})

	var primesID string
	t.Run("submit a builtin", func(t *testing.T) {
		code, stdout, stderr := run(t, stock, "submit", "--type", "primes", "--params", `{"from":0,"to":100000,"shards":5}`, "--priority", "2")
		if code != 0 {
			t.Fatalf("exit %d\n%s", code, stderr)
		}
		primesID = strings.TrimSpace(stdout)
		testenv.Eventually(t, 60*time.Second, 50*time.Millisecond, func() bool {
			_, out, _ := run(t, stock, "result", primesID)
			return strings.TrimSpace(out) == `{"count":9592}`
		}, "result of %s", primesID)
	})

	t.Run("status", func(t *testing.T) {
		code, out, stderr := run(t, stock, "status", squaresID)
		if code != 0 || !regexp.MustCompile(`(?m)^leader: w-custom \(epoch \d+`).MatchString(out) ||
			!regexp.MustCompile(`(?m)^`+squaresID+` +squares +succeeded +7/7`).MatchString(out) {
			t.Fatalf("status %s: exit %d\n%s%s", squaresID, code, out, stderr)
		}
		code, out, _ = run(t, stock, "status", squaresID, "--json")
		var one client.Status
		if err := json.Unmarshal([]byte(out), &one); err != nil || code != 0 || one.ID != squaresID || one.State != jobs.StateSucceeded || one.ShardsDone != 7 {
			t.Fatalf("status JOB --json: %v %+v\n%s", err, one, out)
		}
		code, out, _ = run(t, stock, "status")
		if code != 0 || !strings.Contains(out, squaresID) || !regexp.MustCompile(`(?m)^`+primesID+` +primes +succeeded +5/5 +2 +- +\d{4}-`).MatchString(out) {
			t.Fatalf("status: exit %d\n%s", code, out)
		}
		code, out, _ = run(t, stock, "status", "--json")
		var all statusJSON
		if err := json.Unmarshal([]byte(out), &all); err != nil || code != 0 || all.Leader == nil || all.Leader.ID != "w-custom" || len(all.Jobs) != 3 {
			t.Fatalf("status --json: %v\n%s", err, out)
		}
		if code, _, stderr := run(t, stock, "status", "20261121-000000-00000000"); code != 1 || !strings.Contains(stderr, "no such job") {
			t.Fatalf("status of a missing job: exit %d\n%s", code, stderr)
		}
		// Filters, and times.
		code, out, _ = run(t, stock, "status", "--type", "primes", "--state", "succeeded", "--since", "1h")
		if code != 0 || !strings.Contains(out, primesID) || strings.Contains(out, squaresID) || !strings.Contains(out, "SUBMITTED (UTC)") {
			t.Fatalf("status --type primes: exit %d\n%s", code, out)
		}
		if code, out, _ = run(t, stock, "status", "--state", "failed"); code != 0 || !strings.Contains(out, "jobs: none") {
			t.Fatalf("status --state failed: exit %d\n%s", code, out)
		}
		if code, out, _ = run(t, stock, "status", "--limit", "1", "--json"); code != 0 || strings.Count(out, `"shards_total"`) != 1 {
			t.Fatalf("status --limit 1: exit %d\n%s", code, out)
		}
		// Pages: the first names the cursor of the next, which lists an older job.
		code, out, _ = run(t, stock, "status", "--limit", "1")
		next := regexp.MustCompile(`(?m)^older jobs: worker status --before (\S+)$`).FindStringSubmatch(out)
		if code != 0 || next == nil {
			t.Fatalf("status --limit 1: exit %d, no cursor of the next page\n%s", code, out)
		}
		var older statusJSON
		code, out, _ = run(t, stock, "status", "--limit", "1", "--before", next[1], "--json")
		if err := json.Unmarshal([]byte(out), &older); err != nil || code != 0 || len(older.Jobs) != 1 || older.Jobs[0].ID >= next[1] {
			t.Fatalf("status --before %s: %v\n%s", next[1], err, out)
		}
		for _, bad := range [][]string{{"--state", "done"}, {"--since", "yesterday"}, {"--limit", "100000"}, {squaresID, "--state", "failed"}} {
			if code, _, stderr := run(t, stock, append([]string{"status"}, bad...)...); code != 2 {
				t.Errorf("status %v: exit %d, want 2\n%s", bad, code, stderr)
			}
		}
	})

	t.Run("result before finishing, cancel, result after", func(t *testing.T) {
		code, stdout, stderr := run(t, stock, "submit", "--type", "sleep", "--params", `{"shards":2,"duration":"10m"}`)
		if code != 0 {
			t.Fatalf("submit sleep: exit %d\n%s", code, stderr)
		}
		id := strings.TrimSpace(stdout)
		code, _, stderr = run(t, stock, "result", id)
		if code != 1 || !strings.Contains(stderr, "job has not finished: job "+id+" is ") {
			t.Fatalf("result before finishing: exit %d\n%s", code, stderr)
		}
		code, stdout, stderr = run(t, stock, "cancel", id)
		if code != 0 || stdout != "cancel requested for "+id+"\n" {
			t.Fatalf("cancel: exit %d\n%s%s", code, stdout, stderr)
		}
		testenv.Eventually(t, 60*time.Second, 50*time.Millisecond, func() bool {
			_, out, _ := run(t, stock, "status", id, "--json")
			return strings.Contains(out, `"state": "cancelled"`)
		}, "job %s is not cancelled", id)
		code, _, stderr = run(t, stock, "result", id)
		if code != 1 || !strings.Contains(stderr, "job "+id+" cancelled") {
			t.Fatalf("result of a cancelled job: exit %d\n%s", code, stderr)
		}
		if code, _, stderr := run(t, stock, "cancel", id); code != 1 || !strings.Contains(stderr, "already cancelled") {
			t.Fatalf("cancel of a cancelled job: exit %d\n%s", code, stderr)
		}
		// worker wait: the exit status says the job was cancelled.
		if code, stdout, stderr := run(t, stock, "wait", id); code != 3 || stdout != "" || !strings.Contains(stderr, "cancelled") {
			t.Fatalf("wait on a cancelled job: exit %d, stdout %q\n%s", code, stdout, stderr)
		}
	})
}

// named renames a job type.
type named struct {
	squares
	name string
}

func (n named) Type() string { return n.name }

// startResponderOnly answers the control requests for reg as worker id, as a member that runs no
// shards would (a worker of another build during a rolling upgrade).
func (c *cluster) startResponderOnly(t *testing.T, reg *jobs.Registry, id string) {
	t.Helper()
	var f common
	f.natsURL, f.streamPrefix = c.env["NATS_URL"], c.env["STREAM_PREFIX"]
	b, err := f.connectNATS(id)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	r, err := startResponder(b.Conn(), f.streamPrefix, id, reg, nil, testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.stop)
}

// testLogger logs to the test.
func testLogger(t *testing.T) *slog.Logger {
	return slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn}))
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(p)))
	return len(p), nil
}

// Outside input is not echoed whole: a 10 KB command or argument is cut, with its size.
func TestCommands_HugeInputClipped(t *testing.T) {
	n, err := New(Options{Registry: builtin.Registry(), LookupEnv: func(string) (string, bool) { return "", false }})
	if err != nil {
		t.Fatal(err)
	}
	huge := strings.Repeat("x", 10240)
	for _, args := range [][]string{{huge}, {"env", huge}} {
		var stdout, stderr strings.Builder
		code := n.Run(context.Background(), args, &stdout, &stderr)
		if code != 2 || strings.Contains(stderr.String(), huge) || !strings.Contains(stderr.String(), " bytes)") {
			t.Errorf("%.10s…: exit %d, stderr %d bytes: %.200s", args, code, stderr.Len(), stderr.String())
		}
	}
}

// The probe settings are checked before anything connects.
func TestConfig_ProbeSettings(t *testing.T) {
	d := DefaultConfig()
	d.Storage.ConnectionString = "UseDevelopmentStorage=true"
	d.ProbeAfter, d.ProbeConfirm = 100*time.Millisecond, time.Millisecond
	err := d.Validate()
	for _, want := range []string{"ProbeAfter 100ms", "ProbeConfirm 1ms"} {
		if !errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), want) {
			t.Errorf("Validate = %v, want it to report %q", err, want)
		}
	}
	d.ProbeAfter, d.ProbeConfirm = 400*time.Millisecond, 200*time.Millisecond
	if err := d.Validate(); err != nil {
		t.Errorf("valid probe settings: %v", err)
	}
}
