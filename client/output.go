package client

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/mapagg/mapagg/internal/protocol"
	"github.com/mapagg/mapagg/internal/shuffle"
	"github.com/mapagg/mapagg/jobs"
)

// OutputManifest is a keyed job's result: its output blobs, one per partition in order, in the
// jobs container, stored in the format the job chose (Format: jobs.OutputFormats). WriteOutput
// reads any of them.
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

// rangeReader is the part of a Store that streams a blob (store.Container has it); Output needs
// it to read output blobs.
type rangeReader interface {
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
	rr, ok := c.Store.(rangeReader)
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
		if err := shuffle.CopyOutputPartition(ctx, rr, id, m, p, ow); err != nil {
			return OutputStats{Records: ow.Records(), Bytes: ow.Bytes()}, err
		}
	}
	err = ow.Flush()
	return OutputStats{Records: ow.Records(), Bytes: ow.Bytes()}, err
}
