package protocol

import (
	"encoding/json"
	"errors"
	"fmt"

	"github.com/mapagg/mapagg/jobs"
)

// ErrBadMessage is matched by every error the message decoders return.
var ErrBadMessage = errors.New("bad message")

var errNoKind = errors.New("no job kind")

// Kind is a job's kind. It selects how a worker runs the job's shards and how the leader takes
// their results. It travels in every shard and result message and in the checkpoint. The zero
// Kind is unknown: messages and checkpoints of earlier releases carry none.
type Kind byte

const (
	// KindAggregate is a job whose shards' partials merge into its aggregate.
	KindAggregate Kind = 'A'
	// KindKeyed is a keyed job: its shards are map and reduce tasks (KeyedTask).
	KindKeyed Kind = 'K'
)

// Valid reports whether k is a kind this build knows.
func (k Kind) Valid() bool { return k == KindAggregate || k == KindKeyed }

// String returns the kind's name: "aggregate", "keyed", or "unknown".
func (k Kind) String() string {
	switch k {
	case KindAggregate:
		return "aggregate"
	case KindKeyed:
		return "keyed"
	}
	return "unknown"
}

// MarshalText returns the kind's name (a checkpoint stores it).
func (k Kind) MarshalText() ([]byte, error) {
	if !k.Valid() {
		return nil, errNoKind
	}
	return []byte(k.String()), nil
}

// UnmarshalText parses a kind's name.
func (k *Kind) UnmarshalText(b []byte) error {
	switch string(b) {
	case "aggregate":
		*k = KindAggregate
	case "keyed":
		*k = KindKeyed
	default:
		return fmt.Errorf("job kind %q: this build knows aggregate and keyed", Clip(string(b), 32))
	}
	return nil
}

// ShardMsg is one shard on the shards stream, published by the leader, consumed by any worker.
type ShardMsg struct {
	// Kind is the job's kind; a worker runs the shard by it. Never zero once decoded.
	Kind  Kind   `json:"-"`
	Job   string `json:"j"`
	Type  string `json:"t"`
	Index int    `json:"i"`
	// Epoch is the job's plan epoch: the election epoch of the leader that planned the job. It is
	// the job's fencing token; a result carrying another epoch is not merged.
	Epoch uint64 `json:"e"`
	Shard []byte `json:"s"`
}

// Encode returns the message's wire form (binary, see wire.go). The kind must be set.
func (m *ShardMsg) Encode() ([]byte, error) {
	if !m.Kind.Valid() {
		return nil, fmt.Errorf("%w: shard %s/%d: %v", ErrBadMessage, m.Job, m.Index, errNoKind)
	}
	return m.appendBinary(make([]byte, 0, 16+len(m.Job)+len(m.Type)+len(m.Shard))), nil
}

// DecodeShardMsg parses a shard message from the stream (binary, or the JSON of earlier releases).
// The returned Shard aliases data.
func DecodeShardMsg(data []byte) (*ShardMsg, error) {
	var m ShardMsg
	body, kind, ok, err := header(data, 'S')
	switch {
	case err != nil:
		return nil, fmt.Errorf("%w: shard: %v", ErrBadMessage, err)
	case ok:
		if err := decodeShardBinary(body, &m); err != nil {
			return nil, fmt.Errorf("%w: shard: %v", ErrBadMessage, err)
		}
	default:
		if err := json.Unmarshal(data, &m); err != nil {
			return nil, fmt.Errorf("%w: shard: %v", ErrBadMessage, err)
		}
	}
	m.Kind = kind
	if kind == 0 {
		m.Kind = legacyShardKind(m.Shard) // an earlier release's message
	}
	if err := m.check(); err != nil {
		return nil, err
	}
	return &m, nil
}

// check validates a decoded shard.
func (m *ShardMsg) check() error {
	if err := CheckID(m.Job); err != nil {
		return fmt.Errorf("%w: shard: %w", ErrBadMessage, err)
	}
	if !m.Kind.Valid() || m.Type == "" || m.Index < 0 || m.Index >= jobs.MaxShards || m.Epoch == 0 || len(m.Shard) > jobs.MaxShardBytes {
		return fmt.Errorf("%w: shard %s/%d: kind, type, index, epoch or size out of range", ErrBadMessage, m.Job, m.Index)
	}
	return nil
}

// ResultMsg is the outcome of one shard execution, published by a worker, consumed by the leader.
// Exactly one of Partial, Ref or Error is set (Partial may be empty for a job whose partials are).
type ResultMsg struct {
	// Kind is copied from the ShardMsg. Zero only in a result of an earlier release.
	Kind    Kind   `json:"-"`
	Job     string `json:"j"`
	Index   int    `json:"i"`
	Epoch   uint64 `json:"e"` // copied from the ShardMsg
	Attempt int    `json:"a"` // 1 for the first delivery
	Worker  string `json:"w,omitempty"`
	// Partial is the encoded partial when it is small.
	Partial []byte `json:"p,omitempty"`
	// Ref names a blob (in the jobs container) that holds a large partial.
	Ref string `json:"r,omitempty"`
	// Error is set when the shard failed for good: the retry limit was reached.
	Error string `json:"x,omitempty"`
	// Micros is how long the map step ran.
	Micros int64 `json:"d,omitempty"`
}

// Encode returns the message's wire form (binary, see wire.go). The kind must be set.
func (m *ResultMsg) Encode() ([]byte, error) {
	if !m.Kind.Valid() {
		return nil, fmt.Errorf("%w: result %s/%d: %v", ErrBadMessage, m.Job, m.Index, errNoKind)
	}
	return m.appendBinary(make([]byte, 0, 32+len(m.Job)+len(m.Worker)+len(m.Partial)+len(m.Ref)+len(m.Error))), nil
}

// DecodeResultMsg parses a result message from the stream (binary, or the JSON of earlier
// releases). The returned Partial aliases data.
func DecodeResultMsg(data []byte) (*ResultMsg, error) {
	var m ResultMsg
	body, kind, ok, err := header(data, 'R')
	switch {
	case err != nil:
		return nil, fmt.Errorf("%w: result: %v", ErrBadMessage, err)
	case ok:
		if err := decodeResultBinary(body, &m); err != nil {
			return nil, fmt.Errorf("%w: result: %v", ErrBadMessage, err)
		}
	default:
		if err := json.Unmarshal(data, &m); err != nil {
			return nil, fmt.Errorf("%w: result: %v", ErrBadMessage, err)
		}
	}
	m.Kind = kind
	if err := m.check(); err != nil {
		return nil, err
	}
	return &m, nil
}

// check validates a decoded result.
func (m *ResultMsg) check() error {
	if err := CheckID(m.Job); err != nil {
		return fmt.Errorf("%w: result: %w", ErrBadMessage, err)
	}
	if m.Kind != 0 && !m.Kind.Valid() || m.Index < 0 || m.Index >= jobs.MaxShards || m.Epoch == 0 || m.Attempt < 1 {
		return fmt.Errorf("%w: result %s/%d: kind, index, epoch or attempt out of range", ErrBadMessage, m.Job, m.Index)
	}
	if m.Ref != "" && (len(m.Partial) > 0 || m.Error != "") || m.Error != "" && len(m.Partial) > 0 {
		return fmt.Errorf("%w: result %s/%d: a partial, a ref and an error exclude each other", ErrBadMessage, m.Job, m.Index)
	}
	return nil
}
