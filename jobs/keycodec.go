package jobs

import (
	"bytes"
	"encoding"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"reflect"
	"strconv"
	"unicode/utf8"
	"unsafe"

	"github.com/mapagg/mapagg/internal/tsv"
)

// kvCodec encodes the keys, values or output records of a keyed job. Keys use an order-preserving
// encoding for strings, byte slices, integers, booleans and floats: byte order is key order. A
// type with MarshalBinary (and UnmarshalBinary on its pointer) uses its own bytes; any other type
// is JSON. Those last two sort by their encoded bytes.
type kvCodec[T any] struct {
	enc func(dst []byte, v T) ([]byte, error)
	dec func(data []byte) (T, error)
	// text appends v as JSON, for output records.
	text func(dst []byte, v T) ([]byte, error)
}

// newKVCodec returns the codec of T; key selects the order-preserving encoding.
func newKVCodec[T any](key bool) kvCodec[T] {
	t := reflect.TypeFor[T]()
	c := kvCodec[T]{text: jsonText[T]}
	if !implements(t, reflect.TypeFor[json.Marshaler]()) && !implements(t, reflect.TypeFor[encoding.TextMarshaler]()) {
		c.text = fastText[T](t)
	}
	var v T
	_, m := any(v).(encoding.BinaryMarshaler)
	_, u := any(&v).(encoding.BinaryUnmarshaler)
	switch {
	case m && u:
		c.enc, c.dec = binaryEnc[T], binaryDec[T]
	case t.Kind() == reflect.String:
		c.enc = func(dst []byte, v T) ([]byte, error) { return append(dst, *(*string)(unsafe.Pointer(&v))...), nil }
		c.dec = func(data []byte) (T, error) {
			var v T
			*(*string)(unsafe.Pointer(&v)) = string(data)
			return v, nil
		}
	case t.Kind() == reflect.Slice && t.Elem().Kind() == reflect.Uint8:
		c.enc = func(dst []byte, v T) ([]byte, error) { return append(dst, *(*[]byte)(unsafe.Pointer(&v))...), nil }
		c.dec = func(data []byte) (T, error) {
			var v T
			*(*[]byte)(unsafe.Pointer(&v)) = bytes.Clone(data)
			return v, nil
		}
	case isInt(t.Kind()), isUint(t.Kind()), t.Kind() == reflect.Bool:
		c.enc, c.dec = intEnc[T](t, key), intDec[T](t, key)
	case t.Kind() == reflect.Float32 || t.Kind() == reflect.Float64:
		c.enc, c.dec = floatEnc[T](t, key), floatDec[T](t, key)
	default:
		c.enc, c.dec = jsonEnc[T], jsonDec[T]
	}
	return c
}

func implements(t, iface reflect.Type) bool {
	return t.Implements(iface) || reflect.PointerTo(t).Implements(iface)
}

func isInt(k reflect.Kind) bool { return k >= reflect.Int && k <= reflect.Int64 }

func isUint(k reflect.Kind) bool { return k >= reflect.Uint && k <= reflect.Uintptr }

func binaryEnc[T any](dst []byte, v T) ([]byte, error) {
	b, err := any(v).(encoding.BinaryMarshaler).MarshalBinary()
	return append(dst, b...), err
}

func binaryDec[T any](data []byte) (T, error) {
	var v T
	err := any(&v).(encoding.BinaryUnmarshaler).UnmarshalBinary(data)
	return v, err
}

func jsonEnc[T any](dst []byte, v T) ([]byte, error) {
	b, err := json.Marshal(v)
	return append(dst, b...), err
}

func jsonDec[T any](data []byte) (T, error) {
	var v T
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&v); err != nil {
		var zero T
		return zero, err
	}
	if _, err := dec.Token(); err != io.EOF {
		var zero T
		return zero, errors.New("trailing data after the JSON value")
	}
	return v, nil
}

func jsonText[T any](dst []byte, v T) ([]byte, error) {
	b, err := json.Marshal(v)
	return append(dst, b...), err
}

// bits reads the integer or boolean at p, of size bytes, as a uint64 (sign-extended for signed kinds).
func bits(p unsafe.Pointer, k reflect.Kind, size uintptr) uint64 {
	switch {
	case k == reflect.Bool:
		if *(*bool)(p) {
			return 1
		}
		return 0
	case isInt(k):
		switch size {
		case 1:
			return uint64(int64(*(*int8)(p)))
		case 2:
			return uint64(int64(*(*int16)(p)))
		case 4:
			return uint64(int64(*(*int32)(p)))
		}
		return uint64(*(*int64)(p))
	}
	switch size {
	case 1:
		return uint64(*(*uint8)(p))
	case 2:
		return uint64(*(*uint16)(p))
	case 4:
		return uint64(*(*uint32)(p))
	}
	return *(*uint64)(p)
}

// setBits stores u at p, refusing a value that does not fit the kind.
func setBits(p unsafe.Pointer, k reflect.Kind, size uintptr, u uint64) error {
	switch {
	case k == reflect.Bool:
		if u > 1 {
			return fmt.Errorf("boolean %d is neither 0 nor 1", u)
		}
		*(*bool)(p) = u == 1
		return nil
	case isInt(k):
		n, shift := int64(u), 64-8*size
		if n<<shift>>shift != n {
			return fmt.Errorf("integer %d overflows %d bytes", n, size)
		}
	default:
		if size < 8 && u>>(8*size) != 0 {
			return fmt.Errorf("integer %d overflows %d bytes", u, size)
		}
	}
	switch size {
	case 1:
		*(*uint8)(p) = uint8(u)
	case 2:
		*(*uint16)(p) = uint16(u)
	case 4:
		*(*uint32)(p) = uint32(u)
	default:
		*(*uint64)(p) = u
	}
	return nil
}

// intEnc encodes integers and booleans: a key as fixed-width big-endian with the sign bit
// flipped (byte order is numeric order), a value as a (zig-zag) varint.
func intEnc[T any](t reflect.Type, key bool) func([]byte, T) ([]byte, error) {
	k, size := t.Kind(), t.Size()
	return func(dst []byte, v T) ([]byte, error) {
		u := bits(unsafe.Pointer(&v), k, size)
		if key {
			if isInt(k) {
				u ^= 1 << (8*size - 1)
			}
			for i := int(size) - 1; i >= 0; i-- {
				dst = append(dst, byte(u>>(8*i)))
			}
			return dst, nil
		}
		if isInt(k) {
			return binary.AppendVarint(dst, int64(u)), nil
		}
		return binary.AppendUvarint(dst, u), nil
	}
}

func intDec[T any](t reflect.Type, key bool) func([]byte) (T, error) {
	k, size := t.Kind(), t.Size()
	return func(data []byte) (T, error) {
		var v T
		var u uint64
		if key {
			if uintptr(len(data)) != size {
				return v, fmt.Errorf("%d bytes for a %v key, want %d", len(data), t, size)
			}
			for _, b := range data {
				u = u<<8 | uint64(b)
			}
			if isInt(k) {
				u ^= 1 << (8*size - 1)
				shift := 64 - 8*size
				u = uint64(int64(u<<shift) >> shift)
			}
		} else {
			var n int
			if isInt(k) {
				var s int64
				s, n = binary.Varint(data)
				u = uint64(s)
			} else {
				u, n = binary.Uvarint(data)
			}
			if n <= 0 || n != len(data) {
				return v, fmt.Errorf("bad varint for a %v value (%d bytes)", t, len(data))
			}
		}
		if err := setBits(unsafe.Pointer(&v), k, size, u); err != nil {
			return v, err
		}
		return v, nil
	}
}

// floatEnc encodes floats: a key as IEEE bits transformed so that byte order is numeric order
// (NaN refused, -0 as 0), a value as its bits, little-endian.
func floatEnc[T any](t reflect.Type, key bool) func([]byte, T) ([]byte, error) {
	size := t.Size()
	return func(dst []byte, v T) ([]byte, error) {
		var f float64
		if size == 4 {
			f = float64(*(*float32)(unsafe.Pointer(&v)))
		} else {
			f = *(*float64)(unsafe.Pointer(&v))
		}
		if !key {
			return binary.LittleEndian.AppendUint64(dst, math.Float64bits(f)), nil
		}
		if math.IsNaN(f) {
			return dst, errors.New("a NaN key equals no key")
		}
		if f == 0 {
			f = 0 // -0 is 0
		}
		u := math.Float64bits(f)
		if u>>63 == 1 {
			u = ^u
		} else {
			u |= 1 << 63
		}
		return binary.BigEndian.AppendUint64(dst, u), nil
	}
}

func floatDec[T any](t reflect.Type, key bool) func([]byte) (T, error) {
	size := t.Size()
	return func(data []byte) (T, error) {
		var v T
		if len(data) != 8 {
			return v, fmt.Errorf("%d bytes for a %v, want 8", len(data), t)
		}
		var f float64
		if key {
			u := binary.BigEndian.Uint64(data)
			if u>>63 == 1 {
				u &^= 1 << 63
			} else {
				u = ^u
			}
			f = math.Float64frombits(u)
			if math.IsNaN(f) {
				return v, errors.New("a NaN key")
			}
		} else {
			f = math.Float64frombits(binary.LittleEndian.Uint64(data))
		}
		if size == 4 {
			if f32 := float32(f); float64(f32) == f || math.IsNaN(f) {
				*(*float32)(unsafe.Pointer(&v)) = f32
			} else {
				return v, fmt.Errorf("%v does not fit a %v", f, t)
			}
		} else {
			*(*float64)(unsafe.Pointer(&v)) = f
		}
		return v, nil
	}
}

// fastText is the JSON of strings and integers without reflection; other kinds use encoding/json.
func fastText[T any](t reflect.Type) func([]byte, T) ([]byte, error) {
	k, size := t.Kind(), t.Size()
	switch {
	case k == reflect.String:
		return func(dst []byte, v T) ([]byte, error) {
			return AppendJSONString(dst, *(*string)(unsafe.Pointer(&v))), nil
		}
	case isInt(k):
		return func(dst []byte, v T) ([]byte, error) {
			return strconv.AppendInt(dst, int64(bits(unsafe.Pointer(&v), k, size)), 10), nil
		}
	case isUint(k):
		return func(dst []byte, v T) ([]byte, error) {
			return strconv.AppendUint(dst, bits(unsafe.Pointer(&v), k, size), 10), nil
		}
	}
	return jsonText[T]
}

// AppendJSONString appends s as a JSON string, as encoding/json writes it without HTML escaping,
// except for bytes that are not valid UTF-8: encoding/json makes each U+FFFD, which merges
// distinct keys; here a byte 0x80–0xFF that is not part of a valid UTF-8 sequence is written
// as the escape of a lone low surrogate, \udc80–\udcff (Python's "surrogateescape", PEP 383).
// No valid UTF-8 text holds a surrogate, so every distinct s gives a distinct JSON text, and
// AppendUnquoted gives back s byte for byte (Python: json.loads, then
// .encode("utf-8", "surrogateescape")). A strict JSON decoder reads such a byte as U+FFFD.
func AppendJSONString(dst []byte, s string) []byte {
	const hex = "0123456789abcdef"
	dst = append(dst, '"')
	start := 0
	for i := 0; i < len(s); {
		b := s[i]
		if b < utf8.RuneSelf {
			if b >= 0x20 && b != '"' && b != '\\' {
				i++
				continue
			}
			dst = append(dst, s[start:i]...)
			switch b {
			case '"', '\\':
				dst = append(dst, '\\', b)
			case '\n':
				dst = append(dst, '\\', 'n')
			case '\r':
				dst = append(dst, '\\', 'r')
			case '\t':
				dst = append(dst, '\\', 't')
			default:
				dst = append(dst, '\\', 'u', '0', '0', hex[b>>4], hex[b&0xF])
			}
			i++
			start = i
			continue
		}
		r, n := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && n == 1 {
			dst = append(dst, s[start:i]...)
			dst = append(dst, '\\', 'u', 'd', 'c', hex[b>>4], hex[b&0xF])
			i += n
			start = i
			continue
		}
		if r == '\u2028' || r == '\u2029' {
			dst = append(dst, s[start:i]...)
			dst = append(dst, '\\', 'u', '2', '0', '2', hex[r&0xF])
			i += n
			start = i
			continue
		}
		i += n
	}
	dst = append(dst, s[start:]...)
	return append(dst, '"')
}

// AppendTSVField appends JSON text j as a field of a key<TAB>value output line: a string
// without its quotes, with \t \n \r and \\ escaped; anything else as compact JSON. A string's
// bytes are written as they are, those that are not UTF-8 included: a string that
// AppendJSONString wrote comes out byte for byte (AppendUnquoted), and ParseTSVField reads it
// back.
func AppendTSVField(dst, j []byte) ([]byte, error) {
	if len(j) < 2 || j[0] != '"' {
		return AppendCompactJSON(dst, j)
	}
	s := j[1 : len(j)-1]
	if bytes.IndexByte(s, '\\') >= 0 || !json.Valid(j) {
		var err error
		if s, err = AppendUnquoted(nil, j); err != nil {
			return dst, fmt.Errorf("output record is not JSON: %w", err)
		}
	}
	return tsv.AppendEscaped(dst, s), nil
}

// AppendCompactJSON appends JSON text j, compacted if it holds whitespace; it refuses text that
// is not JSON.
func AppendCompactJSON(dst, j []byte) ([]byte, error) {
	if !json.Valid(j) {
		return dst, fmt.Errorf("output record is not JSON: %.40q", j)
	}
	if bytes.ContainsAny(j, " \t\r\n") {
		var buf bytes.Buffer
		if err := json.Compact(&buf, j); err != nil {
			return dst, fmt.Errorf("output record is not JSON: %w", err)
		}
		return append(dst, buf.Bytes()...), nil
	}
	return append(dst, j...), nil
}

// AppendUnquoted appends the bytes of the JSON string j (with its quotes), the inverse of
// AppendJSONString: escapes are resolved, a \udc80–\udcff that is not the second half of a
// surrogate pair is the byte 0x80–0xFF, any other lone surrogate is U+FFFD (as encoding/json
// reads it), and raw bytes between the quotes are kept as they are. It refuses j if it is not
// one JSON string.
func AppendUnquoted(dst, j []byte) ([]byte, error) {
	if len(j) < 2 || j[0] != '"' || j[len(j)-1] != '"' {
		return dst, fmt.Errorf("not a JSON string: %.40q", j)
	}
	s := j[1 : len(j)-1]
	for i := 0; i < len(s); {
		c := s[i]
		switch {
		case c == '"' || c < 0x20:
			return dst, fmt.Errorf("not a JSON string: byte %#x at %d of %.40q", c, i+1, j)
		case c != '\\':
			dst = append(dst, c)
			i++
			continue
		}
		if i+1 >= len(s) {
			return dst, fmt.Errorf("not a JSON string: a lone backslash at the end of %.40q", j)
		}
		switch e := s[i+1]; e {
		case '"', '\\', '/':
			dst = append(dst, e)
		case 'b':
			dst = append(dst, '\b')
		case 'f':
			dst = append(dst, '\f')
		case 'n':
			dst = append(dst, '\n')
		case 'r':
			dst = append(dst, '\r')
		case 't':
			dst = append(dst, '\t')
		case 'u':
			r, ok := hex4(s[i+2:])
			if !ok {
				return dst, fmt.Errorf("not a JSON string: bad \\u escape at %d of %.40q", i+1, j)
			}
			i += 6
			switch {
			case r >= 0xD800 && r < 0xDC00:
				if len(s) >= i+6 && s[i] == '\\' && s[i+1] == 'u' {
					if lo, ok := hex4(s[i+2:]); ok && lo >= 0xDC00 && lo < 0xE000 {
						dst = utf8.AppendRune(dst, 0x10000+(r-0xD800)<<10+(lo-0xDC00))
						i += 6
						continue
					}
				}
				dst = utf8.AppendRune(dst, utf8.RuneError)
			case r >= 0xDC80 && r < 0xDD00:
				dst = append(dst, byte(r-0xDC00))
			default:
				dst = utf8.AppendRune(dst, r) // a lone surrogate is U+FFFD
			}
			continue
		default:
			return dst, fmt.Errorf("not a JSON string: escape \\%c at %d of %.40q", e, i+1, j)
		}
		i += 2
	}
	return dst, nil
}

// hex4 decodes the 4 hex digits at the start of b.
func hex4(b []byte) (rune, bool) {
	if len(b) < 4 {
		return 0, false
	}
	var r rune
	for _, c := range b[:4] {
		switch {
		case c >= '0' && c <= '9':
			r = r<<4 | rune(c-'0')
		case c >= 'a' && c <= 'f':
			r = r<<4 | rune(c-'a'+10)
		case c >= 'A' && c <= 'F':
			r = r<<4 | rune(c-'A'+10)
		default:
			return 0, false
		}
	}
	return r, true
}

// ParseTSVField appends the bytes of a field of a key<TAB>value line as AppendTSVField writes a
// string: \t \n \r and \\ unescaped, every other byte as it is. It refuses any other escape.
func ParseTSVField(dst, field []byte) ([]byte, error) {
	return tsv.AppendUnescaped(dst, field, true)
}
