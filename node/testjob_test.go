package node

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"strconv"

	"github.com/mapagg/mapagg/jobs"
)

// squares is a job type the stock binary does not have: the sum of i² for i in 1..n, in shards of
// consecutive ranges. Its bad parameters are refused with a *jobs.ParamError.
type squares struct{}

type squaresParams struct {
	N      uint64 `json:"n"`
	Shards int    `json:"shards"`
}

func (squares) Type() string { return "squares" }

func parseSquares(raw json.RawMessage) (squaresParams, error) {
	var p squaresParams
	if err := json.Unmarshal(raw, &p); err != nil {
		return p, &jobs.ParamError{Job: "squares", Reason: "parameters are not an object: " + err.Error()}
	}
	if p.N < 1 || p.N > 1_000_000 {
		return p, &jobs.ParamError{Job: "squares", Field: "n", Reason: fmt.Sprintf(`"n" must be 1 to 1000000 (got %d)`, p.N)}
	}
	if p.Shards < 1 || uint64(p.Shards) > p.N {
		return p, &jobs.ParamError{Job: "squares", Field: "shards", Reason: fmt.Sprintf(`"shards" must be 1 to n (got %d)`, p.Shards)}
	}
	return p, nil
}

func (squares) Validate(raw json.RawMessage) error { _, err := parseSquares(raw); return err }

func (squares) Split(_ context.Context, _ jobs.Env, raw json.RawMessage) ([][]byte, error) {
	p, err := parseSquares(raw)
	if err != nil {
		return nil, err
	}
	var out [][]byte
	step := p.N / uint64(p.Shards)
	for i, lo := 0, uint64(1); i < p.Shards; i++ {
		hi := lo + step
		if i == p.Shards-1 {
			hi = p.N + 1
		}
		out = append(out, binary.AppendUvarint(binary.AppendUvarint(nil, lo), hi))
		lo = hi
	}
	return out, nil
}

func (squares) Map(_ context.Context, _ jobs.Env, t jobs.Task) ([]byte, error) {
	lo, n := binary.Uvarint(t.Shard)
	if n <= 0 {
		return nil, fmt.Errorf("%w: squares", jobs.ErrBadShard)
	}
	hi, m := binary.Uvarint(t.Shard[n:])
	if m <= 0 {
		return nil, fmt.Errorf("%w: squares", jobs.ErrBadShard)
	}
	var sum uint64
	for i := lo; i < hi; i++ {
		sum += i * i
	}
	return binary.AppendUvarint(nil, sum), nil
}

func (squares) NewAggregate(json.RawMessage) (jobs.Aggregate, error) { return &squaresSum{}, nil }

type squaresSum struct{ sum uint64 }

func (a *squaresSum) Merge(p []byte) error {
	v, n := binary.Uvarint(p)
	if n <= 0 {
		return fmt.Errorf("%w: squares", jobs.ErrBadPartial)
	}
	a.sum += v
	return nil
}
func (a *squaresSum) MarshalBinary() ([]byte, error) { return binary.AppendUvarint(nil, a.sum), nil }
func (a *squaresSum) UnmarshalBinary(d []byte) error {
	v, n := binary.Uvarint(d)
	if n <= 0 {
		return fmt.Errorf("%w: squares", jobs.ErrBadCheckpoint)
	}
	a.sum = v
	return nil
}
func (a *squaresSum) Result() (json.RawMessage, error) {
	return json.RawMessage(`{"sum":` + strconv.FormatUint(a.sum, 10) + `}`), nil
}
