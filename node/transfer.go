package node

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/schollz/progressbar/v3"
	"golang.org/x/term"

	"github.com/mapagg/mapagg/client"
	"github.com/mapagg/mapagg/internal/protocol"
	"github.com/mapagg/mapagg/internal/transfer"
)

const (
	putSummary = "upload files or folders to CONTAINER/PREFIX (made if absent)"
	getSummary = "download a keyed job's output records, or blobs"
)

type transferFlags struct {
	common
	parallel int
	format   string
	quiet    bool
	fs       *flagSet
}

func (n *Node) newTransferFlags(name string) *transferFlags {
	f := &transferFlags{fs: n.newFlagSet(name)}
	f.common.register(f.fs)
	f.fs.IntVar(&f.parallel, "parallel", 8, "how many files move at once (1 to 64)")
	f.fs.BoolVar(&f.quiet, "quiet", false, "no progress bar and no summary line")
	if name == "get" {
		f.fs.StringVar(&f.format, "format", client.FormatTSV, `a job's records as "tsv" (key<TAB>value) or "jsonl" ({"key":K,"value":V}); blobs are copied as they are`)
	}
	return f
}

func (f *transferFlags) parse(args []string, stderr io.Writer, what string) error {
	f.fs.SetOutput(stderr)
	if err := f.fs.parse(interleaved(f.fs.FlagSet, args)); err != nil {
		return usageErr("%v", err)
	}
	if f.fs.NArg() < 2 {
		return usageErr("expected %s, got %d arguments", what, f.fs.NArg())
	}
	if f.parallel < 1 || f.parallel > 64 {
		return usageErr("--parallel %d: use 1 to 64", f.parallel)
	}
	if err := f.check(); err != nil {
		return usageErr("%v", err)
	}
	return nil
}

// transfer is a transfer.Copier over the data plane's blob client, with a progress bar on a
// terminal (stderr) and nothing otherwise.
func (f *transferFlags) transfer(stderr io.Writer, desc string, total int64) (*transfer.Copier, func(), error) {
	cl, err := f.storage()
	if err != nil {
		return nil, nil, err
	}
	t := &transfer.Copier{Blob: cl.Data, Parallel: f.parallel}
	finish := func() {}
	if fd, ok := stderr.(*os.File); ok && !f.quiet && term.IsTerminal(int(fd.Fd())) {
		bar := progressbar.NewOptions64(total, progressbar.OptionSetWriter(stderr),
			progressbar.OptionSetDescription(desc), progressbar.OptionShowBytes(true),
			progressbar.OptionShowCount(), progressbar.OptionSetPredictTime(true),
			progressbar.OptionThrottle(100*time.Millisecond), progressbar.OptionClearOnFinish())
		t.Progress = func(n int64) { _ = bar.Add64(n) }
		finish = func() { _ = bar.Finish() }
	}
	return t, finish, nil
}

// summary prints the line that ends a put or get (unless --quiet).
func (f *transferFlags) summary(w io.Writer, verb, where string, st transfer.Stats, start time.Time) {
	if f.quiet {
		return
	}
	took := time.Since(start)
	rate := ""
	if s := took.Seconds(); s > 0 && st.Bytes > 0 {
		rate = fmt.Sprintf(", %s/s", humanBytes(int64(float64(st.Bytes)/s)))
	}
	fmt.Fprintf(w, "%s %d files, %s %s %s in %s%s; %d already there\n",
		verb, st.Files, humanBytes(st.Bytes), map[string]string{"put": "to", "got": "from"}[verb], where,
		took.Round(10*time.Millisecond), rate, st.Skipped)
}

// putCmd uploads files and folders: `put LOCAL... CONTAINER/PREFIX`.
func (n *Node) putCmd(ctx context.Context, args []string, stdout, stderr io.Writer) (err error) {
	f := n.newTransferFlags("put")
	defer func() { err = f.explain(ctx, err) }()
	if err := f.parse(args, stderr, "LOCAL... CONTAINER/PREFIX"); err != nil {
		return err
	}
	paths := f.fs.Args()
	target := paths[len(paths)-1]
	containerName, prefix, err := transfer.SplitTarget(target)
	if err != nil {
		return usageErr("%v", err)
	}
	items, err := transfer.PlanPut(paths[:len(paths)-1], prefix)
	if err != nil {
		return usageErr("%v", err)
	}
	var total int64
	for _, it := range items {
		total += it.Size
	}
	t, finish, err := f.transfer(stderr, "put "+target, total)
	if err != nil {
		return err
	}
	start := time.Now()
	st, err := t.Put(ctx, containerName, items)
	finish()
	if err != nil {
		return fmt.Errorf("%w (%d files put, %d already there: run the same put again to finish)", err, st.Files, st.Skipped)
	}
	f.summary(stdout, "put", target, st, start)
	return nil
}

// getCmd downloads a job's output or blobs: `get (JOB | CONTAINER/PREFIX) LOCALDIR`.
func (n *Node) getCmd(ctx context.Context, args []string, stdout, stderr io.Writer) (err error) {
	f := n.newTransferFlags("get")
	defer func() { err = f.explain(ctx, err) }()
	if err := f.parse(args, stderr, "JOB or CONTAINER/PREFIX, then LOCALDIR"); err != nil {
		return err
	}
	if f.fs.NArg() != 2 {
		return usageErr("expected JOB or CONTAINER/PREFIX, then LOCALDIR; got %d arguments", f.fs.NArg())
	}
	if err := (client.OutputOptions{Format: f.format}).Check(); err != nil {
		return usageErr("--format: %v", err)
	}
	src, dir := f.fs.Arg(0), f.fs.Arg(1)
	start := time.Now()
	if !strings.Contains(src, "/") {
		if err := protocol.CheckID(src); err != nil {
			return usageErr("%q is neither a job id nor CONTAINER/PREFIX (a whole container is CONTAINER/)", protocol.Clip(src, 80))
		}
		cl, done, err := n.client(ctx, &f.common, false)
		if err != nil {
			return err
		}
		defer done()
		m, err := cl.Output(ctx, src)
		if err != nil {
			return err
		}
		t, finish, err := f.transfer(stderr, "get "+src, m.Bytes)
		if err != nil {
			return err
		}
		st, err := t.GetOutput(ctx, src, m, dir, f.format)
		finish()
		if err != nil {
			return fmt.Errorf("%w (run the same get again to finish)", err)
		}
		f.summary(stdout, "got", "job "+src+" ("+fmt.Sprint(m.Records)+" records) into "+dir, st, start)
		return nil
	}
	if f.format != client.FormatTSV {
		return usageErr("--format is for a job's records; blobs are copied as they are")
	}
	containerName, prefix, err := transfer.SplitTarget(src)
	if err != nil {
		return usageErr("%v", err)
	}
	sc, err := f.storage()
	if err != nil {
		return err
	}
	items, err := (&transfer.Copier{Blob: sc.Data}).PlanGet(ctx, containerName, prefix, dir)
	if err != nil {
		return err
	}
	var total int64
	for _, it := range items {
		total += it.Size
	}
	t, finish, err := f.transfer(stderr, "get "+src, total)
	if err != nil {
		return err
	}
	st, err := t.Get(ctx, containerName, items)
	finish()
	if err != nil {
		return fmt.Errorf("%w (%d files got, %d already there: run the same get again to finish)", err, st.Files, st.Skipped)
	}
	f.summary(stdout, "got", src+" into "+dir, st, start)
	return nil
}
