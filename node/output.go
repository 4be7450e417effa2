package node

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"text/tabwriter"

	"github.com/mapagg/mapagg/client"
	"github.com/mapagg/mapagg/internal/protocol"
)

const outputSummary = "stream a keyed job's output records (key<TAB>value lines by default)"

// printResult prints a job's stored result: an aggregate's value as it is, a keyed job's
// manifest as a small table (or, with asJSON, as JSON).
func (n *Node) printResult(w io.Writer, id string, res json.RawMessage, asJSON bool) error {
	if !protocol.IsOutputManifest(res) {
		_, err := fmt.Fprintf(w, "%s\n", res)
		return err
	}
	m, err := protocol.DecodeOutputManifest(id, res)
	if err != nil {
		return err
	}
	if asJSON {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(m)
	}
	fmt.Fprintf(w, "job %s: output of %d records, %s, in %d partitions (%s blobs in container %q)\n",
		id, m.Records, humanBytes(m.Bytes), len(m.Partitions), m.Format, m.Container)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "PARTITION\tRECORDS\tBYTES\t  BLOB\t")
	for _, p := range m.Partitions {
		fmt.Fprintf(tw, "%d\t%d\t%d\t  %s\t\n", p.Partition, p.Records, p.Bytes, p.Blob)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	_, err = fmt.Fprintf(w, "read the records: %s output %s [--partition N] [--format tsv|jsonl] [-o FILE]\n", n.opts.Name, id)
	return err
}

// resultPrinter prints a job's result for wait and submit --wait: as result does.
type resultPrinter func(w io.Writer, id string, res json.RawMessage) error

func (n *Node) resultPrinter(asJSON bool) resultPrinter {
	return func(w io.Writer, id string, res json.RawMessage) error { return n.printResult(w, id, res, asJSON) }
}

func humanBytes(b int64) string {
	const unit = 1024
	if b < unit {
		return fmt.Sprintf("%d B", b)
	}
	div, exp := int64(unit), 0
	for x := b / unit; x >= unit; x /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(b)/float64(div), "KMGTPE"[exp])
}

type resultFlags struct {
	jobFlags
	json bool
}

func (n *Node) newResultFlags() *resultFlags {
	f := &resultFlags{}
	f.fs = n.newFlagSet("result")
	f.common.register(f.fs)
	f.fs.BoolVar(&f.json, "json", false, "a keyed job's output manifest as JSON (an aggregate's result is JSON already)")
	return f
}

type outputFlags struct {
	jobFlags
	partition int
	format    string
	out       string
}

func (n *Node) newOutputFlags() *outputFlags {
	f := &outputFlags{}
	f.fs = n.newFlagSet("output")
	f.common.register(f.fs)
	f.fs.IntVar(&f.partition, "partition", -1, "write only this partition (0 to partitions-1); -1 writes all, in order")
	f.fs.StringVar(&f.format, "format", client.FormatTSV, `record format: "tsv" (key<TAB>value; strings unquoted, \t \n \r \\ escaped) or "jsonl" ({"key":K,"value":V})`)
	f.fs.StringVar(&f.out, "o", "", "write to this file (replaced only when the whole output is written) instead of stdout")
	return f
}

// outputCmd streams a keyed job's output records, in bounded memory.
func (n *Node) outputCmd(ctx context.Context, args []string, stdout, stderr io.Writer) (err error) {
	f := n.newOutputFlags()
	defer func() { err = f.explain(ctx, err) }()
	id, err := f.parseJob(args, stderr)
	if err != nil {
		return err
	}
	opts := client.OutputOptions{Format: f.format}
	if f.partition != -1 {
		opts.Partition = &f.partition
	}
	if err := opts.Check(); err != nil {
		return usageErr("%v", err)
	}
	cl, done, err := n.client(ctx, &f.common, false)
	if err != nil {
		return err
	}
	defer done()
	w, commit, abort, err := outputFile(f.out, stdout)
	if err != nil {
		return err
	}
	if _, err := cl.WriteOutput(ctx, id, w, opts); err != nil {
		abort()
		if errors.Is(err, client.ErrNotKeyed) {
			return fmt.Errorf("job %s's result is a value, not output records: print it with `%s result %s`", id, n.opts.Name, id)
		}
		return err
	}
	return commit()
}

// outputFile opens where the output goes: path (written to a temporary file beside it, renamed
// by commit, removed by abort) or, for "", stdout.
func outputFile(path string, stdout io.Writer) (w io.Writer, commit func() error, abort func(), err error) {
	if path == "" {
		return stdout, func() error { return nil }, func() {}, nil
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*.partial")
	if err != nil {
		return nil, nil, nil, fmt.Errorf("-o %s: %w", path, err)
	}
	if err := tmp.Chmod(0o644); err != nil {
		tmp.Close()
		os.Remove(tmp.Name())
		return nil, nil, nil, fmt.Errorf("-o %s: %w", path, err)
	}
	abort = func() { tmp.Close(); os.Remove(tmp.Name()) }
	commit = func() error {
		if err := tmp.Close(); err != nil {
			os.Remove(tmp.Name())
			return fmt.Errorf("-o %s: %w", path, err)
		}
		if err := os.Rename(tmp.Name(), path); err != nil {
			os.Remove(tmp.Name())
			return fmt.Errorf("-o %s: %w", path, err)
		}
		return nil
	}
	return tmp, commit, abort, nil
}
