package shuffle

import (
	"context"
	"errors"
	"io"
)

// A reduce reads its runs over the network while it merges. Read in the merge's goroutine, each
// run's next block waited a round trip whenever the merge reached its end, and the workers sat
// idle on blob reads most of the reduce phase. A prefetcher opens its run and reads ahead in a
// goroutine of its own, prefetchChunks chunks of prefetchChunkBytes, so that opening the runs
// (one request each) and reading them overlap one another and the merge.
const (
	prefetchChunkBytes = 32 << 10
	prefetchChunks     = 2
	// prefetchBytes is a prefetcher's memory: its chunks and the one being read.
	prefetchBytes = (prefetchChunks + 1) * prefetchChunkBytes
)

type chunk struct {
	data []byte
	err  error
}

// prefetcher is an io.ReadCloser over a run that open gives, read ahead in a goroutine.
type prefetcher struct {
	filled chan chunk
	free   chan []byte
	stop   chan struct{}
	done   chan struct{}
	cur    []byte
	buf    []byte // cur's buffer, given back when read
	err    error
}

// prefetch starts reading what open opens. The prefetcher must be closed.
func prefetch(ctx context.Context, open Opener) *prefetcher {
	p := &prefetcher{
		filled: make(chan chunk, prefetchChunks),
		free:   make(chan []byte, prefetchChunks+1),
		stop:   make(chan struct{}),
		done:   make(chan struct{}),
	}
	for range prefetchChunks + 1 {
		p.free <- nil // allocated when first used: a short run needs one chunk
	}
	go p.run(ctx, open)
	return p
}

func (p *prefetcher) run(ctx context.Context, open Opener) {
	defer close(p.done)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() { // a Close stops a read in flight
		select {
		case <-p.stop:
			cancel()
		case <-ctx.Done():
		}
	}()
	rc, err := open(ctx)
	if err != nil {
		p.send(chunk{err: err})
		return
	}
	defer rc.Close()
	for {
		var buf []byte
		select {
		case buf = <-p.free:
		case <-p.stop:
			return
		}
		if buf == nil {
			buf = make([]byte, prefetchChunkBytes)
		}
		n, err := io.ReadFull(rc, buf[:cap(buf)])
		if errors.Is(err, io.ErrUnexpectedEOF) {
			err = io.EOF
		}
		if !p.send(chunk{data: buf[:n], err: err}) || err != nil {
			return
		}
	}
}

func (p *prefetcher) send(c chunk) bool {
	select {
	case p.filled <- c:
		return true
	case <-p.stop:
		return false
	}
}

// Read returns the next bytes read ahead, then the error that ended the run's stream (io.EOF
// at its end).
func (p *prefetcher) Read(b []byte) (int, error) {
	for len(p.cur) == 0 {
		if p.err != nil {
			return 0, p.err
		}
		if p.buf != nil {
			p.free <- p.buf[:0]
			p.buf = nil
		}
		c := <-p.filled
		p.cur, p.err = c.data, c.err
		if c.data != nil {
			p.buf = c.data
		}
	}
	n := copy(b, p.cur)
	p.cur = p.cur[n:]
	return n, nil
}

// Close stops the reading and closes the run.
func (p *prefetcher) Close() error {
	select {
	case <-p.stop:
	default:
		close(p.stop)
	}
	<-p.done
	return nil
}
