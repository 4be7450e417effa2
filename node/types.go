package node

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/mapagg/mapagg/internal/clusterask"
)

type typesFlags struct {
	common
	json   bool
	window time.Duration
	fs     *flagSet
}

func (n *Node) newTypesFlags() *typesFlags {
	f := &typesFlags{fs: n.newFlagSet("types")}
	f.common.register(f.fs)
	f.fs.BoolVar(&f.json, "json", false, "print JSON")
	f.fs.DurationVar(&f.window, "wait", n.opts.Control.Window, "how long to collect the running workers' answers")
	return f
}

// typeJSON is one job type of `worker types --json`.
type typeJSON struct {
	Type    string   `json:"type"`
	Workers []string `json:"workers"`
	// Program: the type runs a program registered on its workers (--program), not Go code.
	Program bool `json:"program,omitempty"`
}

type typesJSON struct {
	Types   []typeJSON               `json:"types"`
	Workers []clusterask.WorkerTypes `json:"workers"`
}

func (n *Node) typesCmd(ctx context.Context, args []string, stdout, stderr io.Writer) (err error) {
	f := n.newTypesFlags()
	defer func() { err = f.explain(ctx, err) }()
	f.fs.SetOutput(stderr)
	if err := f.fs.parse(args); err != nil {
		return usageErr("%v", err)
	}
	if f.fs.NArg() > 0 {
		return usageErr("unexpected arguments %v", f.fs.Args())
	}
	if f.window <= 0 || f.window > time.Minute {
		return usageErr("--wait %v: use a duration above 0 and at most 1m", f.window)
	}
	if err := f.resolveNATS(f.natsURL); err != nil {
		return usageErr("%v", err)
	}
	b, err := f.connectNATS(n.opts.Name + "-cli")
	if err != nil {
		return err
	}
	defer b.Close()
	workers, err := (&clusterask.Validator{Conn: b.Conn(), URL: f.natsURL, Prefix: f.streamPrefix, Window: f.window}).Types(ctx)
	if err != nil {
		return err
	}
	if len(workers) == 0 {
		return clusterask.NoWorkersError(f.natsURL, f.streamPrefix)
	}
	out := typesJSON{Workers: workers}
	for _, t := range clusterask.KnownTypes(workers) {
		tj := typeJSON{Type: t, Workers: []string{}}
		for _, w := range workers {
			if slices.Contains(w.Types, t) {
				tj.Workers = append(tj.Workers, w.Worker)
			}
			tj.Program = tj.Program || slices.Contains(w.Programs, t)
		}
		out.Types = append(out.Types, tj)
	}
	if f.json {
		return writeJSON(stdout, out)
	}
	tw := tabwriter.NewWriter(stdout, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "TYPE\tWORKERS\tNOTE")
	for _, t := range out.Types {
		fmt.Fprintf(tw, "%s\t%d of %d: %s", t.Type, len(t.Workers), len(workers), strings.Join(t.Workers, ", "))
		if t.Program { // a line without a note ends at its workers: no trailing padding
			fmt.Fprint(tw, "\tprogram (--program on its workers)")
		}
		fmt.Fprintln(tw)
	}
	return tw.Flush()
}
