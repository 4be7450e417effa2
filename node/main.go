package node

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/mapagg/mapagg/internal/protocol"
	"github.com/mapagg/mapagg/jobs"
)

// Options assemble a node binary. Zero fields take their defaults in New; Validate checks the
// values as given.
type Options struct {
	// Registry holds the job types this binary has: `run` processes and coordinates them, and
	// `submit` validates them locally. Required (jobs.NewRegistry() for a binary with none, which
	// still submits any type the running cluster knows).
	Registry *jobs.Registry

	// Name is the program name in usage and error messages. Default "worker".
	Name string

	// LookupEnv reads an environment variable for a flag not given on the command line.
	// Default os.LookupEnv.
	LookupEnv func(string) (string, bool)

	// Control bounds the requests a command makes to the running workers (submit of a type this
	// binary lacks, types). Zero fields take DefaultControlConfig's.
	Control ControlConfig
}

// DefaultOptions returns Options with every default filled in and no registry.
func DefaultOptions() Options {
	return Options{Name: "worker", LookupEnv: os.LookupEnv, Control: DefaultControlConfig()}
}

// fill sets every zero field to its default: the one place defaults are applied.
func (o *Options) fill() {
	d := DefaultOptions()
	o.Name = cmp.Or(o.Name, d.Name)
	if o.LookupEnv == nil { // a func: cmp.Or cannot compare it
		o.LookupEnv = d.LookupEnv
	}
	o.Control.Timeout = cmp.Or(o.Control.Timeout, d.Control.Timeout)
	o.Control.Window = cmp.Or(o.Control.Window, d.Control.Window)
}

// Validate reports every problem with o and what to change.
func (o Options) Validate() error {
	var errs []error
	if o.Registry == nil {
		errs = append(errs, errors.New("Options.Registry is nil: pass the registry holding your job types (builtin.Registry() for the built-ins, jobs.NewRegistry() for none)"))
	}
	if strings.ContainsAny(o.Name, " \t\n") {
		errs = append(errs, fmt.Errorf("Options.Name %q holds white space: use the program's file name", o.Name))
	}
	if o.Control.Timeout < 0 || o.Control.Window < 0 || o.Control.Window > time.Minute {
		errs = append(errs, fmt.Errorf("Options.Control %+v: use a positive Timeout and a Window up to 1m (0 for the defaults)", o.Control))
	}
	if len(errs) > 0 {
		return fmt.Errorf("%w: %w", ErrInvalidConfig, errors.Join(errs...))
	}
	return nil
}

// Node is a worker binary: its job types and its command line. It holds no state between
// commands; one Node may run many commands, one after another or at once.
type Node struct {
	opts Options
}

// New returns the node described by opts.
func New(opts Options) (*Node, error) {
	opts.fill()
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	return &Node{opts: opts}, nil
}

// Main builds the node described by opts and runs its command line (os.Args) with SIGINT and
// SIGTERM stopping `run` gracefully (a leader hands over its lease). It exits with the command's
// status: 0 on success, 1 on failure, 2 on a usage mistake or invalid opts.
func Main(opts Options) {
	n, err := New(opts)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	n.Main()
}

// Main runs the command line (os.Args) and exits with its status; see the package function Main.
func (n *Node) Main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := n.Run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// command is one subcommand of the command line.
type command struct {
	name, summary, example string
	flags                  func() *flagSet // the command's flag set, for `env` and tests
	run                    func(ctx context.Context, args []string, stdout, stderr io.Writer) error
}

func (n *Node) commands() []command {
	return []command{
		{"run", "join the cluster: process shards, and coordinate when elected leader", "",
			func() *flagSet { return n.newRunFlags().fs }, n.runCmd},
		{"submit", "submit a job", `submit --type primes --params '{"from":0,"to":1000000,"shards":10}' [--wait]`,
			func() *flagSet { return n.newSubmitFlags().fs }, n.submitCmd},
		{"status", "show the leader and jobs; with JOB, also what it waits for", "status [JOB] [--state S] [--type T] [--since 1h] [--limit N] [--json]",
			func() *flagSet { return n.newStatusFlags().fs }, n.statusCmd},
		{"result", "print a job's result (a keyed job's: its output manifest)", "result JOB [--json]",
			func() *flagSet { return n.newResultFlags().fs }, n.resultCmd},
		{"output", outputSummary, "output JOB [--partition N] [--format tsv|jsonl] [-o FILE]",
			func() *flagSet { return n.newOutputFlags().fs }, n.outputCmd},
		{"put", putSummary, "put LOCAL... CONTAINER/PREFIX [--parallel N]",
			func() *flagSet { return n.newTransferFlags("put").fs }, n.putCmd},
		{"get", getSummary, "get (JOB | CONTAINER/PREFIX) LOCALDIR [--format tsv|jsonl]",
			func() *flagSet { return n.newTransferFlags("get").fs }, n.getCmd},
		{"logs", "print a job's log: what its code logged, with worker, shard, attempt and (traced) trace id", "logs JOB [--follow] [--json]",
			func() *flagSet { return n.newLogsFlags().fs }, n.logsCmd},
		{"cancel", "cancel a job", "cancel JOB",
			func() *flagSet { return n.newJobFlags("cancel").fs }, n.cancelCmd},
		{"wait", "wait for a job, showing its progress; print its result (exit 0 succeeded, 1 failed, 3 cancelled)", "wait JOB [--quiet]",
			func() *flagSet { return n.newWaitFlags().fs }, n.waitCmd},
		{"schedule", scheduleSummary, `schedule add nightly --cron "0 3 * * *" --type T --params JSON`,
			func() *flagSet { return n.newScheduleFlags("").fs }, n.scheduleCmd},
		{"retry", "submit a failed or cancelled job again (a new id that names it)", "retry JOB",
			func() *flagSet { return n.newJobFlags("retry").fs }, n.retryCmd},
		{"delete", "delete a finished job and everything it left", "delete JOB",
			func() *flagSet { return n.newJobFlags("delete").fs }, n.deleteCmd},
		{"audit", auditSummary, "audit [--job JOB] [--actor NAME] [--limit N] [--json]",
			func() *flagSet { return n.newAuditFlags().fs }, n.auditCmd},
		{"types", "list the job types of the running workers", "types [--json]",
			func() *flagSet { return n.newTypesFlags().fs }, n.typesCmd},
		{"workers", "list the live workers and who leads", "workers [--json]",
			func() *flagSet { return n.newWorkersFlags().fs }, n.workersCmd},
		{"health", "exit 0 when the local worker is ready (container health check)", "health",
			func() *flagSet { return n.newHealthFlags().fs }, n.healthCmd},
		{"env", "list the environment variables the binary reads", "env",
			func() *flagSet { return n.newFlagSet("env") }, n.envCmd},
	}
}

func (n *Node) usage() string {
	var b strings.Builder
	fmt.Fprintf(&b, "usage: %s <command> [flags]\n\ncommands:\n", n.opts.Name)
	for _, c := range n.commands() {
		line := fmt.Sprintf("  %-8s %s", c.name, c.summary)
		if c.example != "" {
			line = fmt.Sprintf("%-52s %s %s", line+":", n.opts.Name, c.example)
		}
		fmt.Fprintln(&b, strings.TrimRight(line, " "))
	}
	fmt.Fprintf(&b, "\nRun '%s <command> -h' for the flags of a command.\n", n.opts.Name)
	return b.String()
}

// Run runs one command of the command line (args without the program name) and returns its exit
// status: 0 on success, 1 on failure, 2 on a usage mistake, 3 when the job waited for was
// cancelled. It writes results to stdout, and
// errors, help and logs to stderr.
func (n *Node) Run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, n.usage())
		return 2
	}
	var cmd *command
	for _, c := range n.commands() {
		if c.name == args[0] {
			cmd = &c
			break
		}
	}
	if cmd == nil {
		if args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
			fmt.Fprint(stdout, n.usage())
			return 0
		}
		fmt.Fprintf(stderr, "%s: unknown command %q\n\n%s", n.opts.Name, protocol.Clip(args[0], protocol.ClipLen), n.usage())
		return 2
	}
	err := cmd.run(ctx, args[1:], stdout, stderr)
	var ended *jobEndedError
	switch {
	case errors.As(err, &ended):
		fmt.Fprintf(stderr, "%s %s: %v\n", n.opts.Name, args[0], err)
		return ended.exitCode()
	case err == nil:
		return 0
	case errors.Is(err, flag.ErrHelp):
		return 0
	case errors.Is(err, errUsage):
		fmt.Fprintf(stderr, "%s %s: %v\n", n.opts.Name, args[0], err)
		return 2
	default:
		fmt.Fprintf(stderr, "%s %s: %v\n", n.opts.Name, args[0], err)
		return 1
	}
}
