package node

import (
	"context"
	"fmt"
	"io"
	"time"
)

type jobFlags struct {
	common
	fs *flagSet
}

func (n *Node) newJobFlags(name string) *jobFlags {
	f := &jobFlags{fs: n.newFlagSet(name)}
	f.common.register(f.fs)
	return f
}

func (f *jobFlags) parseJob(args []string, stderr io.Writer) (string, error) {
	f.fs.SetOutput(stderr)
	if err := f.fs.parse(interleaved(f.fs.FlagSet, args)); err != nil {
		return "", usageErr("%v", err)
	}
	if f.fs.NArg() != 1 {
		return "", usageErr("expected one job id, got %d arguments", f.fs.NArg())
	}
	if err := f.check(); err != nil {
		return "", usageErr("%v", err)
	}
	return f.fs.Arg(0), nil
}

func (n *Node) resultCmd(ctx context.Context, args []string, stdout, stderr io.Writer) (err error) {
	f := n.newResultFlags()
	defer func() { err = f.explain(ctx, err) }()
	id, err := f.parseJob(args, stderr)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	cl, done, err := n.client(ctx, &f.common, false)
	if err != nil {
		return err
	}
	defer done()
	res, err := cl.Result(ctx, id)
	if err != nil {
		return err
	}
	return n.printResult(stdout, id, res, f.json)
}

func (n *Node) cancelCmd(ctx context.Context, args []string, stdout, stderr io.Writer) (err error) {
	f := n.newJobFlags("cancel")
	defer func() { err = f.explain(ctx, err) }()
	id, err := f.parseJob(args, stderr)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	cl, done, err := n.client(ctx, &f.common, true)
	if err != nil {
		return err
	}
	defer done()
	if _, err := cl.Cancel(ctx, id); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "cancel requested for %s\n", id)
	return nil
}

type waitFlags struct {
	jobFlags
	quiet, json bool
	poll        time.Duration
}

func (n *Node) newWaitFlags() *waitFlags {
	f := &waitFlags{}
	f.fs = n.newFlagSet("wait")
	f.common.register(f.fs)
	f.fs.BoolVar(&f.quiet, "quiet", false, "no progress and no result: only the exit status says how the job ended")
	f.fs.DurationVar(&f.poll, "poll", 250*time.Millisecond, "how often to read the job's progress")
	f.fs.BoolVar(&f.json, "json", false, "a keyed job's output manifest as JSON, not a summary (an aggregate's result is JSON already)")
	return f
}

// waitCmd follows an existing job to its end, as submit --wait does.
func (n *Node) waitCmd(ctx context.Context, args []string, stdout, stderr io.Writer) (err error) {
	f := n.newWaitFlags()
	defer func() { err = f.explain(ctx, err) }()
	id, err := f.parseJob(args, stderr)
	if err != nil {
		return err
	}
	if f.poll < 10*time.Millisecond {
		return usageErr("--poll %v: use at least 10ms", f.poll)
	}
	cl, done, err := n.client(ctx, &f.common, false)
	if err != nil {
		return err
	}
	defer done()
	return waitAndPrint(ctx, cl, id, f.poll, f.quiet, stdout, stderr, n.resultPrinter(f.json))
}
