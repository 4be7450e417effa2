// Package node assembles a worker node (election, coordinator, worker, the NATS wiring, signals,
// flags and environment) from the job types registered in jobs.Default(), and runs the worker
// command line: run, submit, status, result, cancel, workers, health, env. A custom binary is its
// own main that registers its job types and calls Main:
//
//	func main() {
//		jobs.Register(myJob{})
//		node.Main()
//	}
package node

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
)

const usage = `usage: worker <command> [flags]

commands:
  run       join the cluster: process shards, and coordinate when elected leader
  submit    submit a job:            worker submit --type primes --params '{"from":0,"to":1000000,"shards":10}' [--wait]
  status    show the leader and jobs: worker status [JOB] [--json]
  result    print a job's result:     worker result JOB
  cancel    cancel a job:             worker cancel JOB
  workers   list the live workers and who leads: worker workers [--json]
  health    exit 0 when the local worker is ready (container health check): worker health
  env       list the environment variables the binary reads

Run 'worker <command> -h' for the flags of a command.
`

// errUsage marks a mistake in the command line (exit status 2).
var errUsage = errors.New("usage")

// Main runs the worker command line (os.Args) with the job types registered in jobs.Default() and
// exits with its status: 0 on success, 1 on failure, 2 on a usage mistake. SIGINT and SIGTERM stop
// `run` gracefully (a leader hands over its lease).
func Main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	os.Exit(Run(ctx, os.Args[1:], os.Stdout, os.Stderr))
}

// Run runs one command of the worker command line and returns its exit status.
func Run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	cmds := map[string]func(context.Context, []string, io.Writer, io.Writer) error{
		"run": runCmd, "submit": submitCmd, "status": statusCmd, "result": resultCmd, "cancel": cancelCmd, "workers": workersCmd, "health": healthCmd,
		"env": func(_ context.Context, _ []string, out, _ io.Writer) error { registerAll(); printEnv(out); return nil },
	}
	cmd, ok := cmds[args[0]]
	if !ok {
		if args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
			fmt.Fprint(stdout, usage)
			return 0
		}
		fmt.Fprintf(stderr, "worker: unknown command %q\n\n%s", args[0], usage)
		return 2
	}
	err := cmd(ctx, args[1:], stdout, stderr)
	switch {
	case err == nil:
		return 0
	case errors.Is(err, flag.ErrHelp):
		return 0
	case errors.Is(err, errUsage):
		fmt.Fprintf(stderr, "worker %s: %v\n", args[0], err)
		return 2
	default:
		fmt.Fprintf(stderr, "worker %s: %v\n", args[0], err)
		return 1
	}
}

// registerAll builds every subcommand's flag set, so knownEnv lists every variable.
func registerAll() {
	newRunFlags()
	newSubmitFlags()
	newStatusFlags()
	newJobFlags("result")
	newJobFlags("cancel")
	newWorkersFlags()
	newHealthFlags()
}

// usageError is a mistake in the command line or its input; it exits with status 2.
type usageError struct{ msg string }

func (e usageError) Error() string        { return e.msg }
func (e usageError) Is(target error) bool { return target == errUsage }

func usageErr(format string, a ...any) error {
	for _, v := range a {
		if err, ok := v.(error); ok && errors.Is(err, flag.ErrHelp) {
			return flag.ErrHelp
		}
	}
	return usageError{fmt.Sprintf(format, a...)}
}
