package shuffle

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/klauspost/compress/zstd"

	"github.com/mapagg/mapagg/jobs"
)

// OutputWriter writes a keyed job's output records: key and value as JSON texts, as
// KeyedJob.Reduce emits them.
type OutputWriter interface {
	WriteRecord(key, value []byte) error
	// Flush writes what is buffered.
	Flush() error
	// Records and Bytes count what was written.
	Records() int64
	Bytes() int64
}

// Output formats.
const (
	FormatTSV   = "tsv"
	FormatJSONL = "jsonl"
)

// NewOutputWriter returns the writer of format (FormatTSV or FormatJSONL) on w.
func NewOutputWriter(w io.Writer, format string) (OutputWriter, error) {
	switch format {
	case FormatTSV, "":
		return &textWriter{w: bufio.NewWriterSize(w, 64<<10), tsv: true}, nil
	case FormatJSONL:
		return &textWriter{w: bufio.NewWriterSize(w, 64<<10)}, nil
	}
	return nil, fmt.Errorf("output format %q: want %q or %q", format, FormatTSV, FormatJSONL)
}

// textWriter writes records as lines: `key<TAB>value` (Hadoop Streaming's text form: a string
// without its quotes, \t \n \r and \\ escaped; anything else as compact JSON) or
// `{"key":K,"value":V}`.
type textWriter struct {
	w       *bufio.Writer
	tsv     bool
	line    []byte
	records int64
	bytes   int64
}

func (t *textWriter) WriteRecord(key, value []byte) error {
	var err error
	b := t.line[:0]
	if t.tsv {
		if b, err = jobs.AppendTSVField(b, key); err == nil {
			b = append(b, '\t')
			b, err = jobs.AppendTSVField(b, value)
		}
	} else {
		b, err = appendJSONLRecord(b, key, value)
	}
	if err != nil {
		return err
	}
	b = append(b, '\n')
	t.line = b
	n, err := t.w.Write(b)
	t.bytes += int64(n)
	if err != nil {
		return fmt.Errorf("write output: %w", err)
	}
	t.records++
	return nil
}

// appendJSONLRecord appends {"key":K,"value":V}, K and V compacted (JSON texts they must be).
func appendJSONLRecord(b, key, value []byte) ([]byte, error) {
	b = append(b, `{"key":`...)
	b, err := jobs.AppendCompactJSON(b, key)
	if err != nil {
		return b, err
	}
	b = append(b, `,"value":`...)
	if b, err = jobs.AppendCompactJSON(b, value); err != nil {
		return b, err
	}
	return append(b, '}'), nil
}

func (t *textWriter) Flush() error {
	if err := t.w.Flush(); err != nil {
		return fmt.Errorf("write output: %w", err)
	}
	return nil
}

func (t *textWriter) Records() int64 { return t.records }
func (t *textWriter) Bytes() int64   { return t.bytes }

// NewStoredWriter returns the writer of a reduce task's output blob on w, in a stored format
// (jobs.OutputFormats) with its text columns (TSV only). Bytes counts what reaches w; a
// compressed writer's Flush ends its stream, and nothing may be written after it.
func NewStoredWriter(w io.Writer, format string, keyText, valueText bool) (OutputWriter, error) {
	base, zst := strings.CutSuffix(format, jobs.OutputZstd)
	if base != jobs.OutputTSV && base != jobs.OutputJSONL {
		return nil, fmt.Errorf("output format %q: want one of %s", format, strings.Join(jobs.OutputFormats(), ", "))
	}
	s := &storedWriter{out: &countWriter{w: w}, tsv: base == jobs.OutputTSV}
	if s.tsv {
		s.keyText, s.valueText = keyText, valueText
	}
	var dst io.Writer = s.out
	if zst {
		enc, err := zstd.NewWriter(s.out, zstd.WithEncoderLevel(zstd.SpeedFastest), zstd.WithEncoderConcurrency(1),
			zstd.WithWindowSize(1<<20), zstd.WithLowerEncoderMem(true))
		if err != nil {
			return nil, fmt.Errorf("output: zstd: %w", err)
		}
		s.enc, dst = enc, enc
	}
	s.w = bufio.NewWriterSize(dst, 64<<10)
	return s, nil
}

// storedWriter writes the lines of a stored output format (jobs.OutputTSV, jobs.OutputJSONL).
type storedWriter struct {
	w                  *bufio.Writer
	enc                *zstd.Encoder // compressed: under w
	out                *countWriter
	tsv                bool
	keyText, valueText bool
	line               []byte
	records            int64
	ended              bool
}

func (s *storedWriter) WriteRecord(key, value []byte) error {
	if s.ended {
		return errors.New("write output: the compressed stream has ended")
	}
	var err error
	b := s.line[:0]
	if s.tsv {
		if b, err = storedColumn(b, key, s.keyText, "key"); err == nil {
			b = append(b, '\t')
			b, err = storedColumn(b, value, s.valueText, "value")
		}
	} else {
		b, err = appendJSONLRecord(b, key, value)
	}
	if err != nil {
		return err
	}
	s.line = append(b, '\n')
	if _, err := s.w.Write(s.line); err != nil {
		return fmt.Errorf("write output: %w", err)
	}
	s.records++
	return nil
}

// storedColumn appends a stored TSV column: a text column's string without its quotes, escaped
// (a record of it that is not a string is the job's error: it said the column was text), any
// other as compact JSON.
func storedColumn(dst, j []byte, text bool, what string) ([]byte, error) {
	if !text {
		return jobs.AppendCompactJSON(dst, j)
	}
	if len(j) < 2 || j[0] != '"' {
		return dst, fmt.Errorf("output %s %.40q is not a string, but the job's %ss are text", what, j, what)
	}
	return jobs.AppendTSVField(dst, j)
}

func (s *storedWriter) Flush() error {
	if s.ended {
		return nil
	}
	if err := s.w.Flush(); err != nil {
		return fmt.Errorf("write output: %w", err)
	}
	if s.enc != nil {
		s.ended = true
		if err := s.enc.Close(); err != nil {
			return fmt.Errorf("write output: zstd: %w", err)
		}
	}
	return nil
}

func (s *storedWriter) Records() int64 { return s.records }
func (s *storedWriter) Bytes() int64   { return s.out.n }

// countWriter counts the bytes written through it.
type countWriter struct {
	w io.Writer
	n int64
}

func (c *countWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}
