package program

import (
	"bytes"
	"errors"
	"fmt"

	"github.com/mapagg/mapagg/internal/tsv"
)

// AppendEscaped appends b with tab, newline, CR and backslash written \t \n \r \\, as a field
// of a key<TAB>value line (the escaping of jobs.AppendTSVField).
func AppendEscaped(dst, b []byte) []byte { return tsv.AppendEscaped(dst, b) }

// AppendUnescaped appends field with \t \n \r and \\ decoded. Any other backslash is kept as it
// is, so a program that passes raw text through (an awk one-liner) is not refused.
func AppendUnescaped(dst, field []byte) []byte {
	dst, _ = tsv.AppendUnescaped(dst, field, false) // lenient: never an error
	return dst
}

// errNoTab: a line of a program's output has no key<TAB>value shape.
var errNoTab = errors.New("no TAB between key and value")

// SplitLine splits a key<TAB>value line at its first TAB and decodes both fields into buf,
// returning key and value as sub-slices of the result. A line without a TAB is an error.
func SplitLine(buf, line []byte) (out, key, value []byte, err error) {
	line = bytes.TrimSuffix(line, []byte("\r"))
	i := bytes.IndexByte(line, '\t')
	if i < 0 {
		return buf, nil, nil, errNoTab
	}
	buf = AppendUnescaped(buf[:0], line[:i])
	k := len(buf)
	buf = AppendUnescaped(buf, line[i+1:])
	return buf, buf[:k:k], buf[k:], nil
}

// malformed describes a bad output line: its number and a short quote.
func malformed(n int64, line []byte, err error) error {
	return fmt.Errorf("malformed line %d of its output: %v: %.80q", n, err, line)
}
