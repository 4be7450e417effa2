package worker

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"sync/atomic"

	"github.com/mapagg/mapagg/internal/protocol"
	"github.com/mapagg/mapagg/internal/shuffle"
	"github.com/mapagg/mapagg/internal/telemetry"
	"github.com/mapagg/mapagg/jobs"
	"github.com/mapagg/mapagg/store"
)

// KeyedStore is what a keyed job's tasks need of the jobs container: streamed uploads (map runs,
// outputs), ranged reads (a partition's run in each map blob) and whole reads (the map manifest).
// *store.Container has it.
type KeyedStore interface {
	Streams() store.Streams
	Get(ctx context.Context, name string) ([]byte, store.ETag, error)
	ReadRange(ctx context.Context, name string, offset, count int64) (io.ReadCloser, error)
	Props(ctx context.Context, name string) (store.Props, error)
	Delete(ctx context.Context, name string) error
}

var _ KeyedStore = (*store.Container)(nil)

// DefaultTaskMemory was a keyed task's share of the default budget (8 MiB a slot); the
// default now follows the machine (DefaultMemoryBudget). It stays the least a slot gets.
const DefaultTaskMemory = 8 << 20

// Bounds of the default memory budget of keyed tasks (a worker's, shared by its slots).
const (
	// MaxDefaultMemoryBudget caps the default: with the runtime's headroom (node sets the soft
	// memory limit to the budget plus 128 MiB) a worker stays under 300 MiB resident.
	MaxDefaultMemoryBudget = 128 << 20
	// memoryShare is the part of the machine's memory (its cgroup's limit, else its RAM) the
	// default takes: a box may run several workers beside other programs.
	memoryShare = 8
)

// DefaultMemoryBudget is the memory budget of keyed tasks when none is set: an eighth of the
// machine's memory (the cgroup's limit when there is one, else the RAM), at most
// MaxDefaultMemoryBudget and at least DefaultTaskMemory a slot. A map buffer that holds its
// whole shard's distinct keys combines them all and spills nothing: 8 MiB a slot held a
// fraction of one 8 MiB shard's ~650k distinct words, so every task of a many-key job spilled
// and its runs were bigger than its input.
func DefaultMemoryBudget(concurrency int) int64 {
	share := int64(MaxDefaultMemoryBudget)
	if m := machineMemory(); m > 0 {
		share = min(m/memoryShare, MaxDefaultMemoryBudget)
	}
	return max(share, DefaultTaskMemory*int64(max(concurrency, 1)))
}

// machineMemory is the memory this process may use: its cgroup's limit (v2, then v1), else the
// machine's RAM (/proc/meminfo); 0 when none can be read.
func machineMemory() int64 {
	for _, f := range []string{"/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"} {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		if n, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64); err == nil && n > 0 && n < 1<<50 {
			return n // v1 says "no limit" with a number near 2^63
		}
	}
	b, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return 0
	}
	for line := range strings.Lines(string(b)) {
		if rest, ok := strings.CutPrefix(line, "MemTotal:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 10, 64)
			if err == nil && kb > 0 {
				return kb << 10
			}
		}
	}
	return 0
}

// MapBufferMemory caps a map task's buffer, whatever the budget: a combining table larger than
// the caches is slower to probe than spilling is to merge. A map task of 8 MiB of words with
// 8 MiB against 64 MiB (BenchmarkMapTask_Wordcount, CPU-seconds, box loaded): 5M distinct
// 0.78 against 0.96–1.30 (13 spills against 2); 500k distinct 0.68–0.98 against 0.83–0.94
// (the same runs: spills are combined when merged). The reduce uses the whole share: its
// fan-in (runs merged at once without a local pass) grows with it.
const MapBufferMemory = 8 << 20

// MemoryBudget is the worker's memory for keyed tasks (Config.MemoryBudget, or its default).
func (w *Worker) MemoryBudget() int64 { return w.cfg.MemoryBudget }

// keyedStats count what keyed tasks did (metrics: keyed_metrics.go).
type keyedStats struct {
	mapTasks, reduceTasks         atomic.Int64
	spilledBytes, runsMerged      atomic.Int64
	outputBytes, outputRecords    atomic.Int64
	mapRunBytes, reduceInputBytes atomic.Int64
	peakTaskMemory                atomic.Int64
}

func (s *keyedStats) peak(n int64) {
	for {
		old := s.peakTaskMemory.Load()
		if n <= old || s.peakTaskMemory.CompareAndSwap(old, n) {
			return
		}
	}
}

// taskBudget is one keyed task's share of the worker's memory budget.
func (w *Worker) taskBudget() int64 {
	return max(w.cfg.MemoryBudget/int64(w.cfg.Concurrency), shuffle.MinMemoryBytes)
}

// execution numbers a task's blob: not the delivery count, which starts at 1 again for a shard
// re-dispatched by self-repair or a backup, so two executions could write the same name.
func execution() int { return rand.IntN(1<<31-2) + 1 }

// runKeyed runs one task of a keyed job and returns its result (a MapCommit or a ReduceCommit,
// JSON). A panic in the job's code is an error (package jobs recovers it, with the stack).
func (w *Worker) runKeyed(ctx context.Context, kj jobs.KeyedJob, env jobs.Env, m *protocol.ShardMsg, attempt int) ([]byte, error) {
	kt, err := protocol.DecodeKeyedTask(m.Shard)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", jobs.ErrPermanent, err)
	}
	ks, ok := w.store.(KeyedStore)
	if !ok {
		return nil, fmt.Errorf("%w: this worker's store cannot stream (keyed jobs need blob storage)", jobs.ErrPermanent)
	}
	var res []byte
	switch kt.Task {
	case protocol.TaskMap:
		telemetry.Rename(ctx, "map")
		res, err = w.mapTask(ctx, kj, env, ks, m, attempt, kt)
	default:
		telemetry.Rename(ctx, "reduce")
		res, err = w.reduceTask(ctx, kj, ks, m, kt)
	}
	if err != nil && !errors.Is(err, errJobEnded) && w.jobEnded(ctx, ks, m.Job) {
		// A duplicate (a backup, a redelivery) of a task whose job ended meanwhile: its inputs
		// are deleted. Nothing to report.
		return nil, fmt.Errorf("%w: %v", errJobEnded, err)
	}
	return res, err
}

// errJobEnded: the task's job has ended; the shard is dropped (acknowledged, no result).
var errJobEnded = errors.New("the job has ended")

// jobEnded reports whether job's status record says it ended (a HEAD).
func (w *Worker) jobEnded(ctx context.Context, ks KeyedStore, job string) bool {
	p, err := ks.Props(ctx, protocol.CheckpointBlob(job))
	if err != nil {
		return false
	}
	rec, err := protocol.DecodeStatusRecord(p.Meta)
	return err == nil && rec.State.Terminal()
}

func (w *Worker) mapTask(ctx context.Context, kj jobs.KeyedJob, env jobs.Env, ks KeyedStore, m *protocol.ShardMsg, attempt int, kt protocol.KeyedTask) ([]byte, error) {
	name := protocol.MapRunBlob(m.Job, m.Index, execution())
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	pw := shuffle.PutWriter(ctx, ks.Streams(), name)
	cs := shuffle.NewConcatSink(pw)
	task := jobs.Task{JobID: m.Job, Index: m.Index, Attempt: attempt, Shard: kt.Shard}
	cfg := shuffle.MapConfig{Partitions: kt.Partitions, MemoryBytes: min(w.taskBudget(), MapBufferMemory), TempDir: w.cfg.TempDir}
	stats, err := shuffle.Map(ctx, kj, env, task, cs.Sink(), cfg)
	w.keyed.mapTasks.Add(1)
	w.keyed.spilledBytes.Add(stats.SpilledBytes)
	w.keyed.peak(stats.PeakMemory)
	if err != nil {
		_ = pw.CloseWithError(err)
		return nil, err
	}
	if err := pw.Close(); err != nil {
		return nil, fmt.Errorf("store map run %s: %w", name, err)
	}
	if err := w.lateTask(ctx, ks, m.Job, name); err != nil {
		return nil, err
	}
	w.keyed.mapRunBytes.Add(stats.RunBytes)
	if len(cs.Offsets) != kt.Partitions+1 {
		return nil, fmt.Errorf("map run %s: %d partition offsets, want %d", name, len(cs.Offsets), kt.Partitions+1)
	}
	return json.Marshal(protocol.MapCommit{Blob: name, Offsets: cs.Offsets, Records: stats.Records})
}

// reduceTask reduces the task's partitions (a group of kt.Count from kt.Partition) one after
// another into an output blob each. It reads the group's bytes of each map run with one ranged
// read (shuffle.GroupRuns): run reads are maps × reduce tasks, not maps × partitions.
func (w *Worker) reduceTask(ctx context.Context, kj jobs.KeyedJob, ks KeyedStore, m *protocol.ShardMsg, kt protocol.KeyedTask) ([]byte, error) {
	first, count := kt.Partition, max(kt.Count, 1)
	data, _, err := ks.Get(ctx, protocol.MapManifestBlob(m.Job))
	if errors.Is(err, store.ErrNotFound) && !w.jobEnded(ctx, ks, m.Job) {
		return w.runLost(m.Job, first, protocol.MapManifestBlob(m.Job))
	}
	if err != nil {
		return nil, fmt.Errorf("read the map manifest: %w", err)
	}
	man, err := protocol.DecodeMapManifest(m.Job, kt.MapShards, kt.Partitions, data)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", jobs.ErrPermanent, err)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	streams := make([]shuffle.GroupStream, 0, len(man.Maps))
	inputs := make([]storedRun, 0, len(man.Maps))
	inputBytes := make([]int64, count)
	for _, c := range man.Maps {
		lengths := make([]int64, count)
		for i := range count {
			p := first + i
			if lengths[i] = c.Offsets[p+1] - c.Offsets[p]; lengths[i] == 0 {
				return nil, fmt.Errorf("%w: map run %s has no run for partition %d", jobs.ErrPermanent, c.Blob, p)
			}
			inputBytes[i] += lengths[i]
		}
		off, n := c.Offsets[first], c.Offsets[first+count]-c.Offsets[first]
		streams = append(streams, shuffle.GroupStream{Lengths: lengths,
			Open: func(ctx context.Context) (io.ReadCloser, error) { return ks.ReadRange(ctx, c.Blob, off, n) }})
		inputs = append(inputs, storedRun{c.Blob, c.Offsets[len(c.Offsets)-1]})
	}
	man = nil
	group, err := shuffle.NewGroupRuns(ctx, streams)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", jobs.ErrPermanent, err)
	}
	defer group.Close()
	w.keyed.reduceTasks.Add(1)
	outs := make([]protocol.OutputPartition, 0, count)
	for i := range count {
		o, err := w.reducePartition(ctx, kj, ks, m, kt, first+i, group.Runs(i), inputBytes[i])
		if err != nil {
			// The outputs already stored are no commit: delete them (clean-up would, at the job's end).
			for _, o := range outs {
				_ = ks.Delete(context.WithoutCancel(ctx), o.Blob)
			}
			if blob := lostInput(ctx, ks, inputs); blob != "" && !w.jobEnded(ctx, ks, m.Job) {
				return w.runLost(m.Job, first, blob)
			}
			return nil, err
		}
		outs = append(outs, o)
	}
	names := make([]string, len(outs))
	for i, o := range outs {
		names[i] = o.Blob
	}
	if err := w.lateTask(ctx, ks, m.Job, names...); err != nil {
		return nil, err
	}
	for _, o := range outs {
		w.keyed.outputBytes.Add(o.Bytes)
		w.keyed.outputRecords.Add(o.Records)
	}
	if count == 1 {
		return json.Marshal(outs[0])
	}
	return json.Marshal(protocol.ReduceGroupCommit{Outputs: outs})
}

// reducePartition reduces partition p's runs into a new output blob, in the task's format.
func (w *Worker) reducePartition(ctx context.Context, kj jobs.KeyedJob, ks KeyedStore, m *protocol.ShardMsg, kt protocol.KeyedTask, p int, runs []shuffle.Opener, input int64) (protocol.OutputPartition, error) {
	format := cmp.Or(kt.Output, jobs.OutputJSONL)
	name := protocol.OutputBlobIn(m.Job, p, execution(), format)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	pw := shuffle.PutWriter(ctx, ks.Streams(), name)
	out, err := shuffle.NewStoredWriter(pw, format, kt.KeyText, kt.ValueText)
	if err != nil {
		_ = pw.CloseWithError(err)
		return protocol.OutputPartition{}, err
	}
	cfg := shuffle.ReduceConfig{Partition: p, MemoryBytes: w.taskBudget(), TempDir: w.cfg.TempDir, Job: m.Job}
	stats, err := shuffle.Reduce(ctx, kj, runs, out, cfg)
	w.keyed.spilledBytes.Add(stats.SpilledBytes)
	w.keyed.runsMerged.Add(int64(stats.RunsMerged))
	w.keyed.reduceInputBytes.Add(input)
	w.keyed.peak(stats.PeakMemory)
	if err != nil {
		_ = pw.CloseWithError(err)
		return protocol.OutputPartition{}, err
	}
	if err := pw.Close(); err != nil {
		return protocol.OutputPartition{}, fmt.Errorf("store output %s: %w", name, err)
	}
	return protocol.OutputPartition{Partition: p, Blob: name, Records: stats.OutputRecords, Bytes: stats.OutputBytes}, nil
}

// storedRun is a committed map run: its blob and size.
type storedRun struct {
	blob string
	size int64
}

// lostInput returns the first run of a failed reduce that storage no longer has whole (a HEAD
// each), or "" when every one is there (or storage cannot say).
func lostInput(ctx context.Context, ks KeyedStore, runs []storedRun) string {
	if ctx.Err() != nil {
		return ""
	}
	for _, r := range runs {
		p, err := ks.Props(ctx, r.blob)
		if errors.Is(err, store.ErrNotFound) || err == nil && p.Size < r.size {
			return r.blob
		}
	}
	return ""
}

// runLost is a reduce task's result when an input is gone (a storage rollback): not a commit,
// but a report that the leader answers by running the lost map task again, then this task.
func (w *Worker) runLost(job string, partition int, blob string) ([]byte, error) {
	w.log.Warn("an input of a reduce task is gone from storage (a rollback?); reported to the leader", "job", job, "partition", partition, "blob", blob)
	return json.Marshal(protocol.RunLost{Partition: partition, Lost: blob})
}

// lateTask deletes the blobs a task just stored if its job has ended meanwhile (a backup or a
// redelivered attempt that outlived the job, a cancelled job's task). The leader's clean-up may
// have listed the job's blobs before this one existed. The job's status record says (a HEAD).
func (w *Worker) lateTask(ctx context.Context, ks KeyedStore, job string, names ...string) error {
	if !w.jobEnded(ctx, ks, job) {
		return nil
	}
	for _, name := range names {
		if err := ks.Delete(ctx, name); err != nil {
			w.log.Warn("delete the blob of a task that outlived its job", "job", job, "blob", name, "err", err)
		}
	}
	return fmt.Errorf("%w: job %s ended while this task ran", errJobEnded, job)
}
