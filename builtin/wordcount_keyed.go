package builtin

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"iter"
	"strconv"

	"github.com/mapagg/mapagg/jobs"
)

// With "output":"blob", wordcount is a keyed job: map tasks emit (word, 1) for every word of
// their range, combined per word on the map side; reduce tasks write each word's count. One
// registered type runs either way: wordcount is a jobs.Keyable, and the parameters choose.
const (
	wordcountOutputValue = "value"
	wordcountOutputBlob  = "blob"
)

var (
	_ jobs.Keyable  = wordcount{}
	_ jobs.KeyedJob = wordcountKeyed{}
)

// Keyed returns wordcount's keyed form (used with "output":"blob").
func (wordcount) Keyed() jobs.KeyedJob { return wordcountKeyed{} }

// RunsKeyed reports whether the parameters ask for "output":"blob".
func (wordcount) RunsKeyed(params json.RawMessage) bool {
	p, err := parseWordcountParams(params)
	return err == nil && p.Output == wordcountOutputBlob
}

// wordcountKeyed is the keyed form: keys are words (their bytes), values uvarint counts.
type wordcountKeyed struct{}

func (wordcountKeyed) Type() string { return wordcountType }

func (wordcountKeyed) Validate(params json.RawMessage) error { return wordcount{}.Validate(params) }

func (wordcountKeyed) Split(ctx context.Context, env jobs.Env, params json.RawMessage) ([][]byte, error) {
	return wordcount{}.Split(ctx, env, params)
}

// OutputText: the words are text (stored as TSV unless the job asks otherwise), the counts not.
func (wordcountKeyed) OutputText() (key, value bool) { return true, false }

func (wordcountKeyed) Partitions(params json.RawMessage) (int, error) {
	p, err := parseWordcountParams(params)
	return p.Partitions, err
}

var uvarintOne = []byte{1}

// Map emits (word, 1) for each word starting in the shard's range.
func (wordcountKeyed) Map(ctx context.Context, env jobs.Env, task jobs.Task, emit func(key, value []byte) error) error {
	s, err := decodeWordcountShard(task.Shard)
	if err != nil {
		return err
	}
	var emitErr error
	_, err = scanShardWords(ctx, env, s, nil, func(w []byte) {
		if emitErr == nil {
			emitErr = emit(w, uvarintOne)
		}
	}, wordcountChunk)
	if emitErr != nil {
		return emitErr
	}
	return err
}

// Combiner adds two counts.
func (wordcountKeyed) Combiner() func(dst, a, b []byte) ([]byte, error) {
	return func(dst, a, b []byte) ([]byte, error) {
		x, err := wordcountCount(a)
		if err != nil {
			return dst, err
		}
		y, err := wordcountCount(b)
		if err != nil {
			return dst, err
		}
		return binary.AppendUvarint(dst, x+y), nil
	}
}

func wordcountCount(v []byte) (uint64, error) {
	n, k := binary.Uvarint(v)
	if k <= 0 || k != len(v) {
		return 0, fmt.Errorf("%w: wordcount: a count of %d bytes", jobs.ErrBadRecord, len(v))
	}
	return n, nil
}

// Reduce writes the word (a JSON string) and its count.
func (wordcountKeyed) Reduce(_ context.Context, key []byte, values iter.Seq[[]byte], emit func(key, value []byte) error) error {
	var total uint64
	var err error
	for v := range values {
		var n uint64
		if n, err = wordcountCount(v); err != nil {
			return err
		}
		total += n
	}
	var kb [64]byte
	var vb [20]byte
	return emit(jobs.AppendJSONString(kb[:0], string(key)), strconv.AppendUint(vb[:0], total, 10))
}
