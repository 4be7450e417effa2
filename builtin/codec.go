package builtin

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
	"sort"
	"strings"

	"github.com/mapagg/mapagg/jobs"
)

// badParam returns a *ParamError for field of job, the reason formatted from format and args.
func badParam(job, field, format string, args ...any) *jobs.ParamError {
	return &jobs.ParamError{Job: job, Field: field, Reason: fmt.Sprintf(format, args...)}
}

// decodeParams decodes a job's JSON parameters into dst, a pointer to a struct whose fields carry
// json tags. It refuses anything but one JSON object, unknown fields (matched exactly, not
// case-insensitively as encoding/json would), values of the wrong type, and absent or null
// required fields. usage is an example shown when a required field is missing. It returns the set
// of fields present with a non-null value, so callers can apply defaults to the others.
func decodeParams(job, usage string, raw json.RawMessage, dst any, required ...string) (map[string]bool, error) {
	if len(raw) > jobs.MaxSpecBytes {
		return nil, badParam(job, "", "parameters are %d bytes, the limit is %d", len(raw), jobs.MaxSpecBytes)
	}
	if len(bytes.TrimSpace(raw)) == 0 {
		raw = json.RawMessage("{}")
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(raw, &fields); err != nil {
		var typeErr *json.UnmarshalTypeError
		if errors.As(err, &typeErr) {
			return nil, badParam(job, "", "parameters must be a JSON object (got %s); usage: %s", typeErr.Value, usage)
		}
		return nil, badParam(job, "", "parameters are not valid JSON: %v", err)
	}
	if fields == nil { // the JSON was null
		fields = map[string]json.RawMessage{}
	}
	allowed := jsonFieldNames(dst)
	for name := range fields {
		if !allowed[name] {
			return nil, badParam(job, name, "unknown field %q; allowed fields: %s", name, joinSorted(allowed))
		}
	}
	present := make(map[string]bool, len(fields))
	for name, v := range fields {
		if !bytes.Equal(bytes.TrimSpace(v), []byte("null")) {
			present[name] = true
		}
	}
	for _, name := range required {
		if !present[name] {
			return nil, badParam(job, name, "%q is required; usage: %s", name, usage)
		}
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(dst); err != nil {
		var typeErr *json.UnmarshalTypeError
		if errors.As(err, &typeErr) {
			field := typeErr.Field
			if i := strings.IndexByte(field, '.'); i >= 0 {
				field = field[:i]
			}
			want, got := typeErr.Type, typeErr.Value
			if ft := jsonFieldType(dst, field); ft != nil && ft != want {
				want, got = ft, got+" in the list" // an element of a list field
			}
			return nil, badParam(job, field, "%q must be %s (got %s)", field, describeType(want), got)
		}
		return nil, badParam(job, "", "parameters could not be decoded: %v", err)
	}
	return present, nil
}

// jsonFieldNames returns the JSON names of the fields of the struct dst points to.
func jsonFieldNames(dst any) map[string]bool {
	t := reflect.TypeOf(dst).Elem()
	names := make(map[string]bool, t.NumField())
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "-" || !f.IsExported() {
			continue
		}
		if name == "" {
			name = f.Name
		}
		names[name] = true
	}
	return names
}

// jsonFieldType returns the type of the field of the struct dst points to whose JSON name is name.
func jsonFieldType(dst any, name string) reflect.Type {
	t := reflect.TypeOf(dst).Elem()
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		if n, _, _ := strings.Cut(f.Tag.Get("json"), ","); n == name || n == "" && f.Name == name {
			return f.Type
		}
	}
	return nil
}

func joinSorted(set map[string]bool) string {
	names := make([]string, 0, len(set))
	for n := range set {
		names = append(names, n)
	}
	sort.Strings(names)
	return strings.Join(names, ", ")
}

// describeType names what a JSON value must be to decode into t.
func describeType(t reflect.Type) string {
	switch t.Kind() {
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "a non-negative integer"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return "an integer"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "true or false"
	case reflect.Slice, reflect.Array:
		return "a list of " + strings.TrimPrefix(strings.TrimPrefix(describeType(t.Elem()), "a "), "an ") + "s"
	default:
		return "a " + t.String()
	}
}

// decodeShardJSON decodes a built-in job's shard description: one JSON object with only known
// fields, at most MaxShardBytes long. Errors match ErrBadShard.
func decodeShardJSON(job string, data []byte, dst any) error {
	if len(data) > jobs.MaxShardBytes {
		return fmt.Errorf("%w: %s: %d bytes, the limit is %d", jobs.ErrBadShard, job, len(data), jobs.MaxShardBytes)
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(dst); err != nil {
		return fmt.Errorf("%w: %s: %v", jobs.ErrBadShard, job, err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return fmt.Errorf("%w: %s: trailing data after the JSON object", jobs.ErrBadShard, job)
	}
	return nil
}

// encodeShardJSON encodes a shard description and checks it fits in MaxShardBytes.
func encodeShardJSON(job string, v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, fmt.Errorf("%s: encode shard: %w", job, err)
	}
	b := bytes.TrimSuffix(buf.Bytes(), []byte("\n"))
	if len(b) > jobs.MaxShardBytes {
		return nil, fmt.Errorf("%s: a shard description is %d bytes, the limit is %d", job, len(b), jobs.MaxShardBytes)
	}
	return b, nil
}

// The built-in jobs encode partials in a small binary form: a tag byte naming the job, a version
// byte, then unsigned varints and length-prefixed byte strings. An aggregate's checkpoint form is
// a partial of the same job, so restoring one is decoding a partial.
const partialVersion = 1

// Tags of the built-in jobs' partials.
const (
	tagPrimes    = 'P'
	tagPi        = 'M' // Monte Carlo
	tagWordcount = 'W'
	tagSleep     = 'S'
)

// appendPartialHeader starts a partial of the job tagged tag.
func appendPartialHeader(b []byte, tag byte) []byte { return append(b, tag, partialVersion) }

// partialReader decodes a binary partial, remembering the first error.
type partialReader struct {
	b   []byte
	err error
}

// newPartialReader checks data's tag and version.
func newPartialReader(data []byte, tag byte) *partialReader {
	r := &partialReader{b: data}
	switch {
	case len(data) < 2:
		r.err = fmt.Errorf("%d bytes, too short", len(data))
	case data[0] != tag:
		r.err = fmt.Errorf("tag %q, want %q (a partial of another job type?)", data[0], tag)
	case data[1] != partialVersion:
		r.err = fmt.Errorf("format version %d, this build reads %d", data[1], partialVersion)
	default:
		r.b = data[2:]
	}
	return r
}

func (r *partialReader) uvarint() uint64 {
	if r.err != nil {
		return 0
	}
	v, n := binary.Uvarint(r.b)
	if n <= 0 {
		r.err = errors.New("truncated or overlong varint")
		return 0
	}
	r.b = r.b[n:]
	return v
}

// bytes reads a length-prefixed byte string of at most max bytes. The result aliases the input.
func (r *partialReader) bytes(max int) []byte {
	n := r.uvarint()
	if r.err != nil {
		return nil
	}
	if n > uint64(max) || n > uint64(len(r.b)) {
		r.err = fmt.Errorf("byte string of %d bytes: limit %d, %d left", n, max, len(r.b))
		return nil
	}
	s := r.b[:n:n]
	r.b = r.b[n:]
	return s
}

// remaining is how many bytes are left to read.
func (r *partialReader) remaining() int { return len(r.b) }

// finish returns the first error, or an error if bytes are left over.
func (r *partialReader) finish() error {
	if r.err == nil && len(r.b) != 0 {
		r.err = fmt.Errorf("%d trailing bytes", len(r.b))
	}
	return r.err
}
