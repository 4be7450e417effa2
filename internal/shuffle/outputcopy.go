package shuffle

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/mapagg/mapagg/jobs"
	"github.com/mapagg/mapagg/store"
)

// CopyOutputPartition writes the records of output blob p through ow, checking them against the
// manifest's counts.
func CopyOutputPartition(ctx context.Context, rr interface {
	ReadRange(ctx context.Context, name string, offset, count int64) (io.ReadCloser, error)
}, id string, p jobs.OutputPartition, ow OutputWriter) error {
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
