package shuffle

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"sync/atomic"
	"testing"

	"github.com/mapagg/mapagg/jobs"
)

// mapConcat runs every map task of job into one concatenated blob each (as a worker does) and
// returns the blobs and their partition offsets.
func mapConcat(t *testing.T, job jobs.KeyedJob, params string, mcfg MapConfig) ([][]byte, [][]int64) {
	t.Helper()
	ctx := context.Background()
	shards, err := job.Split(ctx, nil, []byte(params))
	if err != nil {
		t.Fatal(err)
	}
	var blobs [][]byte
	var offs [][]int64
	for i, s := range shards {
		var buf bytes.Buffer
		cs := NewConcatSink(&buf)
		if _, err := Map(ctx, job, nil, jobs.Task{JobID: "job", Index: i, Attempt: 1, Shard: s}, cs.Sink(), mcfg); err != nil {
			t.Fatalf("map shard %d: %v", i, err)
		}
		blobs, offs = append(blobs, buf.Bytes()), append(offs, cs.Offsets)
	}
	return blobs, offs
}

// A reduce task of a group of partitions reads each map run once (one open a run), and its
// outputs equal the sequential computation's: with and without intermediate merges (more runs
// than the budget reads at once), for groups of every size, the last one short.
func TestGroupRuns_OneReadAMapRun(t *testing.T) {
	p := randParams{Shards: 40, N: 3000, Keys: 20000, Partitions: 7}
	params := fmt.Sprintf(`{"shards":%d,"n":%d,"keys":%d,"partitions":%d}`, p.Shards, p.N, p.Keys, p.Partitions)
	job := jobs.Keyed("randsum", randCombine{})
	blobs, offs := mapConcat(t, job, params, MapConfig{Partitions: p.Partitions, MemoryBytes: MinMemoryBytes, BlockBytes: 4 << 10, TempDir: t.TempDir()})
	want := expected(p)
	for _, size := range []int{1, 3, 7} {
		for _, mem := range []int64{MinMemoryBytes, 64 << 20} {
			t.Run(fmt.Sprintf("group %d memory %d", size, mem), func(t *testing.T) {
				var opens atomic.Int64
				got := map[int]string{}
				merges, tasks := 0, 0
				for first := 0; first < p.Partitions; first += size {
					tasks++
					n := min(size, p.Partitions-first)
					streams := make([]GroupStream, len(blobs))
					for i, b := range blobs {
						o := offs[i]
						lengths := make([]int64, n)
						for j := range n {
							lengths[j] = o[first+j+1] - o[first+j]
						}
						section := b[o[first]:o[first+n]]
						streams[i] = GroupStream{Lengths: lengths, Open: func(context.Context) (io.ReadCloser, error) {
							opens.Add(1)
							return io.NopCloser(bytes.NewReader(section)), nil
						}}
					}
					g, err := NewGroupRuns(context.Background(), streams)
					if err != nil {
						t.Fatal(err)
					}
					for j := range n {
						var buf bytes.Buffer
						out, _ := NewOutputWriter(&buf, FormatTSV)
						cfg := ReduceConfig{Partition: first + j, MemoryBytes: mem, TempDir: t.TempDir()}
						stats, err := Reduce(context.Background(), job, g.Runs(j), out, cfg)
						if err != nil {
							t.Fatalf("partition %d: %v", first+j, err)
						}
						if stats.PeakMemory > mem {
							t.Errorf("peak memory %d, budget %d", stats.PeakMemory, mem)
						}
						merges += stats.Merges
						got[first+j] = buf.String()
					}
					_ = g.Close()
				}
				compareOutputs(t, got, want)
				if n := opens.Load(); n != int64(len(blobs)*tasks) {
					t.Errorf("%d opens, want %d (a map run a task)", n, len(blobs)*tasks)
				}
				if mem == MinMemoryBytes && merges == 0 {
					t.Error("the small budget forced no intermediate merge")
				}
			})
		}
	}
}

// A stream that ends inside a run is a truncated run (ErrCorruptRun), and the next partition of
// the group cannot be read out of order.
func TestGroupRuns_Truncated(t *testing.T) {
	p := randParams{Shards: 2, N: 500, Keys: 300, Partitions: 3}
	params := fmt.Sprintf(`{"shards":%d,"n":%d,"keys":%d,"partitions":%d}`, p.Shards, p.N, p.Keys, p.Partitions)
	job := jobs.Keyed("randsum", randCombine{})
	blobs, offs := mapConcat(t, job, params, MapConfig{Partitions: p.Partitions, TempDir: t.TempDir()})
	streams := make([]GroupStream, len(blobs))
	for i, b := range blobs {
		o := offs[i]
		short := b[:o[2]-5] // partition 1's run loses its last bytes
		streams[i] = GroupStream{Lengths: []int64{o[1], o[2] - o[1], o[3] - o[2]}, Open: func(context.Context) (io.ReadCloser, error) {
			return io.NopCloser(bytes.NewReader(short)), nil
		}}
	}
	g, err := NewGroupRuns(context.Background(), streams)
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	run := func(j int) error {
		out, _ := NewOutputWriter(io.Discard, FormatTSV)
		_, err := Reduce(context.Background(), job, g.Runs(j), out, ReduceConfig{Partition: j, TempDir: t.TempDir()})
		return err
	}
	if err := run(0); err != nil {
		t.Fatalf("partition 0: %v", err)
	}
	if err := run(1); !errors.Is(err, ErrCorruptRun) {
		t.Fatalf("a truncated run: %v, want ErrCorruptRun", err)
	}
	if err := run(0); err == nil {
		t.Fatal("a partition read again")
	}
	if _, err := NewGroupRuns(context.Background(), []GroupStream{{Lengths: []int64{1, 0}}}); err == nil {
		t.Error("an empty run accepted")
	}
	if _, err := NewGroupRuns(context.Background(), []GroupStream{{Lengths: []int64{1}}, {Lengths: []int64{1, 2}}}); err == nil {
		t.Error("streams of different groups accepted")
	}
}
