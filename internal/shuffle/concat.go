package shuffle

import (
	"context"
	"fmt"
	"io"

	"github.com/mapagg/mapagg/jobs"
)

// ConcatSink writes every partition's run into one object, back to back: one blob per map
// attempt instead of one per partition. After Finish, Offsets[p] to Offsets[p+1] is partition
// p's run; reduce tasks read their range (EnvRuns).
type ConcatSink struct {
	w       io.Writer
	n       int64
	Offsets []int64
}

// NewConcatSink returns a ConcatSink on w (a PutWriter, say).
func NewConcatSink(w io.Writer) *ConcatSink { return &ConcatSink{w: w} }

// Sink is the Sink to give Map or Finish.
func (c *ConcatSink) Sink() Sink {
	return func(p int) (io.WriteCloser, error) {
		if len(c.Offsets) == 0 && p == 0 {
			c.Offsets = append(c.Offsets, c.n)
		} else if p == 0 || p != len(c.Offsets)-1 {
			return nil, fmt.Errorf("concat sink: partition %d opened out of order", p)
		}
		return &concatRun{c: c}, nil
	}
}

// concatRun is one partition's run within a ConcatSink.
type concatRun struct{ c *ConcatSink }

func (r *concatRun) Write(p []byte) (int, error) {
	n, err := r.c.w.Write(p)
	r.c.n += int64(n)
	return n, err
}

// Close ends the run and records where the next one starts.
func (r *concatRun) Close() error {
	r.c.Offsets = append(r.c.Offsets, r.c.n)
	return nil
}

// CloseWithError aborts the whole object, if the underlying writer can be aborted.
func (r *concatRun) CloseWithError(err error) error {
	if a, ok := r.c.w.(interface{ CloseWithError(error) error }); ok {
		return a.CloseWithError(err)
	}
	return nil
}

// Segment is one run inside a blob: Length bytes from Offset.
type Segment struct {
	Blob           string
	Offset, Length int64
}

// EnvRuns returns Openers of segments of blobs in container, read with env.ReadRange (ranged
// blob reads, streamed).
func EnvRuns(env jobs.Env, container string, segs []Segment) []Opener {
	out := make([]Opener, len(segs))
	for i, s := range segs {
		out[i] = func(ctx context.Context) (io.ReadCloser, error) {
			return env.ReadRange(ctx, container, s.Blob, s.Offset, s.Length)
		}
	}
	return out
}
