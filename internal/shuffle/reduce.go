package shuffle

import (
	"bufio"
	"cmp"
	"context"
	"fmt"
	"io"
	"iter"
	"os"

	"github.com/mapagg/mapagg/jobs"
)

// ReduceConfig configures a reduce task.
type ReduceConfig struct {
	// Partition is the partition reduced; every run's header must name it.
	Partition int
	// MemoryBytes bounds the merge's buffers (bytes): it sets how many runs are read at once.
	// Default DefaultMemoryBytes; at least MinMemoryBytes.
	MemoryBytes int64
	// BlockBytes is the block size of intermediate runs (bytes). Default DefaultBlockBytes.
	BlockBytes int
	// TempDir holds intermediate merges. Default os.TempDir().
	TempDir string
	// Job is the job's id, for a job that reduces in sessions (jobs.PartitionReducer).
	Job string
}

// WithDefaults returns c with every zero field set to its default.
func (c ReduceConfig) WithDefaults() ReduceConfig {
	c.MemoryBytes = cmp.Or(c.MemoryBytes, DefaultMemoryBytes)
	c.BlockBytes = cmp.Or(c.BlockBytes, DefaultBlockBytes)
	c.TempDir = cmp.Or(c.TempDir, os.TempDir())
	return c
}

// Validate refuses impossible settings.
func (c ReduceConfig) Validate() error {
	switch {
	case c.Partition < 0 || c.Partition >= jobs.MaxPartitions:
		return fmt.Errorf("shuffle: invalid ReduceConfig: Partition %d, want 0 to %d", c.Partition, jobs.MaxPartitions-1)
	case c.MemoryBytes < MinMemoryBytes || c.MemoryBytes > maxMemoryBytes:
		return fmt.Errorf("shuffle: invalid ReduceConfig: MemoryBytes %d, want %d to %d", c.MemoryBytes, MinMemoryBytes, maxMemoryBytes)
	case c.BlockBytes < 1 || c.BlockBytes > 8<<20:
		return fmt.Errorf("shuffle: invalid ReduceConfig: BlockBytes %d, want 1 to 8 MiB", c.BlockBytes)
	}
	return nil
}

// ReduceStats counts a reduce task's work, for metrics.
type ReduceStats struct {
	Runs          int   // runs given
	RunsMerged    int   // runs read by merges, intermediate ones included
	Merges        int   // intermediate merges to local disk (fan-in exceeded)
	SpilledBytes  int64 // bytes written by intermediate merges
	InputBytes    int64 // bytes of the given runs read
	Records       int64 // records read from the given runs
	Keys          int64 // keys reduced
	OutputRecords int64 // records written
	OutputBytes   int64 // bytes written
	PeakMemory    int64 // the most merge buffer memory held at once (bytes); at most MemoryBytes
}

// Opener opens one run for reading: a blob download, a local file.
type Opener func(ctx context.Context) (io.ReadCloser, error)

// Reduce merges the sorted runs of one partition with a k-way merge, combines equal keys (if the
// job has a combiner), calls job.Reduce once per key in key order and writes its records to out.
// It reads at most a budget's worth of runs at once; beyond that it first merges groups of runs
// into local files. Memory does not grow with keys, values or runs.
func Reduce(ctx context.Context, job jobs.KeyedJob, runs []Opener, out OutputWriter, cfg ReduceConfig) (stats ReduceStats, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("%s: panic in reduce: %v", job.Type(), r)
		}
	}()
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return stats, err
	}
	r := &reducer{cfg: cfg, combine: job.Combiner(), temp: tempFiles{dir: cfg.TempDir}}
	defer r.temp.remove(nil)
	stats.Runs = len(runs)
	srcs := make([]source, len(runs))
	for i, o := range runs {
		srcs[i] = source{open: o, input: true}
	}
	// The given runs have the map side's blocks (DefaultBlockBytes unless set otherwise there).
	fan := fanIn(cfg.MemoryBytes-spillWriteBuffer, max(cfg.BlockBytes, DefaultBlockBytes))
	for len(srcs) > fan {
		if srcs, err = r.mergeGroup(ctx, srcs, fan); err != nil {
			return r.stats(stats), err
		}
	}
	cs, closeAll, err := r.open(ctx, srcs)
	if err != nil {
		return r.stats(stats), err
	}
	defer closeAll()
	m := newMerger(cs)
	var acc, scratch []byte
	emit := out.WriteRecord
	one := func(yield func([]byte) bool) { yield(acc) } // the combined value
	reduce, finish, err := sessionOf(ctx, job, cfg)
	if err != nil {
		return r.stats(stats), err
	}
	defer func() { _ = finish(nil) }() // abandons the session unless it was finished
	for m.nextKey() {
		if r.keys%4096 == 0 {
			if err := ctx.Err(); err != nil {
				return r.stats(stats), err
			}
		}
		r.keys++
		values := m.values()
		if r.combine != nil {
			// Pre-merge: Reduce sees one combined value.
			if acc, scratch, err = m.combined(r.combine, acc, scratch); err != nil {
				return r.stats(stats), err
			}
			if m.err != nil {
				break
			}
			values = one
		}
		if err := reduce(ctx, m.key, values, emit); err != nil {
			if m.err != nil {
				err = m.err
			}
			return r.stats(stats), fmt.Errorf("reduce partition %d: %w", cfg.Partition, err)
		}
	}
	if m.err != nil {
		return r.stats(stats), m.err
	}
	r.mem = max(r.mem, readersMemory(cs)+int64(cap(acc)+cap(scratch)+cap(m.key)))
	for _, c := range cs {
		r.note(c)
	}
	if err := finish(emit); err != nil {
		return r.stats(stats), fmt.Errorf("reduce partition %d: %w", cfg.Partition, err)
	}
	if err := out.Flush(); err != nil {
		return r.stats(stats), err
	}
	stats = r.stats(stats)
	stats.OutputRecords, stats.OutputBytes = out.Records(), out.Bytes()
	return stats, nil
}

// source is a run to merge: one of the given runs, or an intermediate local file.
type source struct {
	open  Opener
	input bool
	file  *os.File
}

type reducer struct {
	cfg     ReduceConfig
	combine func(dst, a, b []byte) ([]byte, error)
	temp    tempFiles
	merged  int
	merges  int
	spilled int64
	inBytes int64
	records int64
	keys    int64
	mem     int64
}

func (r *reducer) stats(s ReduceStats) ReduceStats {
	s.RunsMerged, s.Merges, s.SpilledBytes = r.merged, r.merges, r.spilled
	s.InputBytes, s.Records, s.Keys, s.PeakMemory = r.inBytes, r.records, r.keys, r.mem
	return s
}

// inputCursor is a run reader that counts what it reads of a given run.
type inputCursor struct {
	*RunReader
	input bool
}

// bufferBytes is the reader's memory, its prefetcher's included (a given run's).
func (c inputCursor) bufferBytes() int {
	if c.input {
		return c.RunReader.bufferBytes() + prefetchBytes
	}
	return c.RunReader.bufferBytes()
}

// note adds what a finished cursor read to the counters.
func (r *reducer) note(c cursor) {
	ic := c.(inputCursor)
	if ic.input {
		r.inBytes += ic.Bytes()
		r.records += int64(ic.Records())
	}
}

// open opens srcs and checks their partition; closeAll closes them.
func (r *reducer) open(ctx context.Context, srcs []source) (cs []cursor, closeAll func(), err error) {
	var closers []io.Closer
	closeAll = func() {
		for _, c := range closers {
			_ = c.Close()
		}
	}
	// The given runs are opened and read ahead all at once (prefetch), each in a goroutine.
	readers := make([]io.ReadCloser, len(srcs))
	for i, s := range srcs {
		if s.input {
			p := prefetch(ctx, s.open)
			readers[i] = p
			closers = append(closers, p)
		}
	}
	for i, s := range srcs {
		rc := readers[i]
		if rc == nil {
			var err error
			if rc, err = s.open(ctx); err != nil {
				closeAll()
				return nil, nil, fmt.Errorf("open run %d of partition %d: %w", i, r.cfg.Partition, err)
			}
			closers = append(closers, rc)
		}
		rr, err := NewRunReader(rc)
		if err == nil && rr.Partition() != r.cfg.Partition {
			err = corrupt("a run of partition %d given to the reduce of partition %d", rr.Partition(), r.cfg.Partition)
		}
		if err != nil {
			closeAll()
			return nil, nil, fmt.Errorf("run %d of partition %d: %w", i, r.cfg.Partition, err)
		}
		cs = append(cs, inputCursor{RunReader: rr, input: s.input})
	}
	r.merged += len(cs)
	return cs, closeAll, nil
}

// mergeGroup merges the first fan sources into one local run and returns the new list.
func (r *reducer) mergeGroup(ctx context.Context, srcs []source, fan int) ([]source, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	group := srcs[:fan]
	cs, closeAll, err := r.open(ctx, group)
	if err != nil {
		return nil, err
	}
	defer closeAll()
	f, err := r.temp.create()
	if err != nil {
		return nil, err
	}
	bw := bufio.NewWriterSize(f, spillWriteBuffer)
	rw, err := NewRunWriter(bw, r.cfg.Partition, r.cfg.BlockBytes)
	if err != nil {
		return nil, err
	}
	if _, err := combineTo(ctx, cs, r.combine, rw.Append); err != nil {
		return nil, err
	}
	if err := rw.Close(); err != nil {
		return nil, err
	}
	if err := bw.Flush(); err != nil {
		return nil, fmt.Errorf("write intermediate run: %w", err)
	}
	r.mem = max(r.mem, readersMemory(cs)+spillWriteBuffer+int64(rw.bufferBytes()))
	for _, c := range cs {
		r.note(c)
	}
	for _, s := range group {
		if s.file != nil {
			r.temp.remove(s.file)
		}
	}
	r.merges++
	r.spilled += rw.Bytes()
	size := rw.Bytes()
	local := source{file: f, open: func(context.Context) (io.ReadCloser, error) {
		return io.NopCloser(io.NewSectionReader(f, 0, size)), nil
	}}
	return append(append([]source{}, srcs[fan:]...), local), nil
}

// sessionOf returns the reduce call of job for one partition, and the call that ends it: with an
// emit, it emits the last records; with nil, it abandons the session. A job without sessions
// (jobs.PartitionReducer) reduces each key by itself and finish does nothing.
func sessionOf(ctx context.Context, job jobs.KeyedJob, cfg ReduceConfig) (
	reduce func(ctx context.Context, key []byte, values iter.Seq[[]byte], emit func(key, value []byte) error) error,
	finish func(emit func(key, value []byte) error) error, err error) {
	pr, ok := job.(jobs.PartitionReducer)
	if !ok {
		return job.Reduce, func(func(key, value []byte) error) error { return nil }, nil
	}
	s, err := pr.ReducePartition(ctx, jobs.ReduceTask{JobID: cfg.Job, Partition: cfg.Partition})
	if err != nil {
		return nil, nil, fmt.Errorf("reduce partition %d: %w", cfg.Partition, err)
	}
	done := false
	return s.Reduce, func(emit func(key, value []byte) error) error {
		if done {
			return nil
		}
		done = true
		return s.Close(ctx, emit)
	}, nil
}
