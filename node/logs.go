package node

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strings"
	"time"

	"github.com/mapagg/mapagg/internal/joblog"
)

type logsFlags struct {
	jobFlags
	follow, json bool
	poll         time.Duration
}

func (n *Node) newLogsFlags() *logsFlags {
	f := &logsFlags{}
	f.fs = n.newFlagSet("logs")
	f.common.register(f.fs)
	f.fs.BoolVar(&f.follow, "follow", false, "keep printing new lines until the job ends")
	f.fs.BoolVar(&f.json, "json", false, "one JSON object a line, as stored")
	f.fs.DurationVar(&f.poll, "poll", time.Second, "how often --follow reads new lines")
	return f
}

// logsCmd prints a job's log, and with --follow the lines that come until the job ends.
func (n *Node) logsCmd(ctx context.Context, args []string, stdout, stderr io.Writer) (err error) {
	f := n.newLogsFlags()
	defer func() { err = f.explain(ctx, err) }()
	id, err := f.parseJob(args, stderr)
	if err != nil {
		return err
	}
	if f.poll < 50*time.Millisecond {
		return usageErr("--poll %v: use at least 50ms", f.poll)
	}
	cl, done, err := n.client(ctx, &f.common, false)
	if err != nil {
		return err
	}
	defer done()
	bc, err := f.blob()
	if err != nil {
		return err
	}
	if _, err := cl.Status(ctx, id); err != nil {
		return err
	}
	jl := joblog.New(bc, f.jobsContainer)
	var off int64
	for {
		page, err := jl.Read(ctx, id, off, 0)
		if err != nil {
			return err
		}
		for _, ln := range page.Lines {
			if err := printLogLine(stdout, ln, f.json); err != nil {
				return err
			}
		}
		off = page.Next
		if len(page.Lines) == 1000 {
			continue // more to read at once
		}
		if !f.follow {
			return nil
		}
		st, err := cl.Status(ctx, id)
		if err != nil {
			return err
		}
		if st.State.Terminal() {
			// One last read: lines written just before the end.
			last, err := jl.Read(ctx, id, off, 0)
			if err != nil {
				return err
			}
			for _, ln := range last.Lines {
				if err := printLogLine(stdout, ln, f.json); err != nil {
					return err
				}
			}
			return nil
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(f.poll):
		}
	}
}

// printLogLine prints ln as `TIME LEVEL worker shard/attempt msg k=v ...`, or as JSON.
func printLogLine(w io.Writer, ln joblog.Line, asJSON bool) error {
	if asJSON {
		b, err := json.Marshal(ln)
		if err != nil {
			return err
		}
		_, err = fmt.Fprintf(w, "%s\n", b)
		return err
	}
	where := ln.Worker
	if ln.Shard != nil {
		where += fmt.Sprintf(" shard %d", *ln.Shard)
		if ln.Attempt > 0 {
			where += fmt.Sprintf(" attempt %d", ln.Attempt)
		}
	}
	if ln.Source != "" {
		where += " " + ln.Source
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%s %-5s [%s] %s", ln.At.UTC().Format("15:04:05.000"), ln.Level, strings.TrimSpace(where), ln.Msg)
	keys := make([]string, 0, len(ln.Attrs))
	for k := range ln.Attrs {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		fmt.Fprintf(&b, " %s=%q", k, ln.Attrs[k])
	}
	if ln.TraceID != "" {
		fmt.Fprintf(&b, " trace_id=%s", ln.TraceID)
	}
	_, err := fmt.Fprintln(w, b.String())
	return err
}
