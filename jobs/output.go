package jobs

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"unsafe"

	"github.com/klauspost/compress/zstd"

	"github.com/mapagg/mapagg/internal/tsv"
)

// Stored formats of a keyed job's output blobs (OutputManifest.Format), chosen per job (the
// submit's output_format):
//
//   - OutputJSONL: {"key":K,"value":V} lines, K and V compact JSON.
//   - OutputTSV: key<TAB>value lines. A text column (OutputManifest.KeyText, ValueText: the job
//     said that column is always a string) holds the string's bytes without quotes, with tab,
//     newline, carriage return and backslash written \t \n \r \\ (AppendTSVField); any other
//     column holds compact JSON, which has none of those bytes unescaped. Either way the JSON
//     texts read back are the ones written.
//   - either name with OutputZstd appended ("tsv.zst"): the same lines compressed with zstd, one
//     stream a blob (`zstd -dc` reads it).
//
// A job whose keys are text stores TSV unless it asks otherwise; any other JSON lines.
const (
	OutputJSONL = "jsonl"
	OutputTSV   = "tsv"
	OutputZstd  = ".zst"
)

// OutputFormats lists the stored formats a keyed job may choose.
func OutputFormats() []string {
	return []string{OutputTSV, OutputJSONL, OutputTSV + OutputZstd, OutputJSONL + OutputZstd}
}

// A KeyedJob may say which of its output columns are text with a method
//
//	OutputText() (key, value bool)
//
// A true column's every record is a JSON string; TSV stores it without its quotes. A typed
// keyed job (Keyed) has it: a key or output type whose kind is string, without a JSON or text
// marshaler of its own, is text.
type outputTexter interface {
	OutputText() (key, value bool)
}

// OutputTextOf returns the output columns kj says are text, with its method
// OutputText() (key, value bool): every record of a text column is a JSON string. A job without
// the method has none.
func OutputTextOf(kj KeyedJob) (key, value bool) {
	if t, ok := kj.(outputTexter); ok {
		return t.OutputText()
	}
	return false, false
}

// outputForm is a stored format, parsed.
type outputForm struct {
	tsv, zst, keyText, valueText bool
}

// formOf parses format with its text columns; ok is false for a format this release does not
// know.
func formOf(format string, keyText, valueText bool) (f outputForm, ok bool) {
	base, zst := strings.CutSuffix(format, OutputZstd)
	switch base {
	case OutputTSV:
		return outputForm{tsv: true, zst: zst, keyText: keyText, valueText: valueText}, true
	case OutputJSONL:
		return outputForm{zst: zst}, true
	}
	return f, false
}

// maxRecordBytes bounds a stored output record: a key and a value at their limits, escaped
// (a byte is at most 6 as JSON), and the record's frame. A longer line is no record this
// system wrote.
const maxRecordBytes = 6*(MaxKeyBytes+MaxValueBytes) + 64

// maxZstdWindow bounds the window a stored output's zstd stream may ask for (the writer uses
// 1 MiB): a larger one is no output this system wrote, and would cost the reader its memory.
const maxZstdWindow = 8 << 20

// ReadRecords reads an output blob stored in m's format from r and calls fn with each record's
// key and value as JSON texts, valid until fn returns. It stops at fn's first error and
// returns it; a record that is not of the format is an error that says which.
func (m *OutputManifest) ReadRecords(r io.Reader, fn func(key, value []byte) error) error {
	f, ok := formOf(m.Format, m.KeyText, m.ValueText)
	if !ok {
		return fmt.Errorf("output format %q: this release reads %s", m.Format, strings.Join(OutputFormats(), ", "))
	}
	return f.records(r, fn)
}

// records reads the records of a blob of form f from r.
func (f outputForm) records(r io.Reader, fn func(key, value []byte) error) error {
	if f.zst {
		zr, err := zstd.NewReader(r, zstd.WithDecoderConcurrency(1), zstd.WithDecoderLowmem(true),
			zstd.WithDecoderMaxWindow(maxZstdWindow), zstd.WithDecoderMaxMemory(maxRecordBytes))
		if err != nil {
			return fmt.Errorf("zstd: %w", err)
		}
		defer zr.Close()
		r = zr
	}
	br := bufio.NewReaderSize(r, 256<<10)
	var long []byte // a line longer than br's buffer, gathered
	var kb, vb columnBuf
	var n int64
	for {
		chunk, err := br.ReadSlice('\n')
		if errors.Is(err, bufio.ErrBufferFull) {
			if long = append(long, chunk...); len(long) > maxRecordBytes {
				return fmt.Errorf("record %d is longer than %d bytes: not an output record", n+1, maxRecordBytes)
			}
			continue
		}
		if len(long) > 0 {
			chunk = append(long, chunk...)
			long = long[:0]
		}
		if err != nil && err != io.EOF {
			if f.zst {
				return fmt.Errorf("record %d: zstd: %w", n+1, err)
			}
			return err
		}
		if line := bytes.TrimSuffix(chunk, []byte("\n")); len(line) > 0 {
			n++
			var key, value []byte
			var serr error
			if f.tsv {
				key, value, serr = f.splitTSV(line, &kb, &vb)
			} else {
				key, value, serr = SplitRecord(line)
			}
			if serr != nil {
				return fmt.Errorf("record %d: %w", n, serr)
			}
			if err := fn(key, value); err != nil {
				return err
			}
		}
		if err == io.EOF {
			return nil
		}
	}
}

// splitTSV splits a TSV record into its key's and value's JSON texts; a text column is made a
// JSON string again in kb or vb.
func (f outputForm) splitTSV(line []byte, kb, vb *columnBuf) (key, value []byte, err error) {
	k, v, ok := bytes.Cut(line, []byte{'\t'})
	if !ok {
		return nil, nil, fmt.Errorf("%.60q has no tab: want key<TAB>value", line)
	}
	if key, err = kb.column(k, f.keyText); err != nil {
		return nil, nil, fmt.Errorf("key: %w", err)
	}
	if value, err = vb.column(v, f.valueText); err != nil {
		return nil, nil, fmt.Errorf("value: %w", err)
	}
	return key, value, nil
}

// columnBuf holds a text column's bytes and its JSON text, reused from record to record.
type columnBuf struct{ raw, text []byte }

// column returns a column's JSON text: a text column's escaped bytes quoted again, any other as
// it is.
func (c *columnBuf) column(field []byte, text bool) ([]byte, error) {
	if !text {
		if len(field) == 0 {
			return nil, errors.New("empty: want JSON")
		}
		return field, nil
	}
	var err error
	if c.raw, err = tsv.AppendUnescaped(c.raw[:0], field, true); err != nil {
		return nil, err
	}
	c.text = AppendJSONString(c.text[:0], unsafe.String(unsafe.SliceData(c.raw), len(c.raw))) // read during the call only
	return c.text, nil
}

// outputLines is Lines over a range of an output blob stored in f (TSV or compressed): each
// record, as a {"key":K,"value":V} line.
func outputLines(ctx context.Context, env Env, r BlobRange, f outputForm, fn func(line []byte) error) error {
	var rec []byte
	asJSONL := func(key, value []byte) error {
		rec = append(append(append(append(rec[:0], `{"key":`...), key...), `,"value":`...), value...)
		rec = append(rec, '}')
		return fn(rec)
	}
	if !f.zst {
		var kb, vb columnBuf
		return Lines(ctx, env, BlobRange{Container: r.Container, Blob: r.Blob, Offset: r.Offset, Length: r.Length}, func(line []byte) error {
			key, value, err := f.splitTSV(line, &kb, &vb)
			if err != nil {
				return err
			}
			return asJSONL(key, value)
		})
	}
	rc, err := env.ReadRange(ctx, r.Container, r.Blob, 0, r.Length)
	if err != nil {
		return fmt.Errorf("read %s/%s: %w", r.Container, r.Blob, err)
	}
	defer rc.Close()
	cr := &countReader{r: rc}
	if err := f.records(cr, func(key, value []byte) error {
		if err := ctx.Err(); err != nil {
			return err
		}
		return asJSONL(key, value)
	}); err != nil {
		return fmt.Errorf("%s/%s: %w", r.Container, r.Blob, err)
	}
	if cr.n != r.Length {
		return fmt.Errorf("%s/%s: %d bytes, its range says %d: did it change after the job was split?", r.Container, r.Blob, cr.n, r.Length)
	}
	return nil
}

// countReader counts the bytes read through it.
type countReader struct {
	r io.Reader
	n int64
}

func (c *countReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}
