package node

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/mapagg/mapagg/client"
	"github.com/mapagg/mapagg/election"
	"github.com/mapagg/mapagg/internal/api"
	"github.com/mapagg/mapagg/jobs"
)

type statusFlags struct {
	common
	json              bool
	limit             int
	state, typ, since string
	before            string
	fs                *flagSet
}

func (n *Node) newStatusFlags() *statusFlags {
	f := &statusFlags{fs: n.newFlagSet("status")}
	f.common.register(f.fs)
	f.fs.BoolVar(&f.json, "json", false, "print JSON")
	f.fs.IntVar(&f.limit, "limit", client.DefaultQueryLimit, fmt.Sprintf("show at most this many of the most recent jobs (at most %d)", client.MaxQueryLimit))
	f.fs.StringVar(&f.state, "state", "", "only jobs in this state: queued, running, succeeded, failed, cancelled or unreadable")
	f.fs.StringVar(&f.typ, "type", "", "only jobs of this type")
	f.fs.StringVar(&f.since, "since", "", "only jobs submitted since this time (2026-11-21T12:00:00Z) or this long ago (90m)")
	f.fs.StringVar(&f.before, "before", "", "the next page: only jobs older than this job id (the cursor the previous page printed)")
	return f
}

// filter is the client.Filter the flags describe.
func (f *statusFlags) filter() (client.Filter, error) {
	cf := client.Filter{State: jobs.State(f.state), Type: f.typ, Limit: f.limit, Before: f.before}
	if f.since != "" {
		t, err := api.ParseSince(f.since, time.Now())
		if err != nil {
			return cf, err
		}
		cf.Since = t
	}
	return cf, cf.Check()
}

// leaderJSON is the leader object of `worker status --json`.
type leaderJSON struct {
	ID    string `json:"id"`
	Epoch uint64 `json:"epoch"`
	Since string `json:"since"`
}

type statusJSON struct {
	Leader *leaderJSON      `json:"leader"`
	Jobs   []*client.Status `json:"jobs"`
	Next   string           `json:"next,omitempty"` // --before of the next page
	// ServedBy is the worker that answered over NATS; empty when read from storage directly.
	ServedBy string `json:"served_by,omitempty"`
}

func (n *Node) statusCmd(ctx context.Context, args []string, stdout, stderr io.Writer) (err error) {
	f := n.newStatusFlags()
	defer func() { err = f.explain(ctx, err) }()
	f.fs.SetOutput(stderr)
	if err := f.fs.parse(interleaved(f.fs.FlagSet, args)); err != nil {
		return usageErr("%v", err)
	}
	if f.fs.NArg() > 1 {
		return usageErr("at most one job id, got %v", f.fs.Args())
	}
	if err := f.check(); err != nil {
		return usageErr("%v", err)
	}
	filter, err := f.filter()
	if err != nil {
		return usageErr("%v", err)
	}
	if f.fs.NArg() == 1 && (f.state != "" || f.typ != "" || f.since != "" || f.before != "") {
		return usageErr("--state, --type, --since and --before filter the job list: give them without a job id")
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	req := statusRequest{Container: f.jobsContainer, Job: f.fs.Arg(0)}
	if req.Job == "" {
		req = statusRequest{Container: f.jobsContainer, State: f.state, Type: f.typ, Since: filter.Since, Limit: f.limit, Before: f.before}
	}
	if rep := askStatus(ctx, &f.common, req); rep != nil && !rep.NoSuchJob {
		if rep.Job != nil {
			ans := n.explainJob(ctx, &f.common, rep.Job)
			if f.json {
				return writeJSON(stdout, jobWithWhy{Status: rep.Job, Why: ans})
			}
			printLeader(stdout, rep.Leader)
			printJobs(stdout, []*client.Status{rep.Job})
			printWhy(stdout, ans)
			return nil
		}
		return printStatus(stdout, statusJSON{Leader: rep.Leader, Jobs: rep.Jobs, Next: rep.Next, ServedBy: rep.Worker}, f.json)
	}
	bc, err := f.blob()
	if err != nil {
		return err
	}
	info, err := election.ReadLeader(ctx, bc, f.leaseContainer, "lease")
	if err != nil {
		return fmt.Errorf("read leader: %w", err)
	}
	var leader *leaderJSON
	if info != nil {
		leader = &leaderJSON{ID: info.ID, Epoch: info.Epoch, Since: info.Since.UTC().Format(time.RFC3339)}
	}
	cl, done, err := n.client(ctx, &f.common, false)
	if err != nil {
		return err
	}
	defer done()

	if f.fs.NArg() == 1 {
		st, err := cl.Status(ctx, f.fs.Arg(0))
		if err != nil {
			return err
		}
		ans := n.explainJob(ctx, &f.common, st)
		if f.json {
			return writeJSON(stdout, jobWithWhy{Status: st, Why: ans})
		}
		printLeader(stdout, leader)
		printJobs(stdout, []*client.Status{st})
		printWhy(stdout, ans)
		return nil
	}
	page, err := cl.Query(ctx, filter)
	if err != nil {
		return err
	}
	if len(page.Jobs) == 0 {
		if err := f.missingContainer(ctx); err != nil {
			return err
		}
	}
	// Oldest first, the newest at the bottom, as a log reads.
	return printStatus(stdout, statusJSON{Leader: leader, Jobs: oldestFirst(page.Jobs), Next: page.Next}, f.json)
}

func printStatus(stdout io.Writer, out statusJSON, asJSON bool) error {
	if asJSON {
		return writeJSON(stdout, out)
	}
	printLeader(stdout, out.Leader)
	printJobs(stdout, out.Jobs)
	if out.Next != "" {
		fmt.Fprintf(stdout, "older jobs: worker status --before %s\n", out.Next)
	}
	return nil
}

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

func printLeader(w io.Writer, l *leaderJSON) {
	if l == nil {
		fmt.Fprintln(w, "leader: none (no worker holds the lease)")
		return
	}
	since, _ := time.Parse(time.RFC3339, l.Since)
	fmt.Fprintf(w, "leader: %s (epoch %d, since %s, %s ago)\n", l.ID, l.Epoch, l.Since, time.Since(since).Round(time.Second))
}

func printJobs(w io.Writer, list []*client.Status) {
	if len(list) == 0 {
		fmt.Fprintln(w, "jobs: none")
		return
	}
	tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "JOB\tTYPE\tSTATE\tDONE/TOTAL\tPRIO\tSHARE\tSUBMITTED (UTC)\tTOOK\tERROR")
	for _, s := range list {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d/%d\t%d\t%s\t%s\t%s\t%s\n", s.ID, s.Type, s.State, s.ShardsDone, s.ShardsTotal, s.Priority, share(s),
			submitted(s), took(s, time.Now()), oneLine(s.Error+s.Unreadable+s.Note, 80))
	}
	tw.Flush()
}

// share is a running job's share of its type's workers, or a queued job's place in the queue.
func share(s *client.Status) string {
	switch {
	case s.Share > 0:
		return fmt.Sprintf("%.0f%%", 100*s.Share)
	case s.Position > 0:
		return fmt.Sprintf("#%d", s.Position)
	}
	return "-"
}

func submitted(s *client.Status) string {
	if s.SubmittedAt.IsZero() {
		return "-"
	}
	return s.SubmittedAt.UTC().Format("2006-01-02 15:04:05")
}

// took is how long a job ran until it finished, or has been waiting and running so far.
func took(s *client.Status, now time.Time) string {
	switch {
	case s.SubmittedAt.IsZero():
		return "-"
	case s.FinishedAt != nil:
		return s.FinishedAt.Sub(s.SubmittedAt).Round(100 * time.Millisecond).String()
	case s.State.Terminal():
		return "-"
	default:
		return now.Sub(s.SubmittedAt).Round(time.Second).String() + " so far"
	}
}

func oneLine(s string, n int) string {
	s = strings.ReplaceAll(s, "\n", " ")
	if len(s) > n {
		return s[:n-1] + "…"
	}
	return s
}

// interleaved moves positional arguments after the flags, so `status JOB --json` works as well
// as `status --json JOB`.
func interleaved(fs *flag.FlagSet, args []string) []string {
	var flags, pos []string
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			pos = append(pos, args[i+1:]...)
			break
		}
		if !strings.HasPrefix(a, "-") || a == "-" {
			pos = append(pos, a)
			continue
		}
		flags = append(flags, a)
		name := strings.TrimLeft(a, "-")
		if strings.Contains(name, "=") {
			continue
		}
		if f := fs.Lookup(name); f != nil {
			if bf, ok := f.Value.(interface{ IsBoolFlag() bool }); ok && bf.IsBoolFlag() {
				continue
			}
			if i+1 < len(args) {
				flags = append(flags, args[i+1])
				i++
			}
		}
	}
	return append(flags, pos...)
}
