package shuffle

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/mapagg/mapagg/jobs"
	"github.com/mapagg/mapagg/store"
)

// CopyOutputPartition writes the records of output blob p of manifest m through ow, checking them
// against the manifest's counts.
func CopyOutputPartition(ctx context.Context, rr interface {
	ReadRange(ctx context.Context, name string, offset, count int64) (io.ReadCloser, error)
}, id string, m *jobs.OutputManifest, p jobs.OutputPartition, ow OutputWriter) error {
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
	var records int64
	err = m.ReadRecords(cr, func(key, value []byte) error {
		if werr := ow.WriteRecord(key, value); werr != nil {
			return fmt.Errorf("record %d: %w", records+1, werr)
		}
		records++
		if records%4096 == 0 {
			return ctx.Err()
		}
		return nil
	})
	if err != nil {
		if cerr := ctx.Err(); cerr != nil {
			return cerr
		}
		return fmt.Errorf("%s: %w", what, err)
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
