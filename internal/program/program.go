package program

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"iter"
	"log/slog"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mapagg/mapagg/jobs"
)

// Config configures the programs of one worker.
type Config struct {
	// Timeout bounds one run of a program: a map, combine or reduce task. Default 30m.
	Timeout time.Duration
	// MaxOutputBytes bounds what one run may write on stdout (bytes). Default 4 GiB.
	MaxOutputBytes int64
	// StderrBytes is how much of a run's stderr is kept, the end of it, for its error (bytes).
	// Default 8 KiB; the rest is counted and dropped.
	StderrBytes int
	// StderrLines is how many of the last stderr lines a failure quotes. Default 10.
	StderrLines int
	// StderrLogLines is how many lines of a run's stderr go to the job's log (worker logs JOB),
	// the first ones, each cut at 1 KiB; a line then says how many more were left out. Default
	// 200; negative logs none.
	StderrLogLines int
	// CombineBytes is how much map output is collected, sorted and piped through a program's
	// combine role at once (bytes). Default 32 MiB.
	CombineBytes int
	// Env names variables of the worker's environment to pass on, beyond PATH, HOME, the
	// locale and Python's. A name that suggests a secret (KEY, TOKEN, PASSWORD...) is refused.
	Env []string
	// TempDir is where working directories are made. Default os.TempDir().
	TempDir string
	// IdleTimeout ends a session process (a program that declares sessions) that has had no
	// task for this long. Default 10s.
	IdleTimeout time.Duration
	// MaxIdle bounds the idle session processes of a program (of all jobs): past it, the one
	// idle longest ends. Default 8.
	MaxIdle int
	// JobEndPoll is how often the job of an idle session process is checked for its end (a
	// read of its result). Default 1s.
	JobEndPoll time.Duration
	// DescribeTimeout bounds the describe run at start. Default 30s.
	DescribeTimeout time.Duration
	// LookupEnv and Environ read the worker's environment. Default os.LookupEnv, os.Environ().
	LookupEnv func(string) (string, bool)
	Environ   []string
	// Logger. Default slog.Default().
	Logger *slog.Logger
}

// WithDefaults returns c with every zero field set to its default.
func (c Config) WithDefaults() Config {
	c.Timeout = cmp.Or(c.Timeout, 30*time.Minute)
	c.MaxOutputBytes = cmp.Or(c.MaxOutputBytes, 4<<30)
	c.StderrBytes = cmp.Or(c.StderrBytes, 8<<10)
	c.StderrLines = cmp.Or(c.StderrLines, 10)
	c.StderrLogLines = cmp.Or(c.StderrLogLines, 200)
	c.CombineBytes = cmp.Or(c.CombineBytes, 32<<20)
	c.TempDir = cmp.Or(c.TempDir, os.TempDir())
	c.DescribeTimeout = cmp.Or(c.DescribeTimeout, 30*time.Second)
	c.IdleTimeout = cmp.Or(c.IdleTimeout, 10*time.Second)
	c.JobEndPoll = cmp.Or(c.JobEndPoll, time.Second)
	c.MaxIdle = cmp.Or(c.MaxIdle, 8)
	if c.LookupEnv == nil {
		c.LookupEnv = os.LookupEnv
	}
	if c.Environ == nil {
		c.Environ = os.Environ()
	}
	c.Logger = cmp.Or(c.Logger, slog.Default())
	return c
}

// Validate refuses impossible settings.
func (c Config) Validate() error {
	switch {
	case c.IdleTimeout < 0 || c.JobEndPoll < 0 || c.MaxIdle < 0:
		return errors.New("program: invalid Config: a negative IdleTimeout, JobEndPoll or MaxIdle")
	case c.Timeout < 0:
		return fmt.Errorf("program: invalid Config: Timeout %v, want above 0", c.Timeout)
	case c.MaxOutputBytes < 0 || c.StderrBytes < 0 || c.StderrLines < 0 || c.CombineBytes < 0:
		return errors.New("program: invalid Config: a negative limit")
	}
	for _, name := range c.Env {
		if IsSecretName(name) {
			return fmt.Errorf("program: the variable %s looks like a secret (its name holds KEY, TOKEN, PASSWORD or the like): programs never get secrets", name)
		}
	}
	return nil
}

// Capabilities is what a program declares when asked with MAPAGG_ROLE=describe.
type Capabilities struct {
	// Combine: the program has a combine role.
	Combine bool `json:"combine"`
	// Session: the program serves the tasks of a job one after another in one process, framed
	// as session.go describes (MAPAGG_ROLE=session).
	Session bool `json:"session"`
}

// Program is a registered program as a keyed job: jobs.KeyedJob and jobs.PartitionReducer.
type Program struct {
	spec Spec
	path string
	caps Capabilities
	cfg  Config
	pc   paramsCache // job parameters for MAPAGG_PARAMS

	ss      sessions     // idle session processes
	started atomic.Int64 // session processes started
}

// sessions are a program's idle session processes, by job.
type sessions struct {
	mu      sync.Mutex
	idle    map[string][]*sproc
	janitor bool // its goroutine runs
	closed  bool
	wg      sync.WaitGroup // processes being ended
}

var (
	_ jobs.KeyedJob         = (*Program)(nil)
	_ jobs.PartitionReducer = (*Program)(nil)
)

// New checks the program and asks what it can do: its executable must exist and be executable,
// and a run with MAPAGG_ROLE=describe and empty stdin must exit 0. Its stdout then may be a JSON
// object of Capabilities; anything else declares none.
func New(ctx context.Context, spec Spec, cfg Config) (*Program, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	path, err := spec.Resolve()
	if err != nil {
		return nil, err
	}
	p := &Program{spec: spec, path: path, cfg: cfg}
	dcfg := cfg
	dcfg.Timeout = cfg.DescribeTimeout
	d := &Program{spec: spec, path: path, cfg: dcfg}
	pr, err := d.start(ctx, "describe", "describe at start", nil)
	if err != nil {
		return nil, err
	}
	_ = pr.stdin.Close()
	out, rerr := io.ReadAll(io.LimitReader(pr.stdout, 64<<10))
	_, _ = io.Copy(io.Discard, pr.stdout)
	if err := pr.wait(nil); err != nil {
		return nil, fmt.Errorf("%w: a program must exit 0 when MAPAGG_ROLE=describe", err)
	}
	if rerr != nil {
		return nil, fmt.Errorf("program %s: describe: %w", spec.Name, rerr)
	}
	if out = bytes.TrimSpace(out); len(out) > 0 && out[0] == '{' {
		if err := json.Unmarshal(out, &p.caps); err != nil {
			return nil, fmt.Errorf("program %s: its describe output is not a JSON object of capabilities: %v", spec.Name, err)
		}
	}
	return p, nil
}

// Spec returns the program's name and command.
func (p *Program) Spec() Spec { return p.spec }

// Capabilities returns what the program declared at start.
func (p *Program) Capabilities() Capabilities { return p.caps }

// Type is the program's name.
func (p *Program) Type() string { return p.spec.Name }

// Params are the parameters every program job has; any other field is the program's own, and
// all of them reach it as MAPAGG_PARAMS.
type Params struct {
	jobs.BlobInput
	// Partitions is the number of reduce partitions: 0 for the cluster's default, else 1 to
	// jobs.MaxPartitions.
	Partitions int `json:"partitions,omitempty"`
}

func (p *Program) params(raw json.RawMessage) (Params, error) {
	var ps Params
	if len(bytes.TrimSpace(raw)) == 0 {
		raw = []byte("{}")
	}
	if err := json.Unmarshal(raw, &ps); err != nil {
		return ps, &jobs.ParamError{Job: p.spec.Name, Reason: fmt.Sprintf("parameters must be a JSON object with \"container\" (or \"job\"): %v", err)}
	}
	if err := ps.BlobInput.Validate(); err != nil {
		var pe *jobs.ParamError
		if errors.As(err, &pe) && pe.Job == "" {
			pe.Job = p.spec.Name
		}
		return ps, err
	}
	if ps.Partitions < 0 || ps.Partitions > jobs.MaxPartitions {
		return ps, jobs.BadParam("partitions", `"partitions" must be 1 to %d, or 0 for the cluster's default (got %d)`, jobs.MaxPartitions, ps.Partitions)
	}
	return ps, nil
}

// Validate checks the parameters the cluster reads (the input and partitions).
func (p *Program) Validate(raw json.RawMessage) error {
	_, err := p.params(raw)
	return err
}

// Split cuts the input blobs into ranges, one per map shard.
func (p *Program) Split(ctx context.Context, env jobs.Env, raw json.RawMessage) ([][]byte, error) {
	ps, err := p.params(raw)
	if err != nil {
		return nil, err
	}
	ranges, err := ps.BlobInput.Split(ctx, env)
	if err != nil {
		return nil, err
	}
	if len(ranges) > jobs.MaxShards {
		return nil, fmt.Errorf("%s: the input makes %d shards, the limit is %d: raise shard_bytes", p.spec.Name, len(ranges), jobs.MaxShards)
	}
	out := make([][]byte, len(ranges))
	for i, r := range ranges {
		if out[i], err = json.Marshal(r); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// Partitions is the partitions parameter.
func (p *Program) Partitions(raw json.RawMessage) (int, error) {
	ps, err := p.params(raw)
	return ps.Partitions, err
}

// Combiner is nil: a program combines in its own process, on the map side (see Map).
func (p *Program) Combiner() func(dst, a, b []byte) ([]byte, error) { return nil }

// OutputText: a program's output keys are text (strings, as it printed them), its values JSON
// or strings (jobs.OutputTextOf).
func (p *Program) OutputText() (key, value bool) { return true, false }

// Reduce reduces one key in a process of its own. The cluster uses ReducePartition instead,
// which keeps one process for a partition; Reduce serves callers that know only KeyedJob.
func (p *Program) Reduce(ctx context.Context, key []byte, values iter.Seq[[]byte], emit func(key, value []byte) error) error {
	s, err := p.ReducePartition(ctx, jobs.ReduceTask{})
	if err != nil {
		return err
	}
	if err := s.Reduce(ctx, key, values, emit); err != nil {
		_ = s.Close(ctx, nil)
		return err
	}
	return s.Close(ctx, emit)
}

// contractVars are the variables of a task.
func contractVars(params json.RawMessage, job string, index string, indexVar string) map[string]string {
	if len(params) == 0 {
		params = []byte("{}")
	}
	return map[string]string{"MAPAGG_PARAMS": string(params), "MAPAGG_JOB_ID": job, indexVar: index}
}

func itoa(i int) string { return strconv.Itoa(i) }
