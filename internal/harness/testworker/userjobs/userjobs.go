// Package userjobs holds jobs as a user writes them against the public jobs API, for the load
// test and the tests of long reads. The test worker binary (internal/harness/testworker)
// registers them beside the built-ins.
//
//   - csvsum (keyed): the amount per user over CSV blobs of "user,amount" lines, as a newcomer
//     writes it (the sales example's code): jobs.Lines, bytes.Cut, strconv.ParseInt, Combine.
//   - slow-lines: reads its ranges' lines with a pause after each ({"line_delay": "2ms"}), and
//     answers how many lines and bytes it read and an FNV-1a sum of them: a Map that spends
//     minutes consuming one range.
package userjobs

import (
	"bytes"
	"context"
	"fmt"
	"hash/fnv"
	"iter"
	"strconv"
	"time"

	"github.com/mapagg/mapagg/jobs"
)

// CSVSum is the keyed job csvsum: its parameters a jobs.BlobInput, its keys users and its
// values amounts.
type CSVSum struct{}

func (CSVSum) Split(ctx context.Context, env jobs.Env, in jobs.BlobInput) ([]jobs.BlobRange, error) {
	return in.Split(ctx, env)
}

// Map emits (user, amount) for each line; the header line ("user,...") and blank lines are
// skipped, and a line that is not user,amount fails the task with the blob and offset.
func (CSVSum) Map(ctx context.Context, env jobs.Env, r jobs.BlobRange, emit jobs.Emitter[string, int64]) error {
	return jobs.Lines(ctx, env, r, func(line []byte) error {
		user, amount, _ := bytes.Cut(line, []byte(","))
		if len(line) == 0 || string(user) == "user" {
			return nil
		}
		n, err := strconv.ParseInt(string(bytes.TrimSpace(amount)), 10, 64)
		emit(string(user), n)
		return err
	})
}

// Combine adds amounts on the map side.
func (CSVSum) Combine(a, b int64) int64 { return a + b }

func (CSVSum) Reduce(_ context.Context, _ string, amounts iter.Seq[int64], emit func(int64)) error {
	var total int64
	for a := range amounts {
		total += a
	}
	emit(total)
	return nil
}

// SlowParams are slow-lines' parameters: the input and the pause after each line.
type SlowParams struct {
	jobs.BlobInput
	// LineDelay is the pause after each line, a Go duration. Required; at most 1s.
	LineDelay string `json:"line_delay"`
}

// Validate implements jobs.Validator.
func (p *SlowParams) Validate() error {
	if err := p.BlobInput.Validate(); err != nil {
		return err
	}
	if d, err := time.ParseDuration(p.LineDelay); err != nil || d <= 0 || d > time.Second {
		return jobs.BadParam("line_delay", `"line_delay" must be a Go duration from 1ns to 1s, e.g. "2ms" (got %q)`, p.LineDelay)
	}
	return nil
}

// SlowShard is one range and the pause after each of its lines.
type SlowShard struct {
	jobs.BlobRange
	Delay time.Duration `json:"d"`
}

// Tally is slow-lines' partial and result.
type Tally struct {
	Lines int64  `json:"lines"`
	Bytes int64  `json:"bytes"` // of the lines, without their '\n'
	Sum   uint64 `json:"sum"`   // the sum of each line's FNV-1a hash
}

// SlowLines is the job slow-lines.
type SlowLines struct{}

func (SlowLines) Split(ctx context.Context, env jobs.Env, p SlowParams) ([]SlowShard, error) {
	rs, err := p.BlobInput.Split(ctx, env)
	if err != nil {
		return nil, err
	}
	d, _ := time.ParseDuration(p.LineDelay)
	out := make([]SlowShard, len(rs))
	for i, r := range rs {
		out[i] = SlowShard{BlobRange: r, Delay: d}
	}
	return out, nil
}

// Map reads the range's lines, pausing after each.
func (SlowLines) Map(ctx context.Context, env jobs.Env, s SlowShard) (Tally, error) {
	var t Tally
	err := jobs.Lines(ctx, env, s.BlobRange, func(line []byte) error {
		t.Add(line)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(s.Delay):
		}
		return nil
	})
	return t, err
}

func (SlowLines) Merge(a, b Tally) Tally {
	return Tally{Lines: a.Lines + b.Lines, Bytes: a.Bytes + b.Bytes, Sum: a.Sum + b.Sum}
}

// Add counts one line.
func (t *Tally) Add(line []byte) {
	h := fnv.New64a()
	h.Write(line)
	t.Lines++
	t.Bytes += int64(len(line))
	t.Sum += h.Sum64()
}

// TallyOf is the Tally of data's lines (split at '\n'; a last line without one counts).
func TallyOf(data []byte) Tally {
	var t Tally
	for len(data) > 0 {
		line, rest, _ := bytes.Cut(data, []byte("\n"))
		t.Add(line)
		data = rest
	}
	return t
}

// Register adds csvsum and slow-lines to r.
func Register(r *jobs.Registry) error {
	if err := r.RegisterKeyed(jobs.Keyed("csvsum", jobs.TypedKeyedJob[jobs.BlobInput, jobs.BlobRange, string, int64, int64](CSVSum{}))); err != nil {
		return fmt.Errorf("register csvsum: %w", err)
	}
	return r.Register(jobs.Typed("slow-lines", jobs.TypedJob[SlowParams, SlowShard, Tally](SlowLines{})))
}
