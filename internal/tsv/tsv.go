// Package tsv escapes and unescapes the fields of key<TAB>value lines: the format of keyed
// outputs (jobs.AppendTSVField) and of the lines a program job exchanges with its process.
// Tab, newline, carriage return and backslash are written \t \n \r and \\; every other byte
// stands for itself.
package tsv

import "fmt"

// AppendEscaped appends b with tab, newline, CR and backslash escaped.
func AppendEscaped(dst, b []byte) []byte {
	start := 0
	for i, c := range b {
		var e byte
		switch c {
		case '\t':
			e = 't'
		case '\n':
			e = 'n'
		case '\r':
			e = 'r'
		case '\\':
			e = '\\'
		default:
			continue
		}
		dst = append(dst, b[start:i]...)
		dst = append(dst, '\\', e)
		start = i + 1
	}
	return append(dst, b[start:]...)
}

// AppendUnescaped appends field with \t \n \r and \\ decoded. With strict, any other escape
// (or a backslash that ends the field) is an error; without, such a backslash is kept as it
// is, so a program that passes raw text through (an awk one-liner) is not refused.
func AppendUnescaped(dst, field []byte, strict bool) ([]byte, error) {
	for i := 0; i < len(field); i++ {
		c := field[i]
		if c != '\\' {
			dst = append(dst, c)
			continue
		}
		if i+1 == len(field) {
			if strict {
				return dst, fmt.Errorf("TSV field ends with a lone backslash")
			}
			return append(dst, c), nil
		}
		switch e := field[i+1]; e {
		case 't':
			dst = append(dst, '\t')
		case 'n':
			dst = append(dst, '\n')
		case 'r':
			dst = append(dst, '\r')
		case '\\':
			dst = append(dst, '\\')
		default:
			if strict {
				return dst, fmt.Errorf("TSV field has escape \\%c: only \\t \\n \\r and \\\\ are", e)
			}
			dst = append(dst, c)
			continue
		}
		i++
	}
	return dst, nil
}
