package node

import (
	"context"
	"flag"
	"fmt"
	"io"
	"time"
)

type jobFlags struct {
	common
	fs *flag.FlagSet
}

func newJobFlags(name string) *jobFlags {
	f := &jobFlags{fs: flag.NewFlagSet(name, flag.ContinueOnError)}
	f.common.register(f.fs)
	return f
}

func (f *jobFlags) parseJob(args []string, stderr io.Writer) (string, error) {
	f.fs.SetOutput(stderr)
	if err := parse(f.fs, interleaved(f.fs, args)); err != nil {
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

func resultCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	f := newJobFlags("result")
	id, err := f.parseJob(args, stderr)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	cl, done, err := f.client(ctx, false)
	if err != nil {
		return err
	}
	defer done()
	res, err := cl.Result(ctx, id)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "%s\n", res)
	return nil
}

func cancelCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	f := newJobFlags("cancel")
	id, err := f.parseJob(args, stderr)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	cl, done, err := f.client(ctx, true)
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
