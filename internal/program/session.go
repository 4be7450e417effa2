package program

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"time"

	"github.com/mapagg/mapagg/internal/protocol"
	"github.com/mapagg/mapagg/jobs"
)

// Sessions. A program that declares {"session": true} is started once for a job on a worker,
// with MAPAGG_ROLE=session, and handed the job's tasks one after another on the same pipes:
//
//	worker → program:  mapagg:task {"seq":1,"role":"map","shard":3,"attempt":1}\n
//	                   <n>\n<n bytes of input>   ... as many frames as it takes
//	                   0\n                        the end of the task's input
//	program → worker:  key<TAB>value\n ...       the task's output, as without sessions
//	                   mapagg:end 1\n             the end of the task's output (its seq)
//
// The end line has no TAB, so no record can be taken for it. The worker closes the program's
// stdin to end the session: when the job has ended, or after Config.IdleTimeout without a task.
// A process serves one job, never two, and one task at a time; a failure of a task (an exit, a
// malformed line, the time limit, a cancel) kills the process, and the job's next task gets a
// new one.

const (
	sessionRole = "session"
	taskPrefix  = "mapagg:task "
	endPrefix   = "mapagg:end "
	// frameBytes is the most input a frame carries.
	frameBytes = 1 << 20
	// fedGrace is how long a session's input may take to be written after its end line was read:
	// a program that ends a task's output before reading all of its input breaks the framing.
	fedGrace = 10 * time.Second
	// endGrace is how long a session process has to exit after its stdin is closed.
	endGrace = 5 * time.Second
)

// taskHeader is the JSON of a task line.
type taskHeader struct {
	Seq       int    `json:"seq"`
	Role      string `json:"role"`
	Shard     *int   `json:"shard,omitempty"`
	Partition *int   `json:"partition,omitempty"`
	Attempt   int    `json:"attempt,omitempty"`
}

// taskSpec is one run of a program: a task of a job in one role.
type taskSpec struct {
	role, what string
	job        string
	params     json.RawMessage
	index      int
	indexVar   string // MAPAGG_SHARD or MAPAGG_PARTITION
	attempt    int    // 0 for none
	env        jobs.Env
}

// vars are the contract's variables of a run in a process of its own.
func (t taskSpec) vars() map[string]string {
	v := contractVars(t.params, t.job, itoa(t.index), t.indexVar)
	if t.attempt > 0 {
		v["MAPAGG_ATTEMPT"] = itoa(t.attempt)
	}
	return v
}

func (t taskSpec) header(seq int) taskHeader {
	h := taskHeader{Seq: seq, Role: t.role, Attempt: t.attempt}
	i := t.index
	if t.indexVar == "MAPAGG_PARTITION" {
		h.Partition = &i
	} else {
		h.Shard = &i
	}
	return h
}

// sproc is a session process: one program process serving the tasks of one job, one at a time.
type sproc struct {
	pr   *proc
	job  string
	lr   *lineReader // its stdout
	seq  int         // tasks begun
	idle time.Time   // when it was last handed back
	env  jobs.Env    // where its job's end is seen
}

// conn is one task's exchange with a program: a process of its own, or a turn of a session.
type conn struct {
	p     *Program
	pr    *proc
	in    io.Writer    // the task's input (framed in a session)
	endIn func() error // ends the task's input
	lr    *lineReader  // its output; io.EOF at the end of the task's output
	ctx   context.Context

	sp    *sproc      // nil: a process of its own
	a     *ahead      // writes in
	stop  func() bool // of the task's context.AfterFunc
	timer *time.Timer // the task's time limit
}

// open starts a run: in a session process of the job when the program has sessions, else in a
// process of its own.
func (p *Program) open(ctx context.Context, t taskSpec) (*conn, error) {
	if !p.caps.Session || t.job == "" {
		pr, err := p.start(ctx, t.role, t.what, t.vars())
		if err != nil {
			return nil, err
		}
		a := newAhead(pr.stdin, false, frameBytes, nil)
		return &conn{p: p, pr: pr, ctx: pr.ctx, a: a, in: a, lr: newLineReader(pr.stdout, p.cfg.MaxOutputBytes),
			endIn: func() error {
				err := a.end()
				_ = pr.stdin.Close()
				return err
			}}, nil
	}
	sp, err := p.acquire(ctx, t)
	if err != nil {
		return nil, err
	}
	return p.begin(ctx, sp, t)
}

// acquire takes an idle session process of the task's job, or starts one.
func (p *Program) acquire(ctx context.Context, t taskSpec) (*sproc, error) {
	s := &p.ss
	s.mu.Lock()
	if list := s.idle[t.job]; len(list) > 0 {
		sp := list[len(list)-1]
		if len(list) == 1 {
			delete(s.idle, t.job)
		} else {
			s.idle[t.job] = list[:len(list)-1]
		}
		s.mu.Unlock()
		return sp, nil
	}
	s.mu.Unlock()
	vars := contractVars(t.params, t.job, "", "")
	delete(vars, "")
	pr, err := p.spawn(ctx, sessionRole, "session of job "+t.job, vars, true)
	if err != nil {
		return nil, err
	}
	p.started.Add(1)
	return &sproc{pr: pr, job: t.job, env: t.env, lr: newLineReader(pr.stdout, p.cfg.MaxOutputBytes)}, nil
}

// begin sends a task's line to a session process and arms the task's time limit and cancel.
func (p *Program) begin(ctx context.Context, sp *sproc, t taskSpec) (*conn, error) {
	sp.seq++
	pr := sp.pr
	pr.what = t.what
	pr.timeUp.Store(false)
	pr.errLog.next(jobs.LoggerFrom(ctx), p.cfg.StderrLogLines, t.role)
	sp.lr.startTask(sp.seq)
	if t.env != nil {
		sp.env = t.env
	}
	c := &conn{p: p, pr: pr, sp: sp, ctx: ctx, lr: sp.lr}
	c.stop = context.AfterFunc(ctx, func() { killGroup(pr.cmd) })
	c.timer = time.AfterFunc(p.cfg.Timeout, func() {
		pr.timeUp.Store(true)
		killGroup(pr.cmd)
	})
	hdr, _ := json.Marshal(t.header(sp.seq))
	line := append(append([]byte(taskPrefix), hdr...), '\n')
	c.a = newAhead(pr.stdin, true, frameBytes, line)
	c.in, c.endIn = c.a, c.a.end
	return c, nil
}

// kill kills the run's process: its task failed.
func (c *conn) kill() { killGroup(c.pr.cmd) }

// abortIn stops writing the task's input, which is not whole: a process of its own gets the end
// of its stdin (the task fails anyway); a session process must be killed first.
func (c *conn) abortIn() {
	c.a.close()
	if c.sp == nil {
		_ = c.pr.stdin.Close()
	}
}

// waitFed waits for the feeding goroutine's result. In a session, a program that ended its
// output while its input was still being written is killed after fedGrace.
func (c *conn) waitFed(fed <-chan error) (ferr error, early bool) {
	if c.sp == nil {
		return <-fed, false
	}
	t := time.NewTimer(fedGrace)
	defer t.Stop()
	select {
	case ferr = <-fed:
		return ferr, false
	case <-t.C:
		c.kill()
		return <-fed, true
	}
}

// errEarlyEnd: a session program ended a task's output before it read the task's input.
var errEarlyEnd = errors.New("ended a task's output (mapagg:end) before it read all of the task's input")

// finish ends the run after its output was read: cause, if not nil, is what went wrong on the
// worker's side; ferr what the feeding of its input returned. A process of its own is waited
// for; a session process goes back to its job's idle ones when the task went well, and is
// killed when not.
func (c *conn) finish(cause, ferr error, early bool) error {
	if c.sp == nil {
		var we writeErr
		if cause == nil && ferr != nil && !errors.As(ferr, &we) {
			cause = ferr // reading the input failed: the program saw a part of it
			c.kill()
		}
		return c.pr.wait(cause)
	}
	stopped := c.stop()
	c.timer.Stop()
	switch {
	case cause != nil:
	case early:
		cause = errEarlyEnd
	case ferr != nil:
		var we writeErr
		if errors.As(ferr, &we) {
			cause = fmt.Errorf("stopped reading its input in the middle of a task: %w", we.err)
		} else {
			cause = ferr
		}
	case !c.lr.ended:
		// Its stdout closed: it exited, or was killed (the task's cancel or time limit).
		if !stopped && !c.pr.timeUp.Load() {
			cause = fmt.Errorf("was stopped: %w", context.Cause(c.ctx))
		}
	}
	if cause != nil || !c.lr.ended {
		if cause != nil {
			c.kill()
		} else {
			// Its stdout closed: it is exiting. Its status says why, unless it hangs.
			t := time.AfterFunc(endGrace, c.kill)
			defer t.Stop()
		}
		_, _ = io.Copy(io.Discard, c.pr.stdout)
		err := c.pr.wait(cause)
		if err == nil {
			err = fmt.Errorf("program %s (%s) exited with status 0 in the middle of a task: a session program ends each task's output with the line %s<seq>", c.p.spec.Name, c.pr.what, endPrefix)
		}
		return err
	}
	// Its stderr goes to the task's log no more: the task's lines end here, before the worker
	// writes them to the job's log.
	c.pr.errLog.next(slog.Default(), 0, "idle")
	if !stopped || c.pr.timeUp.Load() { // killed just as it ended: not to be used again
		c.p.end(c.sp)
		return nil
	}
	if c.sp.lr.br.Buffered() > 0 {
		c.p.cfg.Logger.Warn("a session program wrote after the end of its task's output: its process is ended", "program", c.p.spec.Name, "job", c.sp.job)
		c.p.end(c.sp)
		return nil
	}
	c.p.release(c.sp)
	return nil
}

// release hands a session process back to its job's idle ones.
func (p *Program) release(sp *sproc) {
	sp.idle = time.Now()
	s := &p.ss
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		p.end(sp)
		return
	}
	if s.idle == nil {
		s.idle = map[string][]*sproc{}
	}
	s.idle[sp.job] = append(s.idle[sp.job], sp)
	// Past MaxIdle idle processes (many short jobs), the one idle longest ends.
	var oldest *sproc
	n := 0
	for _, list := range s.idle {
		n += len(list)
		for _, o := range list {
			if oldest == nil || o.idle.Before(oldest.idle) {
				oldest = o
			}
		}
	}
	if n > p.cfg.MaxIdle {
		list := s.idle[oldest.job]
		i := slices.Index(list, oldest)
		list = slices.Delete(list, i, i+1)
		if len(list) == 0 {
			delete(s.idle, oldest.job)
		} else {
			s.idle[oldest.job] = list
		}
		defer p.end(oldest)
	}
	if !s.janitor {
		s.janitor = true
		go p.janitor()
	}
	s.mu.Unlock()
}

// end ends a session process: its stdin is closed, it has endGrace to exit before it is killed.
func (p *Program) end(sp *sproc) {
	p.ss.wg.Add(1)
	go func() {
		defer p.ss.wg.Done()
		_ = sp.pr.stdin.Close()
		t := time.AfterFunc(endGrace, func() { killGroup(sp.pr.cmd) })
		_, _ = io.Copy(io.Discard, sp.pr.stdout)
		err := sp.pr.wait(nil)
		t.Stop()
		if err != nil {
			p.cfg.Logger.Debug("a session program ended", "program", p.spec.Name, "job", sp.job, "err", err)
		}
	}()
}

// janitor ends idle session processes: those of a job that has ended, and those idle for
// Config.IdleTimeout. It runs while there are idle processes.
func (p *Program) janitor() {
	s := &p.ss
	t := time.NewTicker(p.cfg.JobEndPoll)
	defer t.Stop()
	for range t.C {
		now := time.Now()
		var ending []*sproc
		check := map[string]jobs.Env{}
		s.mu.Lock()
		for job, list := range s.idle {
			keep := list[:0]
			for _, sp := range list {
				if now.Sub(sp.idle) >= p.cfg.IdleTimeout || s.closed {
					ending = append(ending, sp)
				} else {
					keep = append(keep, sp)
					check[job] = sp.env
				}
			}
			if len(keep) == 0 {
				delete(s.idle, job)
			} else {
				s.idle[job] = keep
			}
		}
		s.mu.Unlock()
		for _, sp := range ending {
			p.end(sp)
		}
		for job, env := range check {
			if !p.jobEnded(env, job) {
				continue
			}
			s.mu.Lock()
			list := s.idle[job]
			delete(s.idle, job)
			s.mu.Unlock()
			for _, sp := range list {
				p.end(sp)
			}
		}
		s.mu.Lock()
		if len(s.idle) == 0 {
			s.janitor = false
			s.mu.Unlock()
			return
		}
		s.mu.Unlock()
	}
}

// jobEnded reports whether job has ended: its result is stored. A job that failed or was
// cancelled has none; its sessions end after Config.IdleTimeout.
func (p *Program) jobEnded(env jobs.Env, job string) bool {
	if env == nil {
		p.pc.mu.Lock()
		env = p.pc.env
		p.pc.mu.Unlock()
	}
	je, ok := env.(jobs.JobsEnv)
	if !ok {
		return false
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	rc, err := je.ReadRange(ctx, je.JobsContainer(), protocol.ResultBlob(job), 0, 1)
	if err != nil {
		return false
	}
	_ = rc.Close()
	return true
}

// Close ends the program's session processes and waits for them to exit. A session taken by a
// running task ends when the task does.
func (p *Program) Close() {
	s := &p.ss
	s.mu.Lock()
	s.closed = true
	var ending []*sproc
	for job, list := range s.idle {
		ending = append(ending, list...)
		delete(s.idle, job)
	}
	s.mu.Unlock()
	for _, sp := range ending {
		p.end(sp)
	}
	s.wg.Wait()
}

// SessionsStarted is how many session processes the program has started.
func (p *Program) SessionsStarted() int64 { return p.started.Load() }

// isEnd reports whether line is the end line of task seq.
func isEnd(line []byte, seq []byte) bool {
	return len(line) == len(endPrefix)+len(seq) && bytes.HasPrefix(line, []byte(endPrefix)) && bytes.Equal(line[len(endPrefix):], seq)
}
