package node

import (
	"context"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/mapagg/mapagg/client"
	"github.com/mapagg/mapagg/internal/audit"
)

const auditSummary = "list the audit trail: each accepted HTTP write, newest first"

type auditFlags struct {
	common
	json               bool
	limit              int
	before, job, actor string
	fs                 *flagSet
}

func (n *Node) newAuditFlags() *auditFlags {
	f := &auditFlags{fs: n.newFlagSet("audit")}
	f.common.register(f.fs)
	f.fs.BoolVar(&f.json, "json", false, "print JSON")
	f.fs.IntVar(&f.limit, "limit", 50, "show at most this many entries (1 to 1000)")
	f.fs.StringVar(&f.before, "before", "", "the next page: only entries older than this entry id (the cursor the previous page printed)")
	f.fs.StringVar(&f.job, "job", "", "only entries about this job (acted on or created)")
	f.fs.StringVar(&f.actor, "actor", "", `only entries by this token name ("dashboard": --dashboard-cancel actions)`)
	return f
}

func (n *Node) auditCmd(ctx context.Context, args []string, stdout, stderr io.Writer) (err error) {
	f := n.newAuditFlags()
	defer func() { err = f.explain(ctx, err) }()
	f.fs.SetOutput(stderr)
	if err := f.fs.parse(interleaved(f.fs.FlagSet, args)); err != nil {
		return usageErr("%v", err)
	}
	if f.fs.NArg() > 0 {
		return usageErr("unexpected arguments %v: filter with --job and --actor", f.fs.Args())
	}
	if f.limit < 1 || f.limit > 1000 {
		return usageErr("--limit %d: use 1 to 1000", f.limit)
	}
	if err := f.check(); err != nil {
		return usageErr("%v", err)
	}
	bc, err := f.blob()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	page, err := audit.NewLog(bc, f.jobsContainer).List(ctx, audit.Filter{Limit: f.limit, Before: f.before, Job: f.job, Actor: f.actor})
	if err != nil {
		if client.Refused(err) {
			return usageErr("%v", err)
		}
		return err
	}
	if f.json {
		return writeJSON(stdout, page)
	}
	if len(page.Entries) == 0 {
		fmt.Fprintln(stdout, "audit: no entries (each accepted write through the HTTP API is recorded)")
		return nil
	}
	tw := tabwriter.NewWriter(stdout, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "WHEN (UTC)\tACTOR\tROLE\tACTION\tJOB\tCREATED\tSCHEDULE\tREMOTE")
	for _, e := range page.Entries {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", e.At.UTC().Format("2006-01-02 15:04:05.000"), e.Actor, dash(e.Role),
			e.Action, dash(e.Job), dash(e.Created), dash(e.Schedule), dash(e.Remote))
	}
	tw.Flush()
	if page.Next != "" {
		fmt.Fprintf(stdout, "older entries: %s audit --before %s\n", n.opts.Name, page.Next)
	}
	return nil
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
