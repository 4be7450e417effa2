package program

import (
	"io"
	"strconv"
	"sync"
	"sync/atomic"
)

// aheadDepth is how many blocks of a task's input may wait for its program: the worker reads
// the input (from storage) that far ahead while the program works on what it has.
const aheadDepth = 4

// frameHead is the room kept before a block for its frame's length line.
const frameHead = 24

// ahead writes a task's input to a program's stdin from a goroutine of its own, in blocks of
// size bytes, at most aheadDepth of them waiting: the feed (a read of the input from storage)
// goes on while the program computes, instead of stopping at every full pipe. Framed, each
// block is a frame of a session (<length>\n<bytes>) and end writes the end frame (0\n).
// span is a block to write: b[off:], b a whole buffer (to be used again).
type span struct {
	b   []byte
	off int
}

type ahead struct {
	w      io.Writer
	framed bool
	size   int
	cur    []byte // the block being filled: frameHead bytes of room, then its bytes
	ch     chan span
	free   chan []byte
	done   chan struct{}
	werr   atomic.Pointer[error] // the first write error of the goroutine
	err    error                 // the first error Write returned
	once   sync.Once
}

// newAhead starts writing to w; first, if not nil, is written before the blocks (a session's
// task line).
func newAhead(w io.Writer, framed bool, size int, first []byte) *ahead {
	a := &ahead{w: w, framed: framed, size: size, ch: make(chan span, aheadDepth),
		free: make(chan []byte, aheadDepth+2), done: make(chan struct{})}
	go a.run(first)
	return a
}

func (a *ahead) run(first []byte) {
	defer close(a.done)
	failed := false
	write := func(b []byte) {
		if failed {
			return
		}
		if _, err := a.w.Write(b); err != nil {
			failed = true
			a.werr.Store(&err)
		}
	}
	if first != nil {
		write(first)
	}
	for s := range a.ch {
		write(s.b[s.off:])
		if cap(s.b) == frameHead+a.size {
			select {
			case a.free <- s.b:
			default:
			}
		}
	}
}

// failed returns the goroutine's write error, if any.
func (a *ahead) failed() error {
	if p := a.werr.Load(); p != nil {
		return *p
	}
	return nil
}

func (a *ahead) Write(p []byte) (int, error) {
	if a.err != nil {
		return 0, a.err
	}
	n := len(p)
	for len(p) > 0 {
		if a.cur == nil {
			select {
			case b := <-a.free:
				a.cur = b[:frameHead]
			default:
				a.cur = make([]byte, frameHead, frameHead+a.size)
			}
		}
		k := min(len(p), a.size-(len(a.cur)-frameHead))
		a.cur = append(a.cur, p[:k]...)
		p = p[k:]
		if len(a.cur)-frameHead >= a.size {
			if err := a.send(); err != nil {
				return 0, err
			}
		}
	}
	return n, nil
}

// send hands the current block to the goroutine, with its frame's length line when framed.
func (a *ahead) send() error {
	if err := a.failed(); err != nil {
		a.err = err
		return err
	}
	b := a.cur
	a.cur = nil
	if len(b) == frameHead {
		select {
		case a.free <- b:
		default:
		}
		return nil
	}
	off := frameHead
	if a.framed {
		var num [frameHead]byte
		h := strconv.AppendInt(num[:0], int64(len(b)-frameHead), 10)
		h = append(h, '\n')
		off = frameHead - len(h)
		copy(b[off:], h)
	}
	a.ch <- span{b, off}
	return nil
}

// end sends the last block (and, framed, the end frame), waits until all is written and returns
// the first write error.
func (a *ahead) end() error {
	if a.err == nil && a.cur != nil {
		_ = a.send()
	}
	if a.err == nil && a.framed {
		a.ch <- span{b: []byte("0\n")}
	}
	a.close()
	if a.err != nil {
		return a.err
	}
	return a.failed()
}

// close stops the goroutine once what it holds is written (or fails): after a kill of the
// program, it returns at once.
func (a *ahead) close() {
	a.once.Do(func() { close(a.ch) })
	<-a.done
}
