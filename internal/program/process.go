package program

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"

	"github.com/mapagg/mapagg/jobs"
)

// passEnv are the variables of the worker's environment a program gets, besides those
// Config.Env names: the ones a program needs to find its interpreter and its locale.
var passEnv = []string{"PATH", "HOME", "USER", "LOGNAME", "LANG", "LANGUAGE", "TZ",
	"PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV", "SYSTEMROOT"}

// secretWords mark a variable name that may hold a secret: never passed, even when named.
var secretWords = []string{"KEY", "TOKEN", "SECRET", "PASSWORD", "PASSWD", "CONNECTION_STRING", "SAS", "CREDS", "CREDENTIAL", "AUTH"}

// IsSecretName reports whether an environment variable's name suggests a secret.
func IsSecretName(name string) bool {
	u := strings.ToUpper(name)
	for _, w := range secretWords {
		if strings.Contains(u, w) {
			return true
		}
	}
	return false
}

// environ builds a program's environment: the allowed variables of the worker's (passEnv, LC_*
// and extra), never one whose name suggests a secret, then the contract's.
func environ(lookup func(string) (string, bool), all []string, extra []string, contract map[string]string) []string {
	var env []string
	seen := map[string]bool{}
	add := func(k, v string) {
		if !seen[k] && !IsSecretName(k) {
			seen[k] = true
			env = append(env, k+"="+v)
		}
	}
	for k, v := range contract { // the contract's own names are not secrets
		seen[k] = true
		env = append(env, k+"="+v)
	}
	for _, k := range append(append([]string(nil), passEnv...), extra...) {
		if v, ok := lookup(k); ok {
			add(k, v)
		}
	}
	for _, kv := range all {
		if k, v, ok := strings.Cut(kv, "="); ok && strings.HasPrefix(k, "LC_") {
			add(k, v)
		}
	}
	return env
}

// tail keeps the last bytes written to it, for the error of a failed program, and counts all.
type tail struct {
	mu    sync.Mutex
	buf   []byte
	max   int
	total int64
}

func (t *tail) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.total += int64(len(p))
	if len(p) >= t.max {
		t.buf = append(t.buf[:0], p[len(p)-t.max:]...)
		return len(p), nil
	}
	if over := len(t.buf) + len(p) - t.max; over > 0 {
		t.buf = append(t.buf[:0], t.buf[over:]...)
	}
	t.buf = append(t.buf, p...)
	return len(p), nil
}

// reset forgets what was kept.
func (t *tail) reset() {
	t.mu.Lock()
	t.buf = t.buf[:0]
	t.mu.Unlock()
}

// lines returns the last n lines kept.
func (t *tail) lines(n int) string {
	t.mu.Lock()
	defer t.mu.Unlock()
	s := strings.TrimRight(string(bytes.ToValidUTF8(t.buf, []byte("?"))), "\n")
	if s == "" {
		return ""
	}
	ls := strings.Split(s, "\n")
	if len(ls) > n {
		ls = ls[len(ls)-n:]
	}
	return strings.Join(ls, "\n")
}

// maxLogLine is the longest stderr line logged whole; a longer one is cut.
const maxLogLine = 1 << 10

// stderrLog sends a program's stderr lines to its task's logger (the job's log) as they come,
// each line a message with the attributes stream=stderr, program and role,
// the first max of them, and keeps the tail for its error. Writes come from one goroutine (the
// exec package's copier); end is called after it is done.
type stderrLog struct {
	mu      sync.Mutex // a session process's task changes log between writes
	t       *tail
	log     *slog.Logger
	attrs   []any
	max     int
	logged  int
	dropped int
	partial []byte
}

func (s *stderrLog) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, _ = s.t.Write(p)
	rest := p
	for len(rest) > 0 {
		i := bytes.IndexByte(rest, '\n')
		if i < 0 {
			if len(s.partial) < maxLogLine {
				s.partial = append(s.partial, rest[:min(len(rest), maxLogLine-len(s.partial))]...)
			}
			break
		}
		if len(s.partial) < maxLogLine {
			s.partial = append(s.partial, rest[:min(i, maxLogLine-len(s.partial))]...)
		}
		s.line()
		rest = rest[i+1:]
	}
	return len(p), nil
}

// line logs the line collected in partial.
func (s *stderrLog) line() {
	if s.logged < s.max {
		s.logged++
		s.log.Info(string(bytes.ToValidUTF8(bytes.TrimSuffix(s.partial, []byte("\r")), []byte("?"))), s.attrs...)
	} else {
		s.dropped++
	}
	s.partial = s.partial[:0]
}

// end logs an unfinished last line and how many lines were left out.
func (s *stderrLog) end() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.endLocked()
}

// next starts a session process's next task: the lines of the last one are ended, the next
// ones go to log (none when log is the process's default logger: outside a task), and the
// tail kept for errors starts empty.
func (s *stderrLog) next(log *slog.Logger, max int, role string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.endLocked()
	s.log, s.logged, s.max = log, 0, max
	if log == slog.Default() || max < 0 {
		s.max = 0
	}
	s.attrs[len(s.attrs)-1] = role
	s.t.reset()
}

func (s *stderrLog) endLocked() {
	if len(s.partial) > 0 {
		s.line()
	}
	if s.dropped > 0 && s.max > 0 {
		s.log.Info(fmt.Sprintf("(%d more lines of stderr left out of the job's log: the first %d of a run are kept)", s.dropped, s.max), s.attrs...)
		s.dropped = 0
	}
}

// proc is one running program: its pipes, its stderr tail and its working directory.
type proc struct {
	p      *Program
	role   string
	what   string // "map of shard 3", for errors
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	stdout io.ReadCloser
	stderr *tail
	errLog *stderrLog // nil: stderr is not logged
	dir    string
	cancel context.CancelFunc
	ctx    context.Context
	timeUp atomic.Bool // a session process's task ran past the time limit
	waited bool
	err    error
}

// start runs the program in role with the contract's variables vars, in a new working directory.
func (p *Program) start(ctx context.Context, role, what string, vars map[string]string) (*proc, error) {
	return p.spawn(ctx, role, what, vars, false)
}

// spawn starts the program. A session process (role "session") outlives the task that starts
// it: its context is not ctx's and has no time limit (each task has its own, see session.go),
// and its stderr always has a log, which each task points at its job's log.
func (p *Program) spawn(ctx context.Context, role, what string, vars map[string]string, session bool) (*proc, error) {
	dir, err := os.MkdirTemp(p.cfg.TempDir, "mapagg-"+p.spec.Name+"-")
	if err != nil {
		return nil, fmt.Errorf("program %s: working directory: %w", p.spec.Name, err)
	}
	var cancel context.CancelFunc
	if session {
		ctx, cancel = context.WithCancel(context.WithoutCancel(ctx))
	} else {
		ctx, cancel = context.WithTimeoutCause(ctx, p.cfg.Timeout, errTimeLimit)
	}
	contract := map[string]string{"MAPAGG_ROLE": role, "TMPDIR": dir}
	for k, v := range vars {
		contract[k] = v
	}
	cmd := exec.Command(p.path, p.spec.Args[1:]...)
	cmd.Args[0] = p.spec.Args[0]
	cmd.Dir = dir
	cmd.Env = environ(p.cfg.LookupEnv, p.cfg.Environ, p.cfg.Env, contract)
	cmd.SysProcAttr = sysProcAttr()
	pr := &proc{p: p, role: role, what: what, cmd: cmd, stderr: &tail{max: p.cfg.StderrBytes}, dir: dir, cancel: cancel, ctx: ctx}
	cmd.Stderr = pr.stderr
	// In a task, the worker gives ctx the logger of its job's log; elsewhere (the describe run at
	// start) stderr is only kept for the error.
	if session {
		pr.errLog = &stderrLog{t: pr.stderr, log: slog.Default(),
			attrs: []any{"stream", "stderr", "program", p.spec.Name, "role", role}}
		cmd.Stderr = pr.errLog
	} else if log := jobs.LoggerFrom(ctx); log != slog.Default() && p.cfg.StderrLogLines > 0 {
		pr.errLog = &stderrLog{t: pr.stderr, log: log, max: p.cfg.StderrLogLines,
			attrs: []any{"stream", "stderr", "program", p.spec.Name, "role", role}}
		cmd.Stderr = pr.errLog
	}
	// Its stdin is a pipe of frameBytes where Linux allows it: a frame of input goes in at once.
	inR, inW, err := os.Pipe()
	if err == nil {
		growPipe(inW, frameBytes)
		cmd.Stdin, pr.stdin = inR, inW
		pr.stdout, err = cmd.StdoutPipe()
	}
	if err == nil {
		err = cmd.Start()
	}
	if inR != nil {
		_ = inR.Close() // the child's end
	}
	if err != nil {
		if inW != nil {
			_ = inW.Close()
		}
		cancel()
		_ = os.RemoveAll(dir)
		return nil, fmt.Errorf("program %s (%s): start: %w", p.spec.Name, what, err)
	}
	// The time limit and a cancelled task kill the process and its children.
	go func() {
		<-ctx.Done()
		killGroup(cmd)
	}()
	return pr, nil
}

// errTimeLimit is the cause of a program's context when its time is up.
var errTimeLimit = errors.New("time limit")

// wait waits for the process to exit, removes its working directory and returns its failure,
// if any, with the exit status and the last lines of stderr. cause, if not nil, is what went
// wrong on the worker's side first (a malformed line); it is the error's subject then.
func (pr *proc) wait(cause error) error {
	if pr.waited {
		return pr.err
	}
	pr.waited = true
	if cause != nil {
		killGroup(pr.cmd)
	}
	werr := pr.cmd.Wait()
	if pr.errLog != nil {
		pr.errLog.end()
	}
	timedOut := errors.Is(context.Cause(pr.ctx), errTimeLimit) || pr.timeUp.Load()
	pr.cancel()
	killGroup(pr.cmd) // children left behind
	if err := os.RemoveAll(pr.dir); err != nil && cause == nil && werr == nil {
		pr.p.cfg.Logger.Warn("remove a program's working directory", "program", pr.p.spec.Name, "err", err)
	}
	var what string
	switch {
	case timedOut:
		what = fmt.Sprintf("exceeded its time limit of %v", pr.p.cfg.Timeout)
	case cause != nil:
		what = cause.Error()
	case werr != nil:
		what = describeExit(werr)
	default:
		return nil
	}
	msg := fmt.Sprintf("program %s (%s) %s", pr.p.spec.Name, pr.what, what)
	if cause != nil && werr != nil && !timedOut {
		msg += " (" + describeExit(werr) + ")"
	}
	if s := pr.stderr.lines(pr.p.cfg.StderrLines); s != "" {
		msg += "; last lines of its stderr:\n" + s
	}
	pr.err = errors.New(msg)
	if cause != nil && !timedOut && errors.Is(cause, context.Canceled) {
		pr.err = fmt.Errorf("%s: %w", msg, context.Canceled)
	}
	return pr.err
}

// describeExit says how a process ended: "exited with status 2", "was killed by signal 9".
func describeExit(err error) string {
	var ee *exec.ExitError
	if !errors.As(err, &ee) {
		return err.Error()
	}
	if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return fmt.Sprintf("was killed by signal %d (%v)", int(ws.Signal()), ws.Signal())
	}
	return fmt.Sprintf("exited with status %d", ee.ExitCode())
}
