package node

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/schollz/progressbar/v3"
	"golang.org/x/term"

	"github.com/mapagg/mapagg/client"
	"github.com/mapagg/mapagg/jobs"
)

type submitFlags struct {
	common
	typ, params, paramsFile string
	wait                    bool
	poll                    time.Duration
	fs                      *flag.FlagSet
}

func newSubmitFlags() *submitFlags {
	f := &submitFlags{fs: flag.NewFlagSet("submit", flag.ContinueOnError)}
	f.common.register(f.fs)
	f.fs.StringVar(&f.typ, "type", "", "job type: "+joinTypes())
	f.fs.StringVar(&f.params, "params", "", "job parameters as JSON")
	f.fs.StringVar(&f.paramsFile, "params-file", "", "read the job parameters from this file")
	f.fs.BoolVar(&f.wait, "wait", false, "wait for the job, showing its progress, then print the result")
	f.fs.DurationVar(&f.poll, "poll", 250*time.Millisecond, "with --wait: how often to read the job's progress")
	return f
}

func joinTypes() string {
	s := ""
	for i, t := range jobs.Default().Types() {
		if i > 0 {
			s += ", "
		}
		s += t
	}
	return s
}

func submitCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	f := newSubmitFlags()
	f.fs.SetOutput(stderr)
	if err := parse(f.fs, args); err != nil {
		return usageErr("%v", err)
	}
	if f.fs.NArg() > 0 {
		return usageErr("unexpected arguments %v", f.fs.Args())
	}
	if f.typ == "" {
		return usageErr("--type is required (one of %s)", joinTypes())
	}
	if f.params != "" && f.paramsFile != "" {
		return usageErr("give --params or --params-file, not both")
	}
	params := []byte(f.params)
	if f.paramsFile != "" {
		var err error
		if params, err = os.ReadFile(f.paramsFile); err != nil {
			return usageErr("%v", err)
		}
	}
	if len(params) == 0 {
		params = []byte("{}")
	}
	if !json.Valid(params) {
		return usageErr("--params is not valid JSON: %s", oneLine(string(params), 120))
	}
	if err := f.check(); err != nil {
		return usageErr("%v", err)
	}
	cl, done, err := f.client(ctx, true)
	if err != nil {
		return err
	}
	defer done()
	// Refuse a bad job before touching storage at all.
	if _, err := cl.Validate(f.typ, params); err != nil {
		return usageErr("%v", err)
	}
	tctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := f.ensure(tctx); err != nil {
		return err
	}
	id, err := cl.Submit(tctx, f.typ, params)
	if err != nil {
		return err
	}
	fmt.Fprintln(stdout, id)
	if !f.wait {
		return nil
	}
	return waitAndPrint(ctx, cl, id, f.poll, stdout, stderr)
}

// waitAndPrint follows a job to its end: a live progress bar on a terminal, plain lines
// otherwise; then the result on stdout. A job that did not succeed is an error.
func waitAndPrint(ctx context.Context, cl *client.Client, id string, poll time.Duration, stdout, stderr io.Writer) error {
	var bar *progressbar.ProgressBar
	tty := false
	if fd, ok := stderr.(*os.File); ok && term.IsTerminal(int(fd.Fd())) {
		tty = true
	}
	lastLine := time.Time{}
	start := time.Now()
	st, err := cl.Wait(ctx, id, poll, func(s client.Status) {
		if tty {
			if bar == nil && s.ShardsTotal > 0 {
				bar = progressbar.NewOptions(s.ShardsTotal, progressbar.OptionSetWriter(stderr),
					progressbar.OptionSetDescription(id), progressbar.OptionShowCount(), progressbar.OptionShowIts(),
					progressbar.OptionSetItsString("shards"), progressbar.OptionSetPredictTime(true),
					progressbar.OptionThrottle(100*time.Millisecond), progressbar.OptionClearOnFinish())
			}
			if bar != nil {
				_ = bar.Set(s.ShardsDone)
			}
			return
		}
		if time.Since(lastLine) >= time.Second || s.State.Terminal() {
			lastLine = time.Now()
			rate := float64(s.ShardsDone) / time.Since(start).Seconds()
			fmt.Fprintf(stderr, "%s %s %d/%d shards (%.0f/s)\n", id, s.State, s.ShardsDone, s.ShardsTotal, rate)
		}
	})
	if bar != nil {
		_ = bar.Finish()
	}
	if err != nil {
		if errors.Is(err, context.Canceled) {
			return fmt.Errorf("stopped waiting; the job goes on: worker status %s", id)
		}
		return err
	}
	if st.State != jobs.StateSucceeded {
		return fmt.Errorf("job %s %s: %s", id, st.State, st.Error)
	}
	fmt.Fprintf(stdout, "%s\n", st.Result)
	return nil
}
