package protocol

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
)

// The hot-path wire form of shard and result messages: binary, not JSON, so a worker and the
// leader spend no reflection and no base64 per shard. Every message starts with a 3-byte header,
// 'M', a kind ('S' shard, 'R' result) and the format version; integers are uvarints, strings and
// byte strings are a uvarint length and the bytes. Decoders also accept the JSON form of earlier
// releases (it starts with '{').
//
//	shard   M S 1  epoch index job type shard
//	result  M R 1  flags epoch index attempt micros job worker [partial | ref | error]
//
// flags: 1 partial present, 2 ref, 4 error (at most one).
const wireVersion = 1

const (
	flagPartial = 1 << iota
	flagRef
	flagError
)

var errShort = errors.New("truncated")

func appendString(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

func appendBytes(b, s []byte) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

// reader reads the fields of a binary message.
type reader struct {
	b   []byte
	err error
}

func (r *reader) uvarint(limit uint64) uint64 {
	if r.err != nil {
		return 0
	}
	v, n := binary.Uvarint(r.b)
	if n <= 0 {
		r.err = errShort
		return 0
	}
	if v > limit {
		r.err = fmt.Errorf("value %d above %d", v, limit)
		return 0
	}
	r.b = r.b[n:]
	return v
}

func (r *reader) bytes(limit int) []byte {
	n := r.uvarint(uint64(limit))
	if r.err != nil {
		return nil
	}
	if n > uint64(len(r.b)) {
		r.err = errShort
		return nil
	}
	s := r.b[:n:n]
	r.b = r.b[n:]
	return s
}

func (r *reader) string(limit int) string { return string(r.bytes(limit)) }

func (r *reader) end() error {
	if r.err == nil && len(r.b) != 0 {
		r.err = fmt.Errorf("%d trailing bytes", len(r.b))
	}
	return r.err
}

// header checks the 3-byte header of kind and returns the rest.
func header(data []byte, kind byte) ([]byte, bool) {
	if len(data) < 3 || data[0] != 'M' || data[1] != kind || data[2] != wireVersion {
		return nil, false
	}
	return data[3:], true
}

const (
	maxIDLen     = 256
	maxTypeLen   = 64
	maxWorkerLen = 256
	maxRefLen    = 1024
	maxErrorLen  = 64 << 10
	maxPartial   = 64 << 20
)

func (m *ShardMsg) appendBinary(b []byte) []byte {
	b = append(b, 'M', 'S', wireVersion)
	b = binary.AppendUvarint(b, m.Epoch)
	b = binary.AppendUvarint(b, uint64(m.Index))
	b = appendString(b, m.Job)
	b = appendString(b, m.Type)
	return appendBytes(b, m.Shard)
}

func decodeShardBinary(body []byte, m *ShardMsg) error {
	r := reader{b: body}
	m.Epoch = r.uvarint(math.MaxUint64)
	m.Index = int(r.uvarint(math.MaxInt32))
	m.Job = r.string(maxIDLen)
	m.Type = r.string(maxTypeLen)
	m.Shard = r.bytes(maxPartial)
	return r.end()
}

func (m *ResultMsg) appendBinary(b []byte) []byte {
	var flags byte
	switch {
	case m.Error != "":
		flags = flagError
	case m.Ref != "":
		flags = flagRef
	case len(m.Partial) > 0:
		flags = flagPartial
	}
	b = append(b, 'M', 'R', wireVersion, flags)
	b = binary.AppendUvarint(b, m.Epoch)
	b = binary.AppendUvarint(b, uint64(m.Index))
	b = binary.AppendUvarint(b, uint64(m.Attempt))
	b = binary.AppendUvarint(b, uint64(max(m.Micros, 0)))
	b = appendString(b, m.Job)
	b = appendString(b, m.Worker)
	switch flags {
	case flagError:
		b = appendString(b, m.Error)
	case flagRef:
		b = appendString(b, m.Ref)
	case flagPartial:
		b = appendBytes(b, m.Partial)
	}
	return b
}

func decodeResultBinary(body []byte, m *ResultMsg) error {
	if len(body) < 1 {
		return errShort
	}
	flags := body[0]
	r := reader{b: body[1:]}
	m.Epoch = r.uvarint(math.MaxUint64)
	m.Index = int(r.uvarint(math.MaxInt32))
	m.Attempt = int(r.uvarint(math.MaxInt32))
	m.Micros = int64(r.uvarint(math.MaxInt64))
	m.Job = r.string(maxIDLen)
	m.Worker = r.string(maxWorkerLen)
	switch flags {
	case 0:
	case flagError:
		m.Error = r.string(maxErrorLen)
		if r.err == nil && m.Error == "" {
			return errors.New("empty error")
		}
	case flagRef:
		m.Ref = r.string(maxRefLen)
		if r.err == nil && m.Ref == "" {
			return errors.New("empty ref")
		}
	case flagPartial:
		m.Partial = r.bytes(maxPartial)
	default:
		return fmt.Errorf("flags %#x", flags)
	}
	return r.end()
}
