package builtin

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"

	"github.com/mapagg/mapagg/jobs"
)

// badParam returns a *ParamError for field of job, the reason formatted from format and args.
func badParam(job, field, format string, args ...any) *jobs.ParamError {
	return &jobs.ParamError{Job: job, Field: field, Reason: fmt.Sprintf(format, args...)}
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
