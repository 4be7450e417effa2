package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	"github.com/mapagg/mapagg/internal/harness/cluster"
	"github.com/mapagg/mapagg/internal/harness/corpus"
	"github.com/mapagg/mapagg/internal/harness/devserver"
	"github.com/mapagg/mapagg/internal/harness/knownjobs"
	"github.com/mapagg/mapagg/internal/harness/rig"
)

const scPrograms = "programs"

// The programs cluster: one task a worker at a time (one a core of a 2-core host), 32 MiB
// shards (8 map tasks at 174 MiB), one reduce partition a worker (a partition is a process).
const (
	programWorkers    = 2
	programShardBytes = 32 << 20
	programPartitions = 2
	// programSettle bounds the wait for the workers' child processes to end: a session
	// process ends about a second after its job.
	programSettle = 30 * time.Second
)

// Programs is issue 34's program jobs (docs/programs.md): the word counts of
// examples/programs/wordcount.py and wordcount.sh through a 2-worker cluster, each against one
// process counting the same files on local disk (Python's collections.Counter; an awk array),
// in interleaved rounds. A ratio is the cluster's time ÷ the process's.
type Programs struct {
	Skipped    string         `json:"skipped,omitempty"` // why it did not run (no python3)
	Bytes      int64          `json:"bytes"`
	Files      int            `json:"files"`
	Distinct   int            `json:"distinct_words"`
	Words      int64          `json:"words"`
	Python     string         `json:"python_interpreter,omitempty"`
	Rounds     []ProgramRound `json:"rounds"`
	PythonJob  ProgramFigures `json:"python"`
	AwkJob     ProgramFigures `json:"awk"`
	Command    string         `json:"command"`
	Baselines  string         `json:"baselines"`
	ShardBytes int64          `json:"shard_bytes"`
	Partitions int            `json:"partitions"`
}

// ProgramRound is one round: the Python job, one Counter process, the awk job, one awk process.
type ProgramRound struct {
	Python ProgramRun `json:"python"`
	Awk    ProgramRun `json:"awk"`
}

// ProgramRun is one job through the cluster and one run of its single-process baseline.
type ProgramRun struct {
	Job        string     `json:"job"`
	Exact      bool       `json:"exact"`
	ClusterS   float64    `json:"cluster_s"`
	CPU        CPUFigures `json:"cpu_s"` // every process, the workers' programs included
	SingleS    float64    `json:"single_s"`
	SingleCPUS float64    `json:"single_cpu_s"`
}

// ProgramFigures are the medians of one kind's exact rounds.
type ProgramFigures struct {
	ClusterS    float64 `json:"cluster_s"`
	ClusterCPUS float64 `json:"cluster_cpu_s"`
	SingleS     float64 `json:"single_s"`
	SingleCPUS  float64 `json:"single_cpu_s"`
	Ratio       float64 `json:"ratio"`     // cluster ÷ single process, wall, median of the rounds
	CPURatio    float64 `json:"cpu_ratio"` // the same in CPU-seconds
}

func pythonOf(x *ProgramRound) *ProgramRun { return &x.Python }
func awkOf(x *ProgramRound) *ProgramRun    { return &x.Awk }

// programKind is one of the two jobs and its baseline.
type programKind struct {
	typ      string
	run      func(*ProgramRound) *ProgramRun
	baseline func(context.Context) (corpus.CountRun, error)
}

func (r *runner) programs(ctx context.Context) error {
	cfg := r.cfg
	p := &Programs{ShardBytes: programShardBytes, Partitions: programPartitions,
		Command: fmt.Sprintf("go run ./cmd/loadtest --scenarios programs --programs-mb %d (WORKER_PROGRAMS: pywordcount=python3 examples/programs/wordcount.py, "+
			"awkwordcount=examples/programs/wordcount.sh; PYTHONPATH=python; %d workers at concurrency 1, shards of %d MiB, %d partitions)",
			cfg.ProgramsMB, programWorkers, programShardBytes>>20, programPartitions),
		Baselines: "python3 counter.py FILES (corpus.CounterPy: collections.Counter over str.split, line by line); awk '" + corpus.AwkCount + "' FILES"}
	r.mu.Lock()
	r.rep.Programs = p
	r.mu.Unlock()
	py, err := corpus.Python(ctx)
	if _, aerr := exec.LookPath("awk"); err == nil && aerr != nil {
		err = errors.New("awk is not installed (not on PATH): install it (apt-get install -y mawk) to measure program jobs")
	}
	if err != nil {
		p.Skipped = err.Error()
		r.log.Logf("programs: skipped: %s", p.Skipped)
		return nil
	}
	p.Python = py
	root, err := devserver.RepoRoot()
	if err != nil {
		return err
	}
	ex := filepath.Join(root, "examples", "programs")
	c, err := r.rig.Start(ctx, rig.Spec{Name: "programs", Workers: programWorkers, Concurrency: 1, LeaseDuration: cfg.LeaseDuration,
		Env:      []string{"PYTHONPATH=" + filepath.Join(root, "python")},
		Programs: []string{"pywordcount=" + py + " " + filepath.Join(ex, "wordcount.py"), "awkwordcount=" + filepath.Join(ex, "wordcount.sh")}})
	if err != nil {
		return err
	}
	defer r.rig.Stop(c)
	container := c.Options().Namespace + "-prog"
	dir := filepath.Join(cfg.Dir, "programs-corpus")
	defer os.RemoveAll(dir)
	r.log.Logf("programs: writing a %d MiB corpus of %d words", cfg.ProgramsMB, corpus.ZipfWords)
	zc, err := corpus.WriteZipfCorpus(ctx, c.Blob(), container, "corpus/", int64(cfg.ProgramsMB)<<20, 8, dir)
	if err != nil {
		return fmt.Errorf("programs corpus: %w", err)
	}
	defer func() { _, _ = c.Blob().DeleteContainer(context.WithoutCancel(ctx), container, nil) }()
	p.Bytes, p.Files, p.Distinct, p.Words = zc.Bytes, len(zc.Files), zc.Distinct, zc.Words
	params, _ := json.Marshal(map[string]any{"container": container, "prefix": "corpus/", "shard_bytes": programShardBytes, "partitions": programPartitions})
	kinds := []programKind{
		{"pywordcount", pythonOf,
			func(ctx context.Context) (corpus.CountRun, error) { return zc.CounterBaseline(ctx, py, cfg.Dir) }},
		{"awkwordcount", awkOf, zc.AwkBaseline},
	}
	for round := range cfg.ProgramsRounds {
		var pr ProgramRound
		for _, k := range kinds {
			run := k.run(&pr)
			job := knownjobs.Job{Type: k.typ, Params: params, Check: rig.ManifestOf(int64(zc.Distinct))}
			if err := r.programRun(ctx, c, zc, job, run); err != nil {
				return err
			}
			br, err := k.baseline(ctx)
			if err != nil {
				return fmt.Errorf("single-process count beside %s: %w", k.typ, err)
			}
			run.SingleS, run.SingleCPUS = rig.Round3(br.Wall.Seconds()), rig.Round3(br.CPU.Seconds())
			r.log.Logf("programs round %d: %s %.2f s, %.2f CPU-s (workers %.2f, their programs %.2f, NATS and client %.2f, storage %.2f), exact %v; one process %.2f s, %.2f CPU-s",
				round+1, k.typ, run.ClusterS, run.CPU.Total, run.CPU.Workers, run.CPU.Programs, run.CPU.NATS, run.CPU.Storage, run.Exact, run.SingleS, run.SingleCPUS)
		}
		p.Rounds = append(p.Rounds, pr)
	}
	p.PythonJob = summarizePrograms(p.Rounds, pythonOf)
	p.AwkJob = summarizePrograms(p.Rounds, awkOf)
	return nil
}

// programRun runs job on c and checks every output record against zc. The CPU is taken when the
// workers have no child process, so every program's is counted whole.
func (r *runner) programRun(ctx context.Context, c *cluster.Cluster, zc *corpus.ZipfCorpus, job knownjobs.Job, run *ProgramRun) error {
	var pids []int
	for _, id := range c.Running() {
		pids = append(pids, c.Proc(id).PID)
	}
	settle := func() {
		if !rig.WaitNoChildren(ctx, pids, programSettle) {
			r.log.Logf("programs: the workers still have child processes after %v; their CPU is counted as it stands", programSettle)
		}
	}
	settle() // the last job's session processes have ended
	cpu0 := r.rig.CPU(c)
	var cpu rig.CPUUse
	kw, err := rig.RunKeyed(ctx, c, job, func(ctx context.Context, id string) error {
		settle()
		cpu = r.rig.CPU(c).Sub(cpu0)
		return zc.CheckOutput(ctx, c.Client, id)
	}, r.cfg.JobTimeout)
	if err != nil {
		return err
	}
	if cpu == (rig.CPUUse{}) { // it failed: no output to check
		cpu = r.rig.CPU(c).Sub(cpu0)
	}
	r.account(kw.Outcome)
	run.Job, run.Exact, run.CPU = kw.ID, kw.Exact, cpuFigures(cpu)
	if kw.Makespan > 0 {
		run.ClusterS = rig.Round3(kw.Makespan.Seconds())
	}
	if !kw.Exact {
		r.log.Logf("programs: %s: %s", job.Type, kw.Problem)
	}
	return nil
}

// summarizePrograms is the medians of one kind's exact rounds.
func summarizePrograms(rounds []ProgramRound, of func(*ProgramRound) *ProgramRun) ProgramFigures {
	var cs, ccpu, ss, scpu, ratio, cpuRatio []float64
	for i := range rounds {
		x := of(&rounds[i])
		if !x.Exact || x.ClusterS <= 0 || x.SingleS <= 0 {
			continue
		}
		cs, ccpu, ss, scpu = append(cs, x.ClusterS), append(ccpu, x.CPU.Total), append(ss, x.SingleS), append(scpu, x.SingleCPUS)
		ratio = append(ratio, x.ClusterS/x.SingleS)
		if x.SingleCPUS > 0 {
			cpuRatio = append(cpuRatio, x.CPU.Total/x.SingleCPUS)
		}
	}
	return ProgramFigures{ClusterS: median(cs), ClusterCPUS: median(ccpu), SingleS: median(ss), SingleCPUS: median(scpu),
		Ratio: median(ratio), CPURatio: median(cpuRatio)}
}

// programTargets judges the Python job and reports the awk one.
func programTargets(cfg *Config, p *Programs) []Target {
	if p == nil {
		return nil
	}
	at := fmt.Sprintf("%.0f MB, %dk distinct words, median of %d interleaved rounds", float64(p.Bytes)/1e6, p.Distinct/1000, len(p.Rounds))
	if p.Skipped != "" {
		return []Target{{Name: "program jobs ÷ one process (programs)", Want: "≤ 1", Note: "skipped: " + p.Skipped}}
	}
	note := func(f ProgramFigures) string {
		return fmt.Sprintf("%s s vs %s s; CPU-seconds %s vs %s (%s×; the cluster's: every process, the programs included)",
			rig.Num(f.ClusterS), rig.Num(f.SingleS), rig.Num(f.ClusterCPUS), rig.Num(f.SingleCPUS), rig.Num(f.CPURatio))
	}
	py, awk := p.PythonJob, p.AwkJob
	return []Target{
		{Name: "Python word count through the cluster ÷ one plain Python Counter process, wall (" + at + ")",
			Want: "≤ 1", Value: py.Ratio, Unit: "×", Met: py.Ratio > 0 && py.Ratio <= 1, Judged: !cfg.Quick && py.Ratio > 0, Note: note(py)},
		{Name: "awk word count through the cluster ÷ one awk process, wall (" + at + ")",
			Want: "reported", Value: awk.Ratio, Unit: "×", Met: awk.Ratio > 0, Note: note(awk)},
	}
}

// writeProgramFigures adds the program jobs' rows to the figures table.
func writeProgramFigures(row func(string, rig.Dist), p *Programs) {
	if p == nil || p.Skipped != "" {
		return
	}
	for _, k := range []struct {
		name, single string
		of           func(*ProgramRound) *ProgramRun
		f            ProgramFigures
	}{
		{"Python", "one Python Counter process", pythonOf, p.PythonJob},
		{"awk", "one awk process", awkOf, p.AwkJob},
	} {
		at := fmt.Sprintf("%s word count program, %.0f MB", k.name, float64(p.Bytes)/1e6)
		var cs, cpu, w, progs, nats, st, ss, scpu []float64
		for i := range p.Rounds {
			if x := k.of(&p.Rounds[i]); x.Exact {
				cs, cpu, w, progs = append(cs, x.ClusterS), append(cpu, x.CPU.Total), append(w, x.CPU.Workers), append(progs, x.CPU.Programs)
				nats, st, ss, scpu = append(nats, x.CPU.NATS), append(st, x.CPU.Storage), append(ss, x.SingleS), append(scpu, x.SingleCPUS)
			}
		}
		row(at+": cluster, s", rig.Summarize(cs))
		row(at+": cluster, CPU-seconds, every process", rig.Summarize(cpu))
		row(at+": CPU-seconds of the workers", rig.Summarize(w))
		row(at+": CPU-seconds of their programs", rig.Summarize(progs))
		row(at+": CPU-seconds of NATS and the client", rig.Summarize(nats))
		row(at+": CPU-seconds of the storage emulator", rig.Summarize(st))
		row(at+": "+k.single+", s", rig.Summarize(ss))
		row(at+": "+k.single+", CPU-seconds", rig.Summarize(scpu))
		row(at+": cluster ÷ one process, wall", rig.Single(k.f.Ratio, k.f.Ratio > 0))
		row(at+": cluster ÷ one process, CPU-seconds", rig.Single(k.f.CPURatio, k.f.CPURatio > 0))
	}
}

// programNotes are the commands behind the program jobs' figures.
func programNotes(p *Programs) []string {
	if p == nil {
		return nil
	}
	if p.Skipped != "" {
		return []string{"Program jobs: skipped: " + p.Skipped}
	}
	return []string{fmt.Sprintf("Program jobs: `%s`; the single processes: `%s`.", p.Command, p.Baselines)}
}
