package program

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"iter"

	"github.com/mapagg/mapagg/jobs"
)

// ReducePartition starts the program's reduce role for one partition: one process for all its
// keys, fed through a buffered pipe while its output is read.
func (p *Program) ReducePartition(ctx context.Context, task jobs.ReduceTask) (jobs.ReduceSession, error) {
	params, err := p.jobParams(ctx, nil, task.JobID)
	if err != nil {
		return nil, err
	}
	t := taskSpec{role: "reduce", what: fmt.Sprintf("reduce of partition %d", task.Partition), job: task.JobID,
		params: params, index: task.Partition, indexVar: "MAPAGG_PARTITION"}
	c, err := p.open(ctx, t)
	if err != nil {
		return nil, err
	}
	s := &session{c: c, pr: c.pr, in: make(chan []byte, 2), out: make(chan []byte, 2), fed: make(chan error, 1), read: make(chan error, 1)}
	go s.write()
	go s.readOutput()
	return s, nil
}

// session is a running reduce: blocks of input lines go to write, blocks of output lines come
// from readOutput; the task's goroutine moves both, so neither pipe can block the other.
type session struct {
	c      *conn
	pr     *proc
	cur    []byte      // input lines not yet handed to write
	in     chan []byte // to write; closed at the end
	out    chan []byte // from readOutput; closed at its end
	fed    chan error  // write's result
	read   chan error  // readOutput's result
	ps     parser
	kb, vb []byte // output key and value as JSON
	failed error
}

func (s *session) write() {
	var err error
	for b := range s.in {
		if err == nil {
			_, err = s.c.in.Write(b)
		}
	}
	if err == nil {
		err = s.c.endIn()
	} else {
		if s.c.sp != nil {
			s.c.kill() // its input is not whole
		}
		s.c.abortIn()
	}
	if err != nil {
		err = writeErr{err}
	}
	s.fed <- err
}

func (s *session) readOutput() {
	lr := s.c.lr
	var block []byte
	var err error
	for {
		var line []byte
		if line, err = lr.next(); err != nil {
			break
		}
		block = append(append(block, line...), '\n')
		if len(block) >= blockBytes {
			s.out <- block
			block = nil
		}
	}
	if len(block) > 0 {
		s.out <- block
	}
	if err == io.EOF {
		err = nil
	} else {
		killGroup(s.pr.cmd)
		_, _ = io.Copy(io.Discard, s.pr.stdout)
	}
	s.read <- err
	close(s.out)
}

// Reduce writes the key's values to the program and emits the output it has written so far.
func (s *session) Reduce(ctx context.Context, key []byte, values iter.Seq[[]byte], emit func(key, value []byte) error) error {
	if s.failed != nil {
		return s.failed
	}
	for v := range values {
		s.cur = AppendEscaped(s.cur, key)
		s.cur = append(s.cur, '\t')
		s.cur = AppendEscaped(s.cur, v)
		s.cur = append(s.cur, '\n')
		if len(s.cur) >= blockBytes {
			if err := s.send(ctx, emit); err != nil {
				return err
			}
		}
	}
	for s.out != nil {
		select {
		case b, ok := <-s.out:
			if err := s.handle(b, ok, emit); err != nil {
				return err
			}
		default:
			return nil
		}
	}
	return s.failed
}

// send hands the pending input to write, emitting output while it waits.
func (s *session) send(ctx context.Context, emit func(key, value []byte) error) error {
	for {
		select {
		case s.in <- s.cur:
			s.cur = make([]byte, 0, blockBytes+blockBytes/4)
			return nil
		case b, ok := <-s.out:
			if err := s.handle(b, ok, emit); err != nil {
				return err
			}
		case <-ctx.Done():
			return s.fail(context.Cause(ctx))
		}
	}
}

// handle emits the records of one output block; ok false is the end of the output.
func (s *session) handle(b []byte, ok bool, emit func(key, value []byte) error) error {
	if !ok {
		s.out = nil
		return nil
	}
	if s.failed != nil {
		return s.failed
	}
	for len(b) > 0 {
		i := 0
		for i < len(b) && b[i] != '\n' {
			i++
		}
		line := b[:i]
		b = b[min(i+1, len(b)):]
		k, v, err := s.ps.parse(line)
		if err == nil {
			s.kb = jobs.AppendJSONString(s.kb[:0], string(k))
			s.vb = appendValueJSON(s.vb[:0], v)
			err = emit(s.kb, s.vb)
		}
		if err != nil {
			return s.fail(err)
		}
	}
	return nil
}

// fail kills the program; Close reports err with its exit status and stderr.
func (s *session) fail(err error) error {
	if s.failed == nil {
		killGroup(s.pr.cmd)
		s.failed = err
	}
	return s.failed
}

// Close ends the input, emits the rest of the output and waits for the program.
func (s *session) Close(ctx context.Context, emit func(key, value []byte) error) error {
	if emit == nil {
		s.fail(context.Canceled)
	} else if len(s.cur) > 0 && s.failed == nil {
		_ = s.send(ctx, emit)
	}
	close(s.in)
	for s.out != nil {
		b, ok := <-s.out
		if emit == nil || s.failed != nil {
			if !ok {
				s.out = nil
			}
			continue
		}
		_ = s.handle(b, ok, emit)
	}
	rerr := <-s.read
	ferr, early := s.c.waitFed(s.fed)
	cause := s.failed
	if cause == nil && rerr != nil {
		cause = rerr
	}
	if s.c.sp == nil {
		ferr = nil // a process of its own may exit 0 without reading all its input: its choice
	}
	err := s.c.finish(cause, ferr, early)
	if emit == nil {
		return nil
	}
	return err
}

// appendValueJSON appends an output value as JSON: as it is if it is a JSON text (a number,
// an object, a quoted string...), else as a JSON string.
func appendValueJSON(dst, v []byte) []byte {
	if len(v) > 0 && v[0] > ' ' && v[len(v)-1] > ' ' && json.Valid(v) {
		return append(dst, v...)
	}
	return jobs.AppendJSONString(dst, string(v))
}
