package program

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"sync"

	"github.com/mapagg/mapagg/internal/protocol"
	"github.com/mapagg/mapagg/jobs"
)

// maxLineBytes bounds one line of a program's output: the largest key and value, escaped.
const maxLineBytes = 2*(jobs.MaxKeyBytes+jobs.MaxValueBytes) + 2

// blockBytes is the size of the blocks of lines passed between a task and its pipes.
const blockBytes = 64 << 10

// paramsCache remembers the parameters of recent jobs, read once from their specs.
type paramsCache struct {
	mu   sync.Mutex
	byID map[string]json.RawMessage
	env  jobs.Env
}

// SetEnv gives the program the storage it reads job specs from in reduce tasks (the worker's).
func (p *Program) SetEnv(env jobs.Env) {
	p.pc.mu.Lock()
	p.pc.env = env
	p.pc.mu.Unlock()
}

// jobParams returns the parameters of job id, for MAPAGG_PARAMS; env nil means SetEnv's.
func (p *Program) jobParams(ctx context.Context, env jobs.Env, id string) (json.RawMessage, error) {
	c := &p.pc
	c.mu.Lock()
	raw, ok := c.byID[id]
	if env == nil {
		env = c.env
	}
	c.mu.Unlock()
	if ok || id == "" {
		return raw, nil
	}
	je, ok := env.(jobs.JobsEnv)
	if !ok {
		return nil, fmt.Errorf("program %s: this worker's storage cannot read job %s's spec for MAPAGG_PARAMS", p.spec.Name, id)
	}
	rc, err := je.ReadRange(ctx, je.JobsContainer(), protocol.SpecBlob(id), 0, jobs.MaxSpecBytes+1)
	if err != nil {
		return nil, fmt.Errorf("program %s: read job %s's parameters: %w", p.spec.Name, id, err)
	}
	data, err := io.ReadAll(rc)
	_ = rc.Close()
	if err != nil {
		return nil, fmt.Errorf("program %s: read job %s's parameters: %w", p.spec.Name, id, err)
	}
	spec, err := protocol.ParseSpec(data)
	if err != nil {
		return nil, fmt.Errorf("program %s: job %s: %w", p.spec.Name, id, err)
	}
	raw = spec.Params
	if len(bytes.TrimSpace(raw)) == 0 {
		raw = json.RawMessage("{}")
	}
	c.mu.Lock()
	if c.byID == nil || len(c.byID) > 256 {
		c.byID = map[string]json.RawMessage{}
	}
	c.byID[id] = raw
	c.mu.Unlock()
	return raw, nil
}

// lineReader reads a program's stdout line by line, bounding lines and the total.
type lineReader struct {
	br    *bufio.Reader
	buf   []byte
	n     int64 // lines read
	total int64 // bytes read
	max   int64
	seq   []byte // a session's task: its output ends with the line "mapagg:end <seq>"
	ended bool   // that line was read
}

// startTask sets the reader for the output of a session's task seq.
func (lr *lineReader) startTask(seq int) {
	lr.seq = strconv.AppendInt(lr.seq[:0], int64(seq), 10)
	lr.n, lr.total, lr.ended = 0, 0, false
}

func newLineReader(r io.Reader, max int64) *lineReader {
	return &lineReader{br: bufio.NewReaderSize(r, blockBytes), max: max}
}

// errOutputLimit: a program wrote more than Config.MaxOutputBytes.
var errOutputLimit = errors.New("wrote more than its output limit")

// next returns the next line without its '\n'; io.EOF at the end.
func (lr *lineReader) next() ([]byte, error) {
	lr.buf = lr.buf[:0]
	for {
		chunk, err := lr.br.ReadSlice('\n')
		lr.total += int64(len(chunk))
		if lr.total > lr.max {
			return nil, fmt.Errorf("%w of %d bytes", errOutputLimit, lr.max)
		}
		if len(lr.buf)+len(chunk) > maxLineBytes+1 {
			return nil, fmt.Errorf("line %d of its output is longer than %d bytes", lr.n+1, maxLineBytes)
		}
		lr.buf = append(lr.buf, chunk...)
		if err == bufio.ErrBufferFull {
			continue
		}
		if len(lr.buf) == 0 && err != nil {
			return nil, err
		}
		if err != nil && err != io.EOF {
			return nil, err
		}
		line := bytes.TrimSuffix(lr.buf, []byte("\n"))
		if lr.seq != nil && isEnd(line, lr.seq) {
			lr.ended = true
			return nil, io.EOF
		}
		lr.n++
		return line, nil
	}
}

// parser decodes output lines into records and checks their sizes.
type parser struct {
	buf []byte
	n   int64
}

func (ps *parser) parse(line []byte) (key, value []byte, err error) {
	ps.n++
	ps.buf, key, value, err = SplitLine(ps.buf, line)
	switch {
	case err != nil:
		return nil, nil, malformed(ps.n, line, err)
	case len(key) > jobs.MaxKeyBytes:
		return nil, nil, malformed(ps.n, line, fmt.Errorf("a key of %d bytes, the limit is %d", len(key), jobs.MaxKeyBytes))
	case len(value) > jobs.MaxValueBytes:
		return nil, nil, malformed(ps.n, line, fmt.Errorf("a value of %d bytes, the limit is %d", len(value), jobs.MaxValueBytes))
	}
	return key, value, nil
}

// writeErr marks an error writing a program's stdin: it stopped reading, which is its right
// when it exits 0.
type writeErr struct{ err error }

func (e writeErr) Error() string { return "write its input: " + e.err.Error() }

// pipe runs a task of the program: feed writes its input (in a goroutine of its own), out takes
// each record of its output. It returns once the task's output has ended and, for a process of
// its own, the process has exited.
func (p *Program) pipe(ctx context.Context, t taskSpec,
	feed func(ctx context.Context, w io.Writer) error, out func(key, value []byte) error) error {
	c, err := p.open(ctx, t)
	if err != nil {
		return err
	}
	fed := make(chan error, 1)
	go func() {
		err := feed(c.ctx, c.in)
		if werr := c.a.failed(); werr != nil {
			err = writeErr{werr}
		}
		if err == nil {
			if err = c.endIn(); err != nil {
				err = writeErr{err}
			}
		} else {
			if c.sp != nil {
				c.kill() // the task's input is not whole: the program must not take it for whole
			}
			c.abortIn()
		}
		fed <- err
	}()
	var ps parser
	var cause error
	for {
		line, err := c.lr.next()
		if err == io.EOF {
			break
		}
		if err == nil {
			var k, v []byte
			if k, v, err = ps.parse(line); err == nil {
				err = out(k, v)
			}
		}
		if err != nil {
			cause = err
			break
		}
	}
	if cause != nil {
		c.kill()
		_, _ = io.Copy(io.Discard, c.pr.stdout)
	}
	ferr, early := c.waitFed(fed)
	return c.finish(cause, ferr, early)
}

// Map runs the program's map role over the shard's lines; with a combine role, its output is
// sorted and combined in batches of Config.CombineBytes before it is emitted.
func (p *Program) Map(ctx context.Context, env jobs.Env, task jobs.Task, emit func(key, value []byte) error) error {
	var r jobs.BlobRange
	if err := json.Unmarshal(task.Shard, &r); err != nil {
		return fmt.Errorf("%w: %s shard %d: %v", jobs.ErrPermanent, p.spec.Name, task.Index, err)
	}
	if err := r.Validate(); err != nil {
		return fmt.Errorf("%w: %s shard %d: %v", jobs.ErrPermanent, p.spec.Name, task.Index, err)
	}
	params, err := p.jobParams(ctx, env, task.JobID)
	if err != nil {
		return err
	}
	t := taskSpec{role: "map", what: fmt.Sprintf("map of shard %d", task.Index), job: task.JobID, params: params,
		index: task.Index, indexVar: "MAPAGG_SHARD", attempt: task.Attempt, env: env}
	out := emit
	var c *combiner
	if p.caps.Combine {
		ct := t
		ct.role, ct.what = "combine", fmt.Sprintf("combine of shard %d", task.Index)
		c = &combiner{p: p, ctx: ctx, t: ct, emit: emit}
		out = c.add
	}
	feed := func(ctx context.Context, w io.Writer) error {
		return jobs.Lines(ctx, env, r, func(line []byte) error {
			if _, err := w.Write(line); err != nil {
				return err
			}
			_, err := w.Write(newline)
			return err
		})
	}
	if err := p.pipe(ctx, t, feed, out); err != nil {
		return err
	}
	if c != nil {
		return c.flush()
	}
	return nil
}

var newline = []byte{'\n'}
