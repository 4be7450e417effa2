package builtin

import (
	"bytes"
	"cmp"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"iter"
	"math"
	"strconv"

	"github.com/mapagg/mapagg/jobs"
)

// regroup is a keyed job over records: another keyed job's output (or blobs of the same JSON
// lines). It groups them by their key, their value or all into one, and writes one record per
// group: how many records it holds, or the sum, minimum or maximum of a number of each record.
// Jobs chain through it: wordcount's word → count, regrouped by value, is count → words with
// that count; that, summed as key×value into one group, is the corpus's total words.
type regroup struct{}

var (
	_ jobs.Keyable  = regroup{}
	_ jobs.KeyedJob = regroupKeyed{}
)

// RegroupParams are regroup's parameters. The input is a jobs.BlobInput: "job" (a succeeded
// keyed job, whose output records are read), or "container" and "prefix" of blobs whose lines
// are such records ({"key":K,"value":V}).
type RegroupParams struct {
	jobs.BlobInput
	// By is what a record is grouped by: "key" (default), "value" (records with equal values
	// form a group, keyed by that value), or "all" (one group, keyed "all").
	By string `json:"by,omitempty"`
	// Agg is what a group's record holds: "count" (default: how many records), or "sum", "min"
	// or "max" of the number Of names.
	Agg string `json:"agg,omitempty"`
	// Of is the number "sum", "min" and "max" take from each record: "value" (default), "key",
	// or "key*value" (their product). It must be a JSON integer (64 bits); not with "count".
	Of string `json:"of,omitempty"`
	// Partitions is the number of output blobs, 1 to 10,000. Optional: 1 with "by":"all", else
	// the cluster's default.
	Partitions int `json:"partitions,omitempty"`
}

// Usage is an example of good parameters.
func (RegroupParams) Usage() string {
	return `{"job": "20261125-120000-0123abcd", "by": "value", "agg": "count"}`
}

const (
	regroupType = "regroup"

	regroupByKey   = "key"
	regroupByValue = "value"
	regroupByAll   = "all"

	regroupCount = "count"
	regroupSum   = "sum"
	regroupMin   = "min"
	regroupMax   = "max"

	regroupOfValue   = "value"
	regroupOfKey     = "key"
	regroupOfProduct = "key*value"

	// regroupAllKey is the key of the one group of "by":"all".
	regroupAllKey = `"all"`
)

// regroupShard is a map task: a range of record lines and what to do with each.
type regroupShard struct {
	jobs.BlobRange
	By  string `json:"by"`
	Agg string `json:"agg"`
	Of  string `json:"of,omitempty"`
}

func parseRegroupParams(raw json.RawMessage) (RegroupParams, error) {
	var p RegroupParams
	if _, err := jobs.DecodeParams(regroupType, raw, &p); err != nil {
		return p, err
	}
	if err := p.BlobInput.Validate(); err != nil {
		var pe *jobs.ParamError
		if errors.As(err, &pe) && pe.Job == "" {
			pe.Job = regroupType
		}
		return p, err
	}
	p.By = cmp.Or(p.By, regroupByKey)
	p.Agg = cmp.Or(p.Agg, regroupCount)
	switch {
	case p.By != regroupByKey && p.By != regroupByValue && p.By != regroupByAll:
		return p, badParam(regroupType, "by", `"by" must be "key", "value" or "all" (got %q)`, p.By)
	case p.Agg != regroupCount && p.Agg != regroupSum && p.Agg != regroupMin && p.Agg != regroupMax:
		return p, badParam(regroupType, "agg", `"agg" must be "count", "sum", "min" or "max" (got %q)`, p.Agg)
	case p.Agg == regroupCount && p.Of != "":
		return p, badParam(regroupType, "of", `"of" names the number "sum", "min" and "max" take: leave it out with "agg":"count" (got %q)`, p.Of)
	case p.Partitions < 0 || p.Partitions > jobs.MaxPartitions:
		return p, badParam(regroupType, "partitions", `"partitions" must be between 1 and %d, or 0 for the default (got %d)`, jobs.MaxPartitions, p.Partitions)
	}
	if p.Agg != regroupCount {
		p.Of = cmp.Or(p.Of, regroupOfValue)
		if p.Of != regroupOfValue && p.Of != regroupOfKey && p.Of != regroupOfProduct {
			return p, badParam(regroupType, "of", `"of" must be "value", "key" or "key*value" (got %q)`, p.Of)
		}
	}
	if p.By == regroupByAll && p.Partitions == 0 {
		p.Partitions = 1
	}
	return p, nil
}

// Type returns "regroup".
func (regroup) Type() string { return regroupType }

// Validate checks the parameters without touching storage; errors match ErrBadParams.
func (regroup) Validate(params json.RawMessage) error {
	_, err := parseRegroupParams(params)
	return err
}

// Split cuts the input records into ranges, one map task each.
func (regroup) Split(ctx context.Context, env jobs.Env, params json.RawMessage) ([][]byte, error) {
	p, err := parseRegroupParams(params)
	if err != nil {
		return nil, err
	}
	ranges, err := p.BlobInput.Split(ctx, env)
	if err != nil {
		return nil, err
	}
	shards := make([][]byte, len(ranges))
	for i, r := range ranges {
		if shards[i], err = encodeShardJSON(regroupType, regroupShard{BlobRange: r, By: p.By, Agg: p.Agg, Of: p.Of}); err != nil {
			return nil, err
		}
	}
	return shards, nil
}

// Map is not called: regroup always runs keyed.
func (regroup) Map(context.Context, jobs.Env, jobs.Task) ([]byte, error) {
	return nil, errors.New("regroup runs as a keyed job: it has no aggregate")
}

// NewAggregate fails: regroup always runs keyed.
func (regroup) NewAggregate(json.RawMessage) (jobs.Aggregate, error) {
	return nil, errors.New("regroup runs as a keyed job: it has no aggregate")
}

// Keyed returns the keyed form, the only one.
func (regroup) Keyed() jobs.KeyedJob { return regroupKeyed{} }

// RunsKeyed is always true.
func (regroup) RunsKeyed(json.RawMessage) bool { return true }

// regroupKeyed is the keyed form. Keys are a group's key: an integer (tag 1, 8 bytes that sort
// as the integer) or any other JSON text (tag 2). Values are the aggregate's tag and a zigzag
// varint, so Combiner and Reduce, which see no parameters, know what to do.
type regroupKeyed struct{}

const (
	regroupTagInt  = 1
	regroupTagJSON = 2
)

func (regroupKeyed) Type() string { return regroupType }

func (regroupKeyed) Validate(params json.RawMessage) error { return regroup{}.Validate(params) }

func (regroupKeyed) Split(ctx context.Context, env jobs.Env, params json.RawMessage) ([][]byte, error) {
	return regroup{}.Split(ctx, env, params)
}

func (regroupKeyed) Partitions(params json.RawMessage) (int, error) {
	p, err := parseRegroupParams(params)
	return p.Partitions, err
}

// Map reads the records of its range and emits (group, number) for each.
func (regroupKeyed) Map(ctx context.Context, env jobs.Env, task jobs.Task, emit func(key, value []byte) error) error {
	var s regroupShard
	if err := decodeShardJSON(regroupType, task.Shard, &s); err != nil {
		return err
	}
	if err := s.BlobRange.Validate(); err != nil {
		return err
	}
	agg := regroupAggTag(s.Agg)
	if agg == 0 || (s.By != regroupByKey && s.By != regroupByValue && s.By != regroupByAll) {
		return fmt.Errorf("%w: regroup: by %q, agg %q", jobs.ErrBadShard, s.By, s.Agg)
	}
	var kbuf, vbuf []byte
	return jobs.Lines(ctx, env, s.BlobRange, func(line []byte) error {
		if len(bytes.TrimSpace(line)) == 0 {
			return nil
		}
		k, v, err := jobs.SplitRecord(line)
		if err != nil {
			return err
		}
		switch s.By {
		case regroupByKey, regroupByValue:
			g, what := k, "key"
			if s.By == regroupByValue {
				g, what = v, "value"
			}
			if kbuf = appendRegroupKey(kbuf[:0], g); kbuf[0] == regroupTagJSON && !json.Valid(g) {
				return fmt.Errorf("regroup: record %.60q: its %s is not JSON", line, what)
			}
		default:
			kbuf = append(kbuf[:0], regroupTagJSON)
			kbuf = append(kbuf, regroupAllKey...)
		}
		n := int64(1)
		if agg != 'c' {
			if n, err = regroupNumber(s.Of, k, v); err != nil {
				return err
			}
		}
		vbuf = binary.AppendVarint(append(vbuf[:0], agg), n)
		return emit(kbuf, vbuf)
	})
}

// regroupAggTag is the value tag of an aggregate ("" or an unknown one: 0).
func regroupAggTag(agg string) byte {
	switch agg {
	case regroupCount:
		return 'c'
	case regroupSum:
		return 's'
	case regroupMin:
		return 'm'
	case regroupMax:
		return 'M'
	}
	return 0
}

// appendRegroupKey appends the group key of JSON text j: an integer sorts as one.
func appendRegroupKey(dst, j []byte) []byte {
	if n, ok := jsonInt(j); ok {
		dst = append(dst, regroupTagInt)
		return binary.BigEndian.AppendUint64(dst, uint64(n)^(1<<63))
	}
	return append(append(dst, regroupTagJSON), j...)
}

// jsonInt parses JSON text j as a 64-bit integer.
func jsonInt(j []byte) (int64, bool) {
	if len(j) == 0 || len(j) > 20 || j[0] == '+' || j[0] == '0' && len(j) > 1 {
		return 0, false
	}
	n, err := strconv.ParseInt(string(j), 10, 64)
	return n, err == nil && !(n == 0 && j[0] == '-')
}

// regroupNumber is the number of a record that "of" names.
func regroupNumber(of string, k, v []byte) (int64, error) {
	num := func(what string, j []byte) (int64, error) {
		n, ok := jsonInt(j)
		if !ok {
			return 0, fmt.Errorf(`regroup: record with key %.60s: its %s %.60s is not a 64-bit integer ("sum", "min" and "max" take integers)`, k, what, j)
		}
		return n, nil
	}
	switch of {
	case regroupOfKey:
		return num("key", k)
	case regroupOfProduct:
		a, err := num("key", k)
		if err != nil {
			return 0, err
		}
		b, err := num("value", v)
		if err != nil {
			return 0, err
		}
		if a != 0 && (a*b/a != b || a == -1 && b == math.MinInt64 || b == -1 && a == math.MinInt64) {
			return 0, fmt.Errorf("regroup: record with key %.60s: key*value overflows 64 bits", k)
		}
		return a * b, nil
	default:
		return num("value", v)
	}
}

// Combiner combines two values of one group.
func (regroupKeyed) Combiner() func(dst, a, b []byte) ([]byte, error) {
	return func(dst, a, b []byte) ([]byte, error) {
		ta, x, err := regroupValue(a)
		if err != nil {
			return dst, err
		}
		tb, y, err := regroupValue(b)
		if err != nil {
			return dst, err
		}
		if ta != tb {
			return dst, fmt.Errorf("%w: regroup: values of two aggregates (%c, %c)", jobs.ErrBadRecord, ta, tb)
		}
		z, err := regroupCombine(ta, x, y)
		if err != nil {
			return dst, err
		}
		return binary.AppendVarint(append(dst, ta), z), nil
	}
}

func regroupCombine(tag byte, x, y int64) (int64, error) {
	switch tag {
	case 'm':
		return min(x, y), nil
	case 'M':
		return max(x, y), nil
	}
	z := x + y
	if (z > x) != (y > 0) {
		return 0, errors.New("regroup: the sum overflows 64 bits")
	}
	return z, nil
}

func regroupValue(v []byte) (byte, int64, error) {
	if len(v) < 2 || regroupAggName(v[0]) == "" {
		return 0, 0, fmt.Errorf("%w: regroup: a value of %d bytes", jobs.ErrBadRecord, len(v))
	}
	n, k := binary.Varint(v[1:])
	if k <= 0 || k != len(v)-1 {
		return 0, 0, fmt.Errorf("%w: regroup: a value of %d bytes", jobs.ErrBadRecord, len(v))
	}
	return v[0], n, nil
}

func regroupAggName(tag byte) string {
	for _, a := range []string{regroupCount, regroupSum, regroupMin, regroupMax} {
		if regroupAggTag(a) == tag {
			return a
		}
	}
	return ""
}

// Reduce writes a group's key and its aggregate.
func (regroupKeyed) Reduce(_ context.Context, key []byte, values iter.Seq[[]byte], emit func(key, value []byte) error) error {
	var (
		tag   byte
		total int64
	)
	for v := range values {
		t, n, err := regroupValue(v)
		if err != nil {
			return err
		}
		switch {
		case tag == 0:
			tag, total = t, n
		case t != tag:
			return fmt.Errorf("%w: regroup: values of two aggregates (%c, %c)", jobs.ErrBadRecord, tag, t)
		default:
			if total, err = regroupCombine(tag, total, n); err != nil {
				return err
			}
		}
	}
	var kb []byte
	switch {
	case len(key) == 9 && key[0] == regroupTagInt:
		kb = strconv.AppendInt(nil, int64(binary.BigEndian.Uint64(key[1:])^(1<<63)), 10)
	case len(key) > 1 && key[0] == regroupTagJSON && json.Valid(key[1:]):
		kb = key[1:]
	default:
		return fmt.Errorf("%w: regroup: a key of %d bytes", jobs.ErrBadRecord, len(key))
	}
	return emit(kb, strconv.AppendInt(nil, total, 10))
}
