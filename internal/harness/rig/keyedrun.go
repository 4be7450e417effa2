package rig

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"os/exec"
	"sync"
	"time"

	"github.com/mapagg/mapagg/internal/harness/cluster"
	"github.com/mapagg/mapagg/internal/harness/corpus"
	"github.com/mapagg/mapagg/internal/harness/knownjobs"
	"github.com/mapagg/mapagg/internal/protocol"
	"github.com/mapagg/mapagg/jobs"
	"github.com/mapagg/mapagg/store"
)

// RSSSampler samples the resident memory of a cluster's workers.
type RSSSampler struct {
	stop chan struct{}
	done chan struct{}

	mu            sync.Mutex
	leader, other float64            // peak MiB
	peaks         map[string]float64 // peak MiB of each worker (by id)
	samples       int
}

// SampleRSS samples every worker of c every interval until Stop: the leader's peak and the
// other workers' peak, in MiB.
func SampleRSS(ctx context.Context, c *cluster.Cluster, every time.Duration) *RSSSampler {
	s := &RSSSampler{stop: make(chan struct{}), done: make(chan struct{}), peaks: map[string]float64{}}
	go func() {
		defer close(s.done)
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			leader := ""
			if l, err := c.Leader(ctx); err == nil && l != nil {
				leader = l.ID
			}
			for _, id := range c.Running() {
				p := c.Proc(id)
				if p == nil {
					continue
				}
				rss, err := ProcRSS(p.PID)
				if err != nil {
					continue
				}
				mib := float64(rss) / (1 << 20)
				s.mu.Lock()
				s.peaks[id] = max(s.peaks[id], Round3(mib))
				if id == leader {
					s.leader = max(s.leader, mib)
				} else {
					s.other = max(s.other, mib)
				}
				s.samples++
				s.mu.Unlock()
			}
			select {
			case <-ctx.Done():
				return
			case <-s.stop:
				return
			case <-t.C:
			}
		}
	}()
	return s
}

// Peaks is each worker's peak RSS in MiB so far, by id.
func (s *RSSSampler) Peaks() map[string]float64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return maps.Clone(s.peaks)
}

// Stop ends the sampling and returns the peaks in MiB and the number of samples.
func (s *RSSSampler) Stop() (leaderMiB, otherMiB float64, samples int) {
	select {
	case <-s.stop:
	default:
		close(s.stop)
	}
	<-s.done
	s.mu.Lock()
	defer s.mu.Unlock()
	return Round3(s.leader), Round3(s.other), s.samples
}

// PutBigResultJobs stores n succeeded jobs of type "wordcount" whose result.json is size bytes
// (a JSON value, as a big aggregate left it), with their spec and status record, and returns
// their ids: what `worker status` must list without reading.
func PutBigResultJobs(ctx context.Context, c *cluster.Cluster, n int, size int) ([]string, error) {
	sc, ok := c.Client.Store.(*store.Container)
	if !ok {
		return nil, fmt.Errorf("the cluster's store is a %T", c.Client.Store)
	}
	big := make([]byte, 0, size)
	big = append(big, `{"words":"`...)
	for len(big) < size-2 {
		big = append(big, 'x')
	}
	big = append(big, `"}`...)
	var ids []string
	for range n {
		now := time.Now().UTC()
		id := protocol.NewID(now)
		spec := &protocol.Spec{ID: id, Type: "wordcount", Params: json.RawMessage(`{"container":"big-results"}`), SubmittedAt: now}
		data, err := spec.Encode()
		if err != nil {
			return nil, err
		}
		if _, err := sc.Put(ctx, protocol.SpecBlob(id), data, store.Cond{}); err != nil {
			return nil, err
		}
		if _, err := sc.Put(ctx, protocol.ResultBlob(id), big, store.Cond{}); err != nil {
			return nil, err
		}
		cp := protocol.Checkpoint{Version: protocol.CheckpointVersion, Job: id, Type: "wordcount", State: jobs.StateSucceeded,
			PlanEpoch: 1, WriterEpoch: 1, Total: 1, DoneCount: 1, Dispatched: 1, UpdatedAt: now, FinishedAt: &now}
		cpData, err := cp.Encode()
		if err != nil {
			return nil, err
		}
		md, err := protocol.NewStatusRecord(&cp, spec).Metadata()
		if err != nil {
			return nil, err
		}
		if _, err := sc.PutMeta(ctx, protocol.CheckpointBlob(id), cpData, md, store.Cond{}); err != nil {
			return nil, err
		}
		ids = append(ids, id)
	}
	return ids, nil
}

// TimeCommand runs the worker binary of c with args (as a CLI on c's environment) runs times and
// returns each wall time, from exec to exit.
func TimeCommand(ctx context.Context, c *cluster.Cluster, runs int, args ...string) ([]float64, error) {
	var out []float64
	for range runs {
		cmd := exec.CommandContext(ctx, c.Options().WorkerBin, args...)
		cmd.Env = c.WorkerEnv("cli")
		var stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = io.Discard, &stderr
		start := time.Now()
		if err := cmd.Run(); err != nil {
			return nil, fmt.Errorf("worker %v: %v: %s", args, err, Clip(stderr.String(), 300))
		}
		out = append(out, Round3(time.Since(start).Seconds()))
	}
	return out, nil
}

// TimeCommandOutput runs the worker binary of c once with args (as a CLI on c's environment)
// and returns its wall time, from exec to exit, and its stdout.
func TimeCommandOutput(ctx context.Context, c *cluster.Cluster, args ...string) (float64, []byte, error) {
	cmd := exec.CommandContext(ctx, c.Options().WorkerBin, args...)
	cmd.Env = c.WorkerEnv("cli")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	start := time.Now()
	if err := cmd.Run(); err != nil {
		return 0, nil, fmt.Errorf("worker %v: %v: %s", args, err, Clip(stderr.String(), 300))
	}
	return Round3(time.Since(start).Seconds()), stdout.Bytes(), nil
}

// KeyedWordcount is how a keyed job went (a wordcount of a WordCorpus, or another keyed job).
type KeyedWordcount struct {
	Outcome
	LeaderPeakMiB, FollowerPeakMiB float64
	Peaks                          map[string]float64 // every worker's peak RSS in MiB, by id
	OutputS                        float64            // reading and checking every output record
}

// RunKeyedWordcount submits wordcount with "output":"blob" over wc on c, samples the workers'
// RSS until it ends, and checks every output record: Exact means the manifest and each word's
// count are right.
func RunKeyedWordcount(ctx context.Context, c *cluster.Cluster, wc *corpus.WordCorpus, timeout time.Duration) (KeyedWordcount, error) {
	p, _ := json.Marshal(map[string]any{"container": wc.Container, "prefix": "corpus/", "output": "blob", "shard_bytes": 8 << 20})
	job := knownjobs.Job{Type: "wordcount", Params: p, Check: ManifestOf(int64(wc.Distinct))}
	return RunKeyed(ctx, c, job, func(ctx context.Context, id string) error { return wc.CheckOutput(ctx, c.Client, id) }, timeout)
}

// ManifestOf checks that a result is an output manifest of records records.
func ManifestOf(records int64) func(json.RawMessage) error {
	return func(res json.RawMessage) error {
		var m protocol.OutputManifest
		if !protocol.IsOutputManifest(res) || json.Unmarshal(res, &m) != nil {
			return fmt.Errorf("result %.80s is not an output manifest", res)
		}
		if m.Records != records {
			return fmt.Errorf("manifest of %d records, want %d", m.Records, records)
		}
		return nil
	}
}

// RunKeyed submits keyed job on c, samples the workers' RSS until it ends, and checks its
// output with checkOutput: Exact means job.Check accepted the result and checkOutput every
// record.
func RunKeyed(ctx context.Context, c *cluster.Cluster, job knownjobs.Job, checkOutput func(ctx context.Context, id string) error, timeout time.Duration) (KeyedWordcount, error) {
	var kw KeyedWordcount
	rss := SampleRSS(ctx, c, 100*time.Millisecond)
	id, start, err := Submit(ctx, c, job)
	if err != nil {
		rss.Stop()
		return kw, err
	}
	kw.Outcome, err = Await(ctx, c, job, id, start, timeout, nil)
	kw.LeaderPeakMiB, kw.FollowerPeakMiB, _ = rss.Stop()
	kw.Peaks = rss.Peaks()
	if err != nil || !kw.Exact {
		return kw, err
	}
	t0 := time.Now()
	if err := checkOutput(ctx, id); err != nil {
		kw.Exact, kw.Problem = false, fmt.Sprintf("job %s: output: %v", id, err)
	}
	kw.OutputS = Round3(time.Since(t0).Seconds())
	return kw, nil
}
