package protocol

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
)

// The hot-path wire form of shard and result messages: binary, not JSON, so a worker and the
// leader spend no reflection and no base64 per shard. Every message starts with a 4-byte header:
// 'M', the message type ('S' shard, 'R' result; 'T' and 'B' their batches), the format version
// and the job's Kind ('A' aggregate, 'K' keyed). Integers are uvarints, strings and byte strings
// are a uvarint length and the bytes.
//
//	shard   M S 2 kind  epoch index job type shard
//	result  M R 2 kind  flags epoch index attempt micros job worker [partial | ref | error]
//
// flags: 1 partial present, 2 ref, 4 error (at most one).
//
// Decoders also read what earlier releases wrote, never written again: version 1 (the same
// without the kind byte) and JSON (it starts with '{'). Their shards' kind is read from the
// payload (legacyShardKind); their results say none.
const wireVersion = 2

// wireLegacyVersion is the format before the kind byte.
const wireLegacyVersion = 1

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

// header checks the header of message type typ and returns the rest and the job's kind: zero
// in a message of version 1. ok is false for another type or version; err is set for a header
// of this type with a kind this build does not know.
func header(data []byte, typ byte) (body []byte, kind Kind, ok bool, err error) {
	if len(data) < 3 || data[0] != 'M' || data[1] != typ {
		return nil, 0, false, nil
	}
	switch data[2] {
	case wireLegacyVersion:
		return data[3:], 0, true, nil
	case wireVersion:
		if len(data) < 4 || !Kind(data[3]).Valid() {
			return nil, 0, true, fmt.Errorf("job kind %q", data[3:min(len(data), 4)])
		}
		return data[4:], Kind(data[3]), true, nil
	}
	return nil, 0, false, nil
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
	b = append(b, 'M', 'S', wireVersion, byte(m.Kind))
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
	b = append(b, 'M', 'R', wireVersion, byte(m.Kind), flags)
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
	rest, err := decodeResultPrefix(body, m)
	if err == nil && len(rest) != 0 {
		err = fmt.Errorf("%d trailing bytes", len(rest))
	}
	return err
}

// decodeResultPrefix decodes one result body from the start of body and returns what follows.
func decodeResultPrefix(body []byte, m *ResultMsg) ([]byte, error) {
	if len(body) < 1 {
		return nil, errShort
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
			return nil, errors.New("empty error")
		}
	case flagRef:
		m.Ref = r.string(maxRefLen)
		if r.err == nil && m.Ref == "" {
			return nil, errors.New("empty ref")
		}
	case flagPartial:
		m.Partial = r.bytes(maxPartial)
	default:
		return nil, fmt.Errorf("flags %#x", flags)
	}
	return r.b, r.err
}

// MaxResultBatch bounds the results in one batch message.
const MaxResultBatch = 4096

// EncodeResults returns the wire form of results of one job: a single result message for one,
// a batch message for several (M B 2 kind, a uvarint count, then each result's body as in 'R').
func EncodeResults(rs []*ResultMsg) ([]byte, error) {
	switch {
	case len(rs) == 0 || len(rs) > MaxResultBatch:
		return nil, fmt.Errorf("%w: %d results in a batch: use 1 to %d", ErrBadMessage, len(rs), MaxResultBatch)
	case len(rs) == 1:
		return rs[0].Encode()
	}
	n := 8
	for _, r := range rs {
		if r.Job != rs[0].Job || r.Kind != rs[0].Kind {
			return nil, fmt.Errorf("%w: a batch mixes jobs %s (%s) and %s (%s)", ErrBadMessage, rs[0].Job, rs[0].Kind, r.Job, r.Kind)
		}
		n += 40 + len(r.Job) + len(r.Worker) + len(r.Partial) + len(r.Ref) + len(r.Error)
	}
	if !rs[0].Kind.Valid() {
		return nil, fmt.Errorf("%w: results of job %s: %v", ErrBadMessage, rs[0].Job, errNoKind)
	}
	// Each body is the 'R' form without its 4-byte header.
	b := append(make([]byte, 0, n), 'M', 'B', wireVersion, byte(rs[0].Kind))
	b = binary.AppendUvarint(b, uint64(len(rs)))
	for _, r := range rs {
		start := len(b)
		b = r.appendBinary(b)
		b = append(b[:start], b[start+4:]...)
	}
	return b, nil
}

// DecodeResults parses a result message or a batch of results (all of one job), checking each
// as DecodeResultMsg does. Partials alias data.
func DecodeResults(data []byte) ([]*ResultMsg, error) {
	body, kind, ok, err := header(data, 'B')
	if err != nil {
		return nil, fmt.Errorf("%w: result batch: %v", ErrBadMessage, err)
	}
	if !ok {
		m, err := DecodeResultMsg(data)
		if err != nil {
			return nil, err
		}
		return []*ResultMsg{m}, nil
	}
	count, k := binary.Uvarint(body)
	if k <= 0 || count < 2 || count > MaxResultBatch {
		return nil, fmt.Errorf("%w: result batch: count", ErrBadMessage)
	}
	body = body[k:]
	// One allocation for the batch's results (each entry is at least a byte: a forged count
	// does not allocate past the message).
	n := min(count, uint64(len(body)))
	msgs := make([]ResultMsg, n)
	out := make([]*ResultMsg, 0, n)
	for i := uint64(0); i < count; i++ {
		m := &ResultMsg{}
		if i < n {
			m = &msgs[i]
		}
		m.Kind = kind
		rest, err := decodeResultPrefix(body, m)
		if err != nil {
			return nil, fmt.Errorf("%w: result batch entry %d: %v", ErrBadMessage, i, err)
		}
		if err := m.check(); err != nil {
			return nil, err
		}
		if m.Job != out0Job(out, m) {
			return nil, fmt.Errorf("%w: result batch mixes jobs %s and %s", ErrBadMessage, out[0].Job, m.Job)
		}
		out = append(out, m)
		body = rest
	}
	if len(body) != 0 {
		return nil, fmt.Errorf("%w: result batch: %d trailing bytes", ErrBadMessage, len(body))
	}
	return out, nil
}

func out0Job(out []*ResultMsg, m *ResultMsg) string {
	if len(out) == 0 {
		return m.Job
	}
	return out[0].Job
}

// MaxShardBatch bounds the shards in one message.
const MaxShardBatch = 256

// EncodeShards returns the wire form of consecutive shards of one job of kind, plan[first:
// first+n]: a shard message for one, a batch message for several (M T 2 kind, epoch, first
// index, job, type, a uvarint count, then each shard as a byte string).
func EncodeShards(kind Kind, job, typ string, epoch uint64, first int, shards [][]byte) ([]byte, error) {
	switch {
	case len(shards) == 0 || len(shards) > MaxShardBatch:
		return nil, fmt.Errorf("%w: %d shards in a batch: use 1 to %d", ErrBadMessage, len(shards), MaxShardBatch)
	case len(shards) == 1:
		m := ShardMsg{Kind: kind, Job: job, Type: typ, Index: first, Epoch: epoch, Shard: shards[0]}
		return m.Encode()
	case !kind.Valid():
		return nil, fmt.Errorf("%w: shards of job %s: %v", ErrBadMessage, job, errNoKind)
	}
	n := 24 + len(job) + len(typ)
	for _, s := range shards {
		n += 4 + len(s)
	}
	b := append(make([]byte, 0, n), 'M', 'T', wireVersion, byte(kind))
	b = binary.AppendUvarint(b, epoch)
	b = binary.AppendUvarint(b, uint64(first))
	b = appendString(b, job)
	b = appendString(b, typ)
	b = binary.AppendUvarint(b, uint64(len(shards)))
	for _, s := range shards {
		b = appendBytes(b, s)
	}
	return b, nil
}

// DecodeShards parses a shard message or a batch of consecutive shards of one job, checking each
// as DecodeShardMsg does. Shards alias data.
func DecodeShards(data []byte) ([]*ShardMsg, error) {
	body, kind, ok, err := header(data, 'T')
	if err != nil {
		return nil, fmt.Errorf("%w: shard batch: %v", ErrBadMessage, err)
	}
	if !ok {
		m, err := DecodeShardMsg(data)
		if err != nil {
			return nil, err
		}
		return []*ShardMsg{m}, nil
	}
	r := reader{b: body}
	epoch := r.uvarint(math.MaxUint64)
	first := r.uvarint(math.MaxInt32)
	job := r.string(maxIDLen)
	typ := r.string(maxTypeLen)
	count := r.uvarint(MaxShardBatch)
	if r.err == nil && count < 2 {
		r.err = fmt.Errorf("count %d", count)
	}
	// One allocation for the batch's shards (each is at least a byte: a forged count does not
	// allocate past the message).
	n := min(count, uint64(len(r.b)))
	msgs := make([]ShardMsg, n)
	out := make([]*ShardMsg, 0, n)
	for i := uint64(0); r.err == nil && i < count; i++ {
		m := &ShardMsg{}
		if i < n {
			m = &msgs[i]
		}
		*m = ShardMsg{Kind: kind, Job: job, Type: typ, Epoch: epoch, Index: int(first + i), Shard: r.bytes(maxPartial)}
		if m.Kind == 0 {
			m.Kind = legacyShardKind(m.Shard)
		}
		if r.err == nil {
			if err := m.check(); err != nil {
				return nil, err
			}
		}
		out = append(out, m)
	}
	if err := r.end(); err != nil {
		return nil, fmt.Errorf("%w: shard batch: %v", ErrBadMessage, err)
	}
	return out, nil
}
