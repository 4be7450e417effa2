package node

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/mapagg/mapagg/client"
	"github.com/mapagg/mapagg/internal/protocol"
	"github.com/mapagg/mapagg/jobs"
)

const scheduleSummary = "recurring jobs: add, list, pause, resume, delete, trigger"

// scheduleSubs are the subcommands of `schedule`, with their usage.
var scheduleSubs = []struct{ name, usage, summary string }{
	{"add", `add NAME (--every DURATION | --cron "m h dom mon dow") (--type T --params JSON | --chain FILE) [--overlap skip|queue|allow] [--catch-up DURATION] [--time-zone TZ]`, "add a schedule: the leader makes its job (or chain) at every tick"},
	{"list", "list [--json]", "list the schedules with their last and next tick"},
	{"pause", "pause NAME", "stop a schedule's ticks (not caught up on resume)"},
	{"resume", "resume NAME", "start a paused schedule's ticks again"},
	{"delete", "delete NAME", "delete a schedule (the jobs it made stay)"},
	{"trigger", "trigger NAME", "make the schedule's job now, whatever its overlap policy"},
}

type scheduleFlags struct {
	common
	fs                                *flagSet
	every, catchUp                    time.Duration
	cron, tz, typ, params, paramsFile string
	overlap, chain                    string
	json                              bool
}

// newScheduleFlags returns the flags of `schedule SUB` ("" for `schedule` itself).
func (n *Node) newScheduleFlags(sub string) *scheduleFlags {
	f := &scheduleFlags{fs: n.newFlagSet("schedule")}
	f.common.register(f.fs)
	prog := n.opts.Name
	switch sub {
	case "":
		f.fs.Usage = func() {
			out := f.fs.Output()
			fmt.Fprintf(out, "%s schedule: %s\nThe leader makes a schedule's job once per tick, however many leaders fail.\n\nsubcommands:\n", prog, scheduleSummary)
			for _, s := range scheduleSubs {
				fmt.Fprintf(out, "  %-8s %s\n           %s schedule %s\n", s.name, s.summary, prog, s.usage)
			}
			fmt.Fprintf(out, "\nRun '%s schedule <subcommand> -h' for its flags.\n\nflags of %s schedule:\n", prog, prog)
			f.fs.PrintDefaults()
		}
		return f
	case "add":
		f.fs.DurationVar(&f.every, "every", 0, "fire every DURATION (whole seconds, at least 1s; ticks are multiples of it since the Unix epoch)")
		f.fs.StringVar(&f.cron, "cron", "", `fire on a cron schedule: "minute hour day-of-month month day-of-week"`)
		f.fs.StringVar(&f.tz, "time-zone", "", "time zone of --cron, an IANA name such as Europe/Berlin (default UTC)")
		f.fs.StringVar(&f.typ, "type", "", "job type (see `types`)")
		f.fs.StringVar(&f.params, "params", "", "job parameters as JSON")
		f.fs.StringVar(&f.paramsFile, "params-file", "", "read the job parameters from this file")
		f.fs.StringVar(&f.chain, "chain", "", `make a chain per tick, instead of --type and --params: FILE is a JSON list of steps `+
			`[{"type": T, "params": {...}}, ...]; each step runs after the previous one, and "$prev" in its params is the previous job's id `+
			`(e.g. {"job": "$prev"} reads its output)`)
		f.fs.StringVar(&f.overlap, "overlap", protocol.OverlapSkip, "a tick while the previous job runs: skip (no job), queue (one waits for it) or allow")
		f.fs.DurationVar(&f.catchUp, "catch-up", protocol.DefaultCatchUp, "ticks missed while there was no leader fire late within this window (at least 10s)")
	case "list":
		f.fs.BoolVar(&f.json, "json", false, "print JSON")
	}
	for _, s := range scheduleSubs {
		if s.name == sub {
			f.fs.Usage = func() {
				out := f.fs.Output()
				fmt.Fprintf(out, "%s schedule %s: %s\nusage: %s schedule %s\n\nflags of %s schedule %s:\n", prog, sub, s.summary, prog, s.usage, prog, sub)
				f.fs.PrintDefaults()
			}
		}
	}
	return f
}

func (n *Node) scheduleCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 || strings.HasPrefix(args[0], "-") || args[0] == "help" {
		f := n.newScheduleFlags("")
		f.fs.SetOutput(stderr)
		if len(args) > 0 && args[0] == "help" {
			args = []string{"-h"}
		}
		if err := f.fs.parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return err
			}
			return usageErr("%v", err)
		}
		return usageErr("a subcommand is required: add, list, pause, resume, delete or trigger (`%s schedule -h` explains them)", n.opts.Name)
	}
	sub := args[0]
	known := false
	for _, s := range scheduleSubs {
		known = known || s.name == sub
	}
	if !known {
		return usageErr("unknown subcommand %q: use add, list, pause, resume, delete or trigger", protocol.Clip(sub, protocol.ClipLen))
	}
	f := n.newScheduleFlags(sub)
	f.fs.SetOutput(stderr)
	if err := f.fs.parse(interleaved(f.fs.FlagSet, args[1:])); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return usageErr("%v", err)
	}
	var name string
	switch {
	case sub == "list":
		if f.fs.NArg() > 0 {
			return usageErr("unexpected arguments %v", f.fs.Args())
		}
	case f.fs.NArg() != 1:
		return usageErr("expected one schedule name, got %d arguments", f.fs.NArg())
	default:
		name = f.fs.Arg(0)
		if err := protocol.CheckScheduleName(name); err != nil {
			return usageErr("%v", err)
		}
	}
	var opts client.ScheduleOptions
	if sub == "add" {
		var err error
		if opts, err = n.scheduleOptions(ctx, f, name); err != nil {
			return err
		}
	}
	if err := f.check(); err != nil {
		return usageErr("%v", err)
	}
	cl, done, err := n.client(ctx, &f.common, sub == "add" || sub == "trigger")
	if err != nil {
		return err
	}
	defer done()
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	switch sub {
	case "add":
		if err := f.ensure(ctx); err != nil {
			return err
		}
		if _, err := cl.AddSchedule(ctx, name, opts); err != nil {
			if errors.Is(err, jobs.ErrUnknownType) || errors.Is(err, jobs.ErrBadParams) || errors.Is(err, protocol.ErrBadSchedule) {
				return usageErr("%v", err)
			}
			return err
		}
		info, err := cl.Schedule(ctx, name)
		if err != nil {
			return err
		}
		what := ""
		if len(info.Then) > 0 {
			what = fmt.Sprintf(", a chain of %d jobs (%s)", len(info.Then)+1, chainTypes(*info))
		}
		fmt.Fprintf(stdout, "schedule %s added: %s%s, next tick %s\n", name, when(*info), what, fmtTime(info.NextTick))
	case "list":
		infos, err := cl.Schedules(ctx)
		if err != nil {
			return err
		}
		if f.json {
			if infos == nil {
				infos = []client.ScheduleInfo{}
			}
			enc := json.NewEncoder(stdout)
			enc.SetIndent("", "  ")
			return enc.Encode(infos)
		}
		if len(infos) == 0 {
			fmt.Fprintf(stdout, "no schedules (`%s schedule add -h` adds one)\n", n.opts.Name)
			return nil
		}
		tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "NAME\tWHEN\tTYPE\tOVERLAP\tSTATE\tLAST TICK\tLAST JOB\tNEXT TICK\tFIRED\tSKIPPED\tMISSED")
		for _, s := range infos {
			state := "active"
			if s.Paused {
				state = "paused"
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%d\t%d\t%d\n", s.Name, when(s), chainTypes(s), s.Overlap, state,
				fmtTime(s.LastTick), cmpOr(s.LastJob, "-"), fmtTime(s.NextTick), s.Fired, s.Skipped, s.Missed)
		}
		return tw.Flush()
	case "pause", "resume":
		fn := cl.PauseSchedule
		if sub == "resume" {
			fn = cl.ResumeSchedule
		}
		if err := fn(ctx, name); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "schedule %s %sd\n", name, sub)
	case "delete":
		info, err := cl.DeleteSchedule(ctx, name)
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "schedule %s deleted: fired %d, skipped %d, missed %d\n", name, info.Fired, info.Skipped, info.Missed)
	case "trigger":
		id, err := cl.TriggerSchedule(ctx, name)
		if err != nil {
			return err
		}
		fmt.Fprintln(stdout, id)
	}
	return nil
}

// scheduleOptions checks the flags of `schedule add` before anything is read or written.
func (n *Node) scheduleOptions(ctx context.Context, f *scheduleFlags, name string) (client.ScheduleOptions, error) {
	o := client.ScheduleOptions{Every: f.every, Cron: f.cron, TimeZone: f.tz, Type: f.typ, Overlap: f.overlap, CatchUp: f.catchUp}
	var steps []protocol.ChainStep // the chain's later steps
	if f.chain != "" {
		if f.typ != "" || f.params != "" || f.paramsFile != "" {
			return o, usageErr("give --chain FILE or --type and --params, not both (the file's first step is the tick's job)")
		}
		data, err := os.ReadFile(f.chain)
		if err != nil {
			return o, usageErr("--chain: %v", err)
		}
		all, err := protocol.ParseChain(data)
		if err != nil {
			return o, usageErr("--chain %s: %v", f.chain, err)
		}
		steps = all[1:]
		f.typ, f.params, o.Type = all[0].Type, string(all[0].Params), all[0].Type
		for _, st := range steps {
			o.Then = append(o.Then, client.ChainStep{Type: st.Type, Params: st.Params})
		}
	}
	if f.typ == "" {
		return o, usageErr("--type is required: a type this binary has (%s) or one the running workers have (`%s types` lists them)", joinOrNone(n.opts.Registry.Types()), n.opts.Name)
	}
	if f.params != "" && f.paramsFile != "" {
		return o, usageErr("give --params or --params-file, not both")
	}
	params := []byte(f.params)
	if f.paramsFile != "" {
		var err error
		if params, err = os.ReadFile(f.paramsFile); err != nil {
			return o, usageErr("%v", err)
		}
	}
	if len(params) == 0 {
		params = []byte("{}")
	}
	if !json.Valid(params) {
		return o, usageErr("--params is not valid JSON: %s", oneLine(string(params), 120))
	}
	o.Params = params
	if f.tz != "" && f.cron == "" {
		return o, usageErr("--time-zone applies to --cron only (--every ticks are the same in every zone)")
	}
	// The schedule's shape is checked here, with the messages the store would give.
	s := protocol.Schedule{Name: name, UID: "check", Cron: o.Cron, TimeZone: o.TimeZone, Type: o.Type, Params: params, Overlap: o.Overlap, CatchUp: o.CatchUp.String(), Then: steps}
	if o.Every != 0 {
		s.Every = o.Every.String()
	}
	if err := s.Check(); err != nil {
		return o, usageErr("%v", err)
	}
	if _, err := n.opts.Registry.Lookup(f.typ); err == nil {
		if _, err := (&client.Client{Registry: n.opts.Registry}).Validate(ctx, f.typ, params); err != nil {
			return o, usageErr("%v", err)
		}
	}
	return o, nil // the chain's later steps are validated by AddSchedule
}

func when(s client.ScheduleInfo) string {
	if s.Every != "" {
		return "every " + s.Every
	}
	w := "cron " + s.Cron
	if s.TimeZone != "" {
		w += " " + s.TimeZone
	}
	return w
}

// chainTypes is the schedule's job type, or its chain's types in order.
func chainTypes(s client.ScheduleInfo) string {
	out := s.Type
	for _, step := range s.Then {
		out += "→" + step.Type
	}
	return out
}

func fmtTime(t *time.Time) string {
	if t == nil {
		return "-"
	}
	return t.UTC().Format(time.RFC3339)
}

func cmpOr(s, def string) string {
	if s == "" {
		return def
	}
	return s
}
