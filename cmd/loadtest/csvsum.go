package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/mapagg/mapagg/client"
	"github.com/mapagg/mapagg/internal/harness/corpus"
	"github.com/mapagg/mapagg/internal/harness/knownjobs"
	"github.com/mapagg/mapagg/internal/harness/rig"
)

const scCSVSum = "csv-sum"

// CSVSum is issue 32's per-key sum: a newcomer's keyed job (csvsum: jobs.Lines, bytes.Cut,
// strconv.ParseInt, Combine) over CSVRows rows of CSVKeys users on a cluster of the test worker
// at default settings, against a naive single-process Go program (cmd csvsum) over the same
// files on local disk, in interleaved rounds. A ratio is the keyed job's time ÷ the program's.
type CSVSum struct {
	Rows   int        `json:"rows"`
	Keys   int        `json:"keys"`
	Bytes  int64      `json:"bytes"`
	Blobs  int        `json:"blobs"`
	Rounds []CSVRound `json:"rounds"`
	// Medians of the exact rounds.
	KeyedS     float64 `json:"keyed_s"`
	KeyedCPUS  float64 `json:"keyed_cpu_s"` // every process
	NaiveS     float64 `json:"naive_s"`
	NaiveCPUS  float64 `json:"naive_cpu_s"`
	Ratio      float64 `json:"ratio"`     // keyed ÷ naive, wall, median of the rounds
	CPURatio   float64 `json:"cpu_ratio"` // keyed ÷ naive, CPU-seconds
	Command    string  `json:"command"`
	NaiveShape string  `json:"naive_program"`
}

// CSVRound is one keyed job and one run of the naive program.
type CSVRound struct {
	Job       string     `json:"job"`
	Exact     bool       `json:"exact"`
	KeyedS    float64    `json:"keyed_s"`
	CPU       CPUFigures `json:"cpu_s"`
	NaiveS    float64    `json:"naive_s"`
	NaiveCPUS float64    `json:"naive_cpu_s"`
}

func (r *runner) csvSum(ctx context.Context) error {
	cfg := r.cfg
	c, err := r.rig.Start(ctx, rig.Spec{Name: "csv", TestWorker: true, LeaseDuration: cfg.LeaseDuration})
	if err != nil {
		return err
	}
	defer r.rig.Stop(c)
	bin, err := r.buildTool("csvsum", "./internal/harness/corpus/csvsum")
	if err != nil {
		return err
	}
	container := c.Options().Namespace + "-csv"
	dir := filepath.Join(cfg.Dir, "csv-corpus")
	defer os.RemoveAll(dir)
	r.log.Logf("csv-sum: writing %d rows over %d users", cfg.CSVRows, cfg.CSVKeys)
	cc, err := corpus.WriteCSVCorpus(ctx, c.Blob(), container, "sales/", cfg.CSVRows, cfg.CSVKeys, 8, dir)
	if err != nil {
		return fmt.Errorf("csv corpus: %w", err)
	}
	defer func() { _, _ = c.Blob().DeleteContainer(context.WithoutCancel(ctx), container, nil) }()
	cs := &CSVSum{Rows: cc.Rows, Keys: cc.Keys, Bytes: cc.Bytes, Blobs: cc.Blobs,
		Command:    "go run ./cmd/loadtest --scenarios csv-sum (the job: internal/harness/testworker/userjobs, csvsum)",
		NaiveShape: "go build ./internal/harness/corpus/csvsum && ./csvsum -out FILE DIR (bufio.Scanner, strings.Cut, strconv.ParseInt, map[string]int64, one goroutine)"}
	r.mu.Lock()
	r.rep.CSVSum = cs
	r.mu.Unlock()
	// The job as a newcomer submits it: the input and nothing else.
	p, _ := json.Marshal(map[string]any{"container": container, "prefix": "sales/"})
	job := knownjobs.Job{Type: "csvsum", Params: p, Check: rig.ManifestOf(int64(min(cc.Rows, cc.Keys)))}
	var ks, kcpu, ns, ncpu, ratio, cpuRatio []float64
	for round := range cfg.CSVRounds {
		cpu0 := r.rig.CPU(c)
		var cpu rig.CPUUse
		kw, err := rig.RunKeyed(ctx, c, job, func(ctx context.Context, id string) error {
			cpu = r.rig.CPU(c).Sub(cpu0)
			pr, pw := io.Pipe()
			go func() {
				_, err := c.Client.WriteOutput(ctx, id, pw, client.OutputOptions{Format: client.FormatTSV})
				pw.CloseWithError(err)
			}()
			defer pr.Close()
			return cc.CheckSums(pr)
		}, cfg.JobTimeout)
		if err != nil {
			return err
		}
		r.account(kw.Outcome)
		cr := CSVRound{Job: kw.ID, Exact: kw.Exact, CPU: cpuFigures(cpu)}
		if kw.Makespan > 0 {
			cr.KeyedS = rig.Round3(kw.Makespan.Seconds())
		}
		nr, err := cc.SumBaseline(ctx, bin, cfg.Dir)
		if err != nil {
			return fmt.Errorf("naive sum: %w", err)
		}
		cr.NaiveS, cr.NaiveCPUS = rig.Round3(nr.Wall.Seconds()), rig.Round3(nr.CPU.Seconds())
		cs.Rounds = append(cs.Rounds, cr)
		r.log.Logf("csv-sum round %d: keyed %.2f s, %.2f CPU-s (workers %.2f, NATS and client %.2f, storage %.2f), exact %v %s; naive Go program %.2f s, %.2f CPU-s",
			round+1, cr.KeyedS, cr.CPU.Total, cr.CPU.Workers, cr.CPU.NATS, cr.CPU.Storage, kw.Exact, kw.Problem, cr.NaiveS, cr.NaiveCPUS)
		if kw.Exact && cr.KeyedS > 0 && cr.NaiveS > 0 {
			ks, kcpu, ns, ncpu = append(ks, cr.KeyedS), append(kcpu, cr.CPU.Total), append(ns, cr.NaiveS), append(ncpu, cr.NaiveCPUS)
			ratio = append(ratio, cr.KeyedS/cr.NaiveS)
			if cr.NaiveCPUS > 0 {
				cpuRatio = append(cpuRatio, cr.CPU.Total/cr.NaiveCPUS)
			}
		}
	}
	cs.KeyedS, cs.KeyedCPUS, cs.NaiveS, cs.NaiveCPUS = median(ks), median(kcpu), median(ns), median(ncpu)
	cs.Ratio, cs.CPURatio = median(ratio), median(cpuRatio)
	return nil
}

// csvTargets judges the per-key sum.
func csvTargets(cfg *Config, cs *CSVSum) []Target {
	if cs == nil {
		return nil
	}
	return []Target{{Name: fmt.Sprintf("keyed per-user sum, %d CSV rows over %d users (%.0f MB) ÷ a naive single-process Go program, wall, median of %d rounds",
		cs.Rows, cs.Keys, float64(cs.Bytes)/1e6, len(cs.Rounds)),
		Want: "≤ 1.5", Value: cs.Ratio, Unit: "×", Met: cs.Ratio > 0 && cs.Ratio <= 1.5, Judged: !cfg.Quick && cs.Ratio > 0,
		Note: fmt.Sprintf("%s s vs %s s; CPU-seconds %s vs %s (%s×, every process)", rig.Num(cs.KeyedS), rig.Num(cs.NaiveS),
			rig.Num(cs.KeyedCPUS), rig.Num(cs.NaiveCPUS), rig.Num(cs.CPURatio))}}
}

// writeCSVFigures adds the per-key sum's rows to the figures table.
func writeCSVFigures(row func(string, rig.Dist), cs *CSVSum) {
	if cs == nil {
		return
	}
	at := fmt.Sprintf("keyed per-user sum, %d rows, %d users", cs.Rows, cs.Keys)
	var ks, cpu, w, nats, st, ns, ncpu []float64
	for _, x := range cs.Rounds {
		if x.Exact {
			ks, cpu, w, nats, st = append(ks, x.KeyedS), append(cpu, x.CPU.Total), append(w, x.CPU.Workers), append(nats, x.CPU.NATS), append(st, x.CPU.Storage)
			ns, ncpu = append(ns, x.NaiveS), append(ncpu, x.NaiveCPUS)
		}
	}
	row(at+": s", rig.Summarize(ks))
	row(at+": CPU-seconds, every process", rig.Summarize(cpu))
	row(at+": CPU-seconds of the workers", rig.Summarize(w))
	row(at+": CPU-seconds of NATS and the client", rig.Summarize(nats))
	row(at+": CPU-seconds of the storage emulator", rig.Summarize(st))
	row(at+": naive single-process Go program, s", rig.Summarize(ns))
	row(at+": naive single-process Go program, CPU-seconds", rig.Summarize(ncpu))
	row(at+": keyed ÷ naive, wall", rig.Single(cs.Ratio, cs.Ratio > 0))
}

// csvNotes are the commands behind the per-key sum's figures.
func csvNotes(cs *CSVSum) []string {
	if cs == nil {
		return nil
	}
	return []string{fmt.Sprintf("Per-user sum: `%s`; the naive program: `%s`.", cs.Command, cs.NaiveShape)}
}
