package node

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/schollz/progressbar/v3"
	"golang.org/x/term"

	"github.com/mapagg/mapagg/client"
	"github.com/mapagg/mapagg/internal/clusterask"
	"github.com/mapagg/mapagg/internal/protocol"
	"github.com/mapagg/mapagg/internal/queue"
	"github.com/mapagg/mapagg/internal/telemetry"
	"github.com/mapagg/mapagg/jobs"
	"github.com/mapagg/mapagg/store"
)

type submitFlags struct {
	common
	typ, params, paramsFile string
	wait, quiet, json       bool
	priority                int
	poll                    time.Duration
	fs                      *flagSet
	after                   string // comma-separated job ids (after.go)
	retries                 int
	idempotencyKey          string
	outputFormat            string
}

func (n *Node) newSubmitFlags() *submitFlags {
	f := &submitFlags{fs: n.newFlagSet("submit")}
	f.common.register(f.fs)
	f.fs.StringVar(&f.typ, "type", "", "job type: one a running worker has (see worker types), checked before anything is written; this binary has "+joinOrNone(n.opts.Registry.Types()))
	f.fs.StringVar(&f.params, "params", "", "job parameters as JSON")
	f.fs.StringVar(&f.paramsFile, "params-file", "", "read the job parameters from this file")
	f.fs.StringVar(&f.idempotencyKey, "idempotency-key", "", "makes the submit safe to repeat: every submit with this key (1 to 255 printable ASCII characters, e.g. a UUID) within a day prints the first one's job id and creates nothing")
	f.fs.IntVar(&f.priority, "priority", 0, fmt.Sprintf("job priority, %d to %d: each step up doubles the job's share of the workers against running jobs of its type", protocol.MinPriority, protocol.MaxPriority))
	f.fs.StringVar(&f.outputFormat, "output-format", "", "how a keyed job stores its output blobs: "+strings.Join(jobs.OutputFormats(), ", ")+
		" (.zst: compressed with zstd); default TSV for a job whose keys are text, JSON lines otherwise. Keyed jobs only; worker output reads any of them")
	f.fs.BoolVar(&f.wait, "wait", false, "wait for the job and print only its result on stdout (id and progress on stderr); the exit status says how it ended")
	f.fs.BoolVar(&f.quiet, "quiet", false, "print only the job id on stdout, and no progress (with --wait the exit status says how the job ended)")
	f.fs.DurationVar(&f.poll, "poll", 250*time.Millisecond, "with --wait: how often to read the job's progress")
	f.fs.BoolVar(&f.json, "json", false, "with --wait: a keyed job's output manifest as JSON, not a summary (an aggregate's result is JSON already)")
	f.registerAfter()
	return f
}

func (n *Node) submitCmd(ctx context.Context, args []string, stdout, stderr io.Writer) (err error) {
	f := n.newSubmitFlags()
	defer func() { err = f.explain(ctx, err) }()
	f.fs.SetOutput(stderr)
	if err := f.fs.parse(args); err != nil {
		return usageErr("%v", err)
	}
	if f.fs.NArg() > 0 {
		return usageErr("unexpected arguments %v", f.fs.Args())
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
	if err := f.check(); err != nil {
		return usageErr("%v", err)
	}
	cl, done, err := n.submitClient(ctx, &f.common)
	if err != nil {
		return err
	}
	defer done()
	// With OTEL_EXPORTER_OTLP_ENDPOINT set, the job's trace gets this submit's span.
	tracing, err := telemetry.New(ctx, telemetry.Config{Service: "mapagg-cli"})
	if err != nil {
		return err
	}
	defer func() {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		_ = tracing.Shutdown(sctx)
	}()
	ctx = telemetry.NewContext(ctx, tracing)
	tctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	// Submit is the one validation (the job's fields, then its type and parameters); a job it
	// refuses is a usage error, and nothing was written.
	opts := append(f.submitOptions(), client.WithPriority(f.priority), client.WithOutputFormat(f.outputFormat))
	if f.idempotencyKey != "" {
		opts = append(opts, client.WithIdempotencyKey(f.idempotencyKey))
	}
	id, err := f.ensured(tctx, func() (string, error) {
		return cl.Submit(tctx, f.typ, params, opts...)
	})
	if client.Refused(err) {
		return usageErr("%v", err)
	}
	if err != nil {
		return err
	}
	if !f.wait || f.quiet {
		fmt.Fprintln(stdout, id)
	} else {
		fmt.Fprintln(stderr, id)
	}
	if !f.wait {
		return nil
	}
	return waitAndPrint(ctx, cl, id, f.poll, f.quiet, stdout, stderr, n.resultPrinter(f.json))
}

// ensured runs submit, and once more after creating the jobs container and queue when they are
// missing (a first submit on a fresh account). A refused job is refused before either is made.
func (c *common) ensured(ctx context.Context, submit func() (string, error)) (string, error) {
	id, err := submit()
	if err == nil || client.Refused(err) || !(errors.Is(err, store.ErrNotFound) || errors.Is(err, queue.ErrNotFound)) {
		return id, err
	}
	if err := c.ensure(ctx); err != nil {
		return "", err
	}
	return submit()
}

// submitClient is the client of submit: the running workers validate every type, for they are
// the build that runs the job (a cluster of another build may lack a type this binary has).
func (n *Node) submitClient(ctx context.Context, c *common) (*client.Client, func(), error) {
	cl, done, err := n.client(ctx, c, true)
	if err != nil {
		return nil, nil, err
	}
	if v, ok := cl.Validator.(*clusterask.Validator); ok && n.opts.Registry != nil {
		cl.Registry, cl.Validator = nil, clusterFirst{reg: n.opts.Registry, cluster: v}
	}
	return cl, done, nil
}

// clusterFirst validates every type through the running workers. Without NATS, a type this
// binary has is validated here, to say what is wrong with it, and is refused unconfirmed.
type clusterFirst struct {
	reg     *jobs.Registry
	cluster *clusterask.Validator
}

func (v clusterFirst) ValidateJob(ctx context.Context, typ string, params json.RawMessage) error {
	job, err := v.reg.Lookup(typ)
	if v.cluster.Conn != nil || err != nil {
		return v.cluster.ValidateJob(ctx, typ, params)
	}
	if err := job.Validate(params); err != nil {
		return err
	}
	return fmt.Errorf("cannot check that a running worker has job type %q: NATS at %s is unreachable: %w", typ, v.cluster.URL, v.cluster.ConnErr)
}

// jobEndedError is a job that ended other than succeeded; its state sets the exit status.
type jobEndedError struct {
	id    string
	state jobs.State
	msg   string
}

func (e *jobEndedError) Error() string { return fmt.Sprintf("job %s %s: %s", e.id, e.state, e.msg) }

// exitCode is the command's exit status for the job's state: 3 cancelled, 1 otherwise.
func (e *jobEndedError) exitCode() int {
	if e.state == jobs.StateCancelled {
		return 3
	}
	return 1
}

// waitAndPrint follows a job to its end: a live progress bar on a terminal, plain lines
// otherwise (none when quiet); then the result on stdout with print (not when quiet). A job that
// did not succeed is a *jobEndedError.
func waitAndPrint(ctx context.Context, cl *client.Client, id string, poll time.Duration, quiet bool, stdout, stderr io.Writer, print resultPrinter) error {
	var bar *progressbar.ProgressBar
	tty := false
	if fd, ok := stderr.(*os.File); ok && term.IsTerminal(int(fd.Fd())) {
		tty = true
	}
	lastLine := time.Time{}
	start := time.Now()
	st, err := cl.Wait(ctx, id, poll, func(s client.Status) {
		if quiet {
			return
		}
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
		return &jobEndedError{id: id, state: st.State, msg: st.Error}
	}
	if quiet {
		return nil
	}
	res, err := cl.ResultOf(ctx, st) // Wait read it already
	if err != nil {
		return err
	}
	return print(stdout, id, res)
}
