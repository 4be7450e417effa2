package shuffle

import (
	"bufio"
	"fmt"
	"io"

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
		b = append(b, `{"key":`...)
		if b, err = jobs.AppendCompactJSON(b, key); err == nil {
			b = append(b, `,"value":`...)
			b, err = jobs.AppendCompactJSON(b, value)
			b = append(b, '}')
		}
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

func (t *textWriter) Flush() error {
	if err := t.w.Flush(); err != nil {
		return fmt.Errorf("write output: %w", err)
	}
	return nil
}

func (t *textWriter) Records() int64 { return t.records }
func (t *textWriter) Bytes() int64   { return t.bytes }
