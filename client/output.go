package client

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/mapagg/mapagg/internal/protocol"
	"github.com/mapagg/mapagg/internal/shuffle"
	"github.com/mapagg/mapagg/jobs"
	"github.com/mapagg/mapagg/store"
)

// OutputManifest is a keyed job's result: its output blobs, one per partition in order, in the
// jobs container. The blobs hold {"key":K,"value":V} lines.
type (
	OutputManifest  = jobs.OutputManifest
	OutputPartition = jobs.OutputPartition
)

// ErrNotKeyed: the job's result is a value (Result), not output records.
var ErrNotKeyed = errors.New("the job's result is a value, not output records: use Result (`worker result`)")

// Output formats of WriteOutput: `key<TAB>value` lines (Hadoop Streaming's text form) or
// {"key":K,"value":V} lines.
const (
	FormatTSV   = shuffle.FormatTSV
	FormatJSONL = shuffle.FormatJSONL
)

// OutputOptions selects what WriteOutput writes.
type OutputOptions struct {
	// Partition is the one partition to write; nil: all, in partition order.
	Partition *int
	// Format is FormatTSV (the default, "") or FormatJSONL.
	Format string
}

// Check refuses a bad format or partition number before any storage is read.
func (o OutputOptions) Check() error {
	if o.Format != "" && o.Format != FormatTSV && o.Format != FormatJSONL {
		return fmt.Errorf("output format %q: want %q or %q", o.Format, FormatTSV, FormatJSONL)
	}
	if o.Partition != nil && *o.Partition < 0 {
		return fmt.Errorf("partition %d: partitions are numbered from 0", *o.Partition)
	}
	return nil
}

// OutputStats counts what WriteOutput wrote.
type OutputStats struct {
	Records int64 `json:"records"`
	Bytes   int64 `json:"bytes"`
}

// RangeReader is the part of a Store that streams a blob (store.Container has it); Output needs
// it to read output blobs.
type RangeReader interface {
	ReadRange(ctx context.Context, name string, offset, count int64) (io.ReadCloser, error)
}

// Output returns a succeeded keyed job's manifest. It fails with ErrNoSuchJob, ErrNotFinished,
// the job's error, or ErrNotKeyed for an aggregate job.
func (c *Client) Output(ctx context.Context, id string) (*OutputManifest, error) {
	res, err := c.Result(ctx, id)
	if err != nil {
		return nil, err
	}
	m, err := protocol.DecodeOutputManifest(id, res)
	if errors.Is(err, protocol.ErrNotOutput) {
		return nil, fmt.Errorf("job %s: %w", id, ErrNotKeyed)
	}
	if err != nil {
		return nil, err
	}
	return m, nil
}

// WriteOutput streams a succeeded keyed job's output records to w, in partition order and key
// order within a partition, in opts.Format; memory is bounded whatever the output's size. It
// fails as Output does, for a partition out of range, or when an output blob is missing or does
// not match its manifest (the error names the blob).
func (c *Client) WriteOutput(ctx context.Context, id string, w io.Writer, opts OutputOptions) (OutputStats, error) {
	if err := opts.Check(); err != nil {
		return OutputStats{}, err
	}
	rr, ok := c.Store.(RangeReader)
	if !ok {
		return OutputStats{}, fmt.Errorf("read output of job %s: the client's Store (%T) cannot stream blobs (no ReadRange)", id, c.Store)
	}
	m, err := c.Output(ctx, id)
	if err != nil {
		return OutputStats{}, err
	}
	if n, ok := c.Store.(interface{ Name() string }); ok && n.Name() != m.Container {
		return OutputStats{}, fmt.Errorf("output of job %s is in container %q, not the jobs container %q", id, m.Container, n.Name())
	}
	parts := m.Partitions
	if opts.Partition != nil {
		p := *opts.Partition
		if p >= len(parts) {
			return OutputStats{}, fmt.Errorf("job %s has %d partitions (0 to %d): no partition %d", id, len(parts), len(parts)-1, p)
		}
		parts = parts[p : p+1]
	}
	ow, err := shuffle.NewOutputWriter(w, opts.Format)
	if err != nil {
		return OutputStats{}, err
	}
	for _, p := range parts {
		if err := copyPartition(ctx, rr, id, p, ow); err != nil {
			return OutputStats{Records: ow.Records(), Bytes: ow.Bytes()}, err
		}
	}
	err = ow.Flush()
	return OutputStats{Records: ow.Records(), Bytes: ow.Bytes()}, err
}

// copyPartition writes the records of output blob p through ow, checking them against the
// manifest's counts.
func copyPartition(ctx context.Context, rr RangeReader, id string, p OutputPartition, ow shuffle.OutputWriter) error {
	what := fmt.Sprintf("output blob %s (partition %d of job %s)", p.Blob, p.Partition, id)
	if p.Bytes == 0 {
		return nil
	}
	rc, err := rr.ReadRange(ctx, p.Blob, 0, 0)
	if errors.Is(err, store.ErrNotFound) {
		return fmt.Errorf("%s is missing: was it deleted? %w", what, err)
	}
	if err != nil {
		return fmt.Errorf("read %s: %w", what, err)
	}
	defer rc.Close()
	cr := &countingReader{r: rc}
	br := bufio.NewReaderSize(cr, 256<<10)
	var long []byte // a line longer than br's buffer, gathered
	var records int64
	for {
		chunk, err := br.ReadSlice('\n')
		if errors.Is(err, bufio.ErrBufferFull) {
			long = append(long, chunk...)
			continue
		}
		if len(long) > 0 {
			chunk = append(long, chunk...)
			long = long[:0]
		}
		if err != nil && err != io.EOF {
			return fmt.Errorf("read %s: %w", what, err)
		}
		if rec := bytes.TrimSuffix(chunk, []byte("\n")); len(rec) > 0 {
			key, value, serr := jobs.SplitRecord(rec)
			if serr != nil {
				return fmt.Errorf("%s, record %d: %w", what, records+1, serr)
			}
			if werr := ow.WriteRecord(key, value); werr != nil {
				return fmt.Errorf("%s, record %d: %w", what, records+1, werr)
			}
			records++
		}
		if err == io.EOF {
			break
		}
		if err := ctx.Err(); err != nil {
			return err
		}
	}
	if records != p.Records || cr.n != p.Bytes {
		return fmt.Errorf("%s has %d records in %d bytes, its manifest says %d in %d: was it changed?", what, records, cr.n, p.Records, p.Bytes)
	}
	return nil
}

// countingReader counts the bytes read through it.
type countingReader struct {
	r io.Reader
	n int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}
