package shuffle

import (
	"context"
	"fmt"
	"io"
	"sync"
)

// A reduce task of several partitions (a group: partitions first to first+n-1) reads each map
// run once: the group's runs are back to back in a map blob (ConcatSink), so one ranged read
// of Offsets[first] to Offsets[first+n] holds them all. The task reduces the group's
// partitions one after another, each with Reduce over a segment of every stream: run reads go
// from maps × partitions to maps × tasks.
//
// Reduce reads a segment to its end block (RunReader checks that nothing follows), so when the
// Reduce of one partition returns without error every stream is at the next partition's run.

// GroupStream is one map run's bytes for a group of partitions: Lengths[i] bytes of the group's
// i-th partition, back to back, from the stream open gives.
type GroupStream struct {
	Open    Opener
	Lengths []int64
}

// GroupRuns reads the runs of a group's partitions from streams, one stream a map run, opened
// once each (lazily, with ctx) and read in order. Runs(i) are the Openers of the group's i-th
// partition, to give Reduce; the partitions must be reduced in order, each after the one before
// it returned. Close closes the streams.
type GroupRuns struct {
	ctx     context.Context
	streams []*groupStream
	n       int
}

// NewGroupRuns returns the group's runs in streams; every stream has the same number of
// lengths.
func NewGroupRuns(ctx context.Context, streams []GroupStream) (*GroupRuns, error) {
	g := &GroupRuns{ctx: ctx, streams: make([]*groupStream, len(streams))}
	for i, s := range streams {
		if i == 0 {
			g.n = len(s.Lengths)
		} else if len(s.Lengths) != g.n {
			return nil, fmt.Errorf("group stream %d has %d runs, stream 0 has %d", i, len(s.Lengths), g.n)
		}
		for j, l := range s.Lengths {
			if l <= 0 {
				return nil, fmt.Errorf("group stream %d: run %d has %d bytes", i, j, l)
			}
		}
		g.streams[i] = &groupStream{open: s.Open, lengths: s.Lengths}
	}
	return g, nil
}

// Partitions is the number of runs in each stream.
func (g *GroupRuns) Partitions() int { return g.n }

// Runs returns the Openers of the i-th partition's run in every stream.
func (g *GroupRuns) Runs(i int) []Opener {
	out := make([]Opener, len(g.streams))
	for j, s := range g.streams {
		out[j] = func(context.Context) (io.ReadCloser, error) { return s.segment(g.ctx, i) }
	}
	return out
}

// Close closes every stream opened.
func (g *GroupRuns) Close() error {
	for _, s := range g.streams {
		s.close()
	}
	return nil
}

// groupStream is one stream of a group, opened at its first segment.
type groupStream struct {
	mu      sync.Mutex
	open    Opener
	lengths []int64
	rc      io.ReadCloser
	next    int   // the segment that starts at the stream's position (after skip)
	skip    int64 // bytes of the segment before next left unread
	closed  bool
}

// segment returns a reader of run i. Segments are taken in order; what is left of the one
// before is skipped (a Reduce that failed reads no further, but then its task fails anyway).
func (s *groupStream) segment(ctx context.Context, i int) (io.ReadCloser, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, fmt.Errorf("group stream closed")
	}
	if i != s.next {
		return nil, fmt.Errorf("run %d of a group opened when run %d is next", i, s.next)
	}
	if s.rc == nil {
		rc, err := s.open(ctx)
		if err != nil {
			return nil, err
		}
		s.rc = rc
	}
	if s.skip > 0 {
		if _, err := io.CopyN(io.Discard, s.rc, s.skip); err != nil {
			return nil, fmt.Errorf("skip the rest of run %d: %w", i-1, err)
		}
		s.skip = 0
	}
	s.next++
	return &segmentReader{s: s, left: s.lengths[i]}, nil
}

func (s *groupStream) close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	if s.rc != nil {
		_ = s.rc.Close()
		s.rc = nil
	}
}

// segmentReader reads one run of a group stream: its length, then io.EOF.
type segmentReader struct {
	s      *groupStream
	left   int64
	closed bool
}

func (r *segmentReader) Read(p []byte) (int, error) {
	if r.left <= 0 {
		return 0, io.EOF
	}
	r.s.mu.Lock()
	defer r.s.mu.Unlock()
	if r.closed || r.s.rc == nil {
		return 0, fmt.Errorf("group stream closed")
	}
	if int64(len(p)) > r.left {
		p = p[:r.left]
	}
	n, err := r.s.rc.Read(p)
	r.left -= int64(n)
	if err == io.EOF && r.left > 0 {
		err = io.ErrUnexpectedEOF // the stream ended within the run
	}
	if r.left == 0 && err == io.EOF {
		err = nil
	}
	return n, err
}

// Close leaves the stream open for the next run; what is left of this one is skipped then.
func (r *segmentReader) Close() error {
	r.s.mu.Lock()
	defer r.s.mu.Unlock()
	if !r.closed {
		r.closed = true
		r.s.skip += r.left
		r.left = 0
	}
	return nil
}
