package protocol

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"

	"github.com/mapagg/mapagg/jobs"
)

// A keyed job's tasks travel as ordinary shards of its type (same subjects, consumers, plan
// pages, fencing and MACs), in messages of KindKeyed. The shard bytes are a KeyedTask: a map
// task wraps the job's own shard; a reduce task names its partition. The plan of a keyed job of
// S map shards and P partitions is S map tasks, then P reduce tasks; the leader dispatches the
// reduce tasks only once every map task is committed and the map manifest is stored.
//
//	map     'M' uvarint(P) shard…
//	reduce  'R' uvarint(P) uvarint(p) uvarint(S) [uvarint(n)]
//
// A reduce task reduces n partitions from p (n absent: 1), a contiguous group: a map run's
// partitions are back to back, so the task reads the group's bytes of each map run with one
// ranged read (docs/design.md, "Reduce tasks of several partitions").
//
// Earlier releases put 0xFF 'K' before the task, so that a worker could tell a keyed task
// from a shard; the kind now says it. Their tasks (in stored plans and in messages in flight)
// are still read, never written (decodeLegacyKeyedTask).

// Keyed task kinds.
const (
	TaskMap    = 'M'
	TaskReduce = 'R'
)

// Phases of a keyed job, as status shows them.
const (
	PhaseMap    = "map"
	PhaseReduce = "reduce"
)

// KeyedTask is one task of a keyed job.
type KeyedTask struct {
	Task       byte // TaskMap or TaskReduce
	Partitions int  // P: the job's reduce partitions
	Partition  int  // reduce: the first partition it reduces
	Count      int  // reduce: how many partitions from Partition (0 or 1: one)
	MapShards  int  // reduce: S, the map tasks whose runs it merges
	Shard      []byte
	// Output is how a reduce task stores its outputs: the format ("" is JSON lines, as
	// earlier releases wrote) and, for TSV, the text columns.
	Output             string
	KeyText, ValueText bool
}

// Bits of a reduce task's output byte (written after its count, when not JSON lines).
const (
	outTSV = 1 << iota
	outZstd
	outKeyText
	outValueText
	outJSONL // JSON lines, compressed (with outZstd)
	outBits  = outTSV | outZstd | outKeyText | outValueText | outJSONL
)

// outputByte is t's output byte: 0 for JSON lines.
func (t KeyedTask) outputByte() byte {
	var b byte
	base, zst := strings.CutSuffix(t.Output, jobs.OutputZstd)
	if base == jobs.OutputTSV {
		b |= outTSV
		if t.KeyText {
			b |= outKeyText
		}
		if t.ValueText {
			b |= outValueText
		}
	}
	if zst {
		b |= outZstd
		if base == jobs.OutputJSONL {
			b |= outJSONL
		}
	}
	return b
}

// setOutput sets t's output from its output byte; false if the byte is not one outputByte
// writes.
func (t *KeyedTask) setOutput(b byte) bool {
	tsv, zst, jsonl := b&outTSV != 0, b&outZstd != 0, b&outJSONL != 0
	if b == 0 || b&^outBits != 0 || tsv == jsonl || jsonl && !zst || !tsv && b&(outKeyText|outValueText) != 0 {
		return false
	}
	t.Output = jobs.OutputJSONL
	if tsv {
		t.Output, t.KeyText, t.ValueText = jobs.OutputTSV, b&outKeyText != 0, b&outValueText != 0
	}
	if zst {
		t.Output += jobs.OutputZstd
	}
	return true
}

// MaxKeyedShardBytes bounds a keyed job's own shard: the task's header takes the rest.
const MaxKeyedShardBytes = jobs.MaxShardBytes - 16

// EncodeKeyedTask returns the shard bytes of t.
func EncodeKeyedTask(t KeyedTask) []byte {
	b := []byte{t.Task}
	b = binary.AppendUvarint(b, uint64(t.Partitions))
	if t.Task == TaskReduce {
		b = binary.AppendUvarint(b, uint64(t.Partition))
		b = binary.AppendUvarint(b, uint64(t.MapShards))
		if out := t.outputByte(); out != 0 {
			b = binary.AppendUvarint(b, uint64(max(t.Count, 1)))
			b = append(b, out)
		} else if t.Count > 1 {
			b = binary.AppendUvarint(b, uint64(t.Count))
		}
		return b
	}
	return append(b, t.Shard...)
}

// DecodeKeyedTask parses the shard bytes of a keyed job's task. Shard aliases data.
func DecodeKeyedTask(data []byte) (KeyedTask, error) {
	if bytes.HasPrefix(data, legacyKeyedMagic) {
		return decodeLegacyKeyedTask(data)
	}
	var t KeyedTask
	if len(data) < 1 {
		return t, fmt.Errorf("%w: keyed task: empty", ErrBadMessage)
	}
	t.Task = data[0]
	r := reader{b: data[1:]}
	t.Partitions = int(r.uvarint(jobs.MaxPartitions))
	switch t.Task {
	case TaskMap:
		if r.err == nil {
			t.Shard = r.b
		}
	case TaskReduce:
		t.Partition = int(r.uvarint(jobs.MaxPartitions))
		t.MapShards = int(r.uvarint(jobs.MaxShards))
		t.Count = 1
		if r.err == nil && len(r.b) > 0 {
			t.Count = int(r.uvarint(jobs.MaxPartitions))
			if r.err == nil && len(r.b) > 0 {
				if !t.setOutput(r.b[0]) {
					return t, fmt.Errorf("%w: keyed task: output byte %#x", ErrBadMessage, r.b[0])
				}
				r.b = r.b[1:]
				if t.Count < 1 {
					return t, fmt.Errorf("%w: keyed task: a reduce task of %d partitions", ErrBadMessage, t.Count)
				}
			} else if r.err == nil && t.Count < 2 {
				return t, fmt.Errorf("%w: keyed task: a reduce task of %d partitions written with a count", ErrBadMessage, t.Count)
			}
		}
		if err := r.end(); err != nil {
			return t, fmt.Errorf("%w: keyed task: %v", ErrBadMessage, err)
		}
	default:
		return t, fmt.Errorf("%w: keyed task: kind %q", ErrBadMessage, t.Task)
	}
	if r.err != nil {
		return t, fmt.Errorf("%w: keyed task: %v", ErrBadMessage, r.err)
	}
	if t.Partitions < 1 || t.Task == TaskReduce && t.Partition+t.Count > t.Partitions {
		return t, fmt.Errorf("%w: keyed task: partitions %d to %d of %d", ErrBadMessage, t.Partition, t.Partition+t.Count-1, t.Partitions)
	}
	return t, nil
}

// legacyKeyedMagic started a keyed task in earlier releases.
var legacyKeyedMagic = []byte{0xFF, 'K'}

// decodeLegacyKeyedTask parses a task of an earlier release: the magic, then the task as now.
func decodeLegacyKeyedTask(data []byte) (KeyedTask, error) {
	rest := data[len(legacyKeyedMagic):]
	if bytes.HasPrefix(rest, legacyKeyedMagic) {
		return KeyedTask{}, fmt.Errorf("%w: keyed task: magic twice", ErrBadMessage)
	}
	return DecodeKeyedTask(rest)
}

// legacyShardKind is the kind of a shard in a message of an earlier release, which said none:
// keyed if its bytes start with the magic of its keyed tasks (job authors were told never to
// make such shards), aggregate otherwise.
func legacyShardKind(shard []byte) Kind {
	if bytes.HasPrefix(shard, legacyKeyedMagic) {
		return KindKeyed
	}
	return KindAggregate
}

// MapCommit is a map task's result (its partial): the blob it wrote and where each partition's
// run starts in it. Offsets has P+1 entries, from 0 to the blob's size, never decreasing.
type MapCommit struct {
	Blob    string  `json:"blob"`
	Offsets []int64 `json:"offsets"`
	Records int64   `json:"records"`
}

// ReduceCommit is a reduce task's result: its output blob (an OutputPartition).
type ReduceCommit = OutputPartition

// DecodeMapCommit parses and checks the result of map task shard of job id with P partitions.
func DecodeMapCommit(id string, shard, partitions int, data []byte) (*MapCommit, error) {
	var c MapCommit
	if err := json.Unmarshal(data, &c); err != nil {
		return nil, fmt.Errorf("%w: map result: %v", ErrBadMessage, err)
	}
	if s, _, err := ParseMapRunBlob(id, c.Blob); err != nil || s != shard {
		return nil, fmt.Errorf("%w: map result of shard %d names blob %q", ErrBadMessage, shard, Clip(c.Blob, 128))
	}
	if err := checkOffsets(c.Offsets, partitions); err != nil {
		return nil, fmt.Errorf("%w: map result of shard %d: %v", ErrBadMessage, shard, err)
	}
	if c.Records < 0 {
		return nil, fmt.Errorf("%w: map result of shard %d: %d records", ErrBadMessage, shard, c.Records)
	}
	return &c, nil
}

func checkOffsets(off []int64, partitions int) error {
	if len(off) != partitions+1 || off[0] != 0 {
		return fmt.Errorf("%d offsets starting at %v, want %d from 0", len(off), off[:min(len(off), 1)], partitions+1)
	}
	for i := 1; i < len(off); i++ {
		if off[i] < off[i-1] {
			return fmt.Errorf("offset %d decreases", i)
		}
	}
	return nil
}

// DecodeReduceCommit parses and checks the result of reduce task partition of job id.
func DecodeReduceCommit(id string, partition int, data []byte) (*ReduceCommit, error) {
	var c ReduceCommit
	if err := json.Unmarshal(data, &c); err != nil {
		return nil, fmt.Errorf("%w: reduce result: %v", ErrBadMessage, err)
	}
	if p, _, err := ParseOutputBlob(id, c.Blob); err != nil || p != partition || c.Partition != partition {
		return nil, fmt.Errorf("%w: reduce result of partition %d names blob %q (partition %d)", ErrBadMessage, partition, Clip(c.Blob, 128), c.Partition)
	}
	if c.Records < 0 || c.Bytes < 0 {
		return nil, fmt.Errorf("%w: reduce result of partition %d: negative counts", ErrBadMessage, partition)
	}
	return &c, nil
}

// ReduceGroupCommit is the result of a reduce task of several partitions: an output blob a
// partition, in partition order. (A task of one partition sends its ReduceCommit alone.)
type ReduceGroupCommit struct {
	Outputs []OutputPartition `json:"outputs"`
}

// DecodeReduceCommits parses and checks the result of the reduce task of job id that reduces
// count partitions from first: a ReduceCommit when count is 1, a ReduceGroupCommit otherwise.
func DecodeReduceCommits(id string, first, count int, data []byte) ([]*ReduceCommit, error) {
	if count <= 1 {
		c, err := DecodeReduceCommit(id, first, data)
		if err != nil {
			return nil, err
		}
		return []*ReduceCommit{c}, nil
	}
	var g ReduceGroupCommit
	if err := json.Unmarshal(data, &g); err != nil {
		return nil, fmt.Errorf("%w: reduce result: %v", ErrBadMessage, err)
	}
	if len(g.Outputs) != count {
		return nil, fmt.Errorf("%w: reduce result of partitions %d to %d: %d outputs", ErrBadMessage, first, first+count-1, len(g.Outputs))
	}
	out := make([]*ReduceCommit, count)
	for i := range g.Outputs {
		c := &g.Outputs[i]
		p := first + i
		if q, _, err := ParseOutputBlob(id, c.Blob); err != nil || q != p || c.Partition != p {
			return nil, fmt.Errorf("%w: reduce result of partition %d names blob %q (partition %d)", ErrBadMessage, p, Clip(c.Blob, 128), c.Partition)
		}
		if c.Records < 0 || c.Bytes < 0 {
			return nil, fmt.Errorf("%w: reduce result of partition %d: negative counts", ErrBadMessage, p)
		}
		out[i] = c
	}
	return out, nil
}

// RunLost is a reduce task's result when an input its map manifest names (a map run, or the
// manifest itself) is gone or shorter than committed: a storage rollback. It is not a commit;
// the leader checks the runs, runs lost map tasks again, and then the reduce task. Partition is
// the task's first partition.
type RunLost struct {
	Partition int    `json:"partition"`
	Lost      string `json:"lost"`
}

// DecodeRunLost parses a result of reduce task partition of job id as a RunLost; ok is false
// when data is not one (a commit, say). One that names a blob outside the job's inputs is an
// error.
func DecodeRunLost(id string, partition int, data []byte) (l *RunLost, ok bool, err error) {
	var c RunLost
	if json.Unmarshal(data, &c) != nil || c.Lost == "" {
		return nil, false, nil
	}
	_, _, runErr := ParseMapRunBlob(id, c.Lost)
	if c.Partition != partition || runErr != nil && c.Lost != MapManifestBlob(id) {
		return nil, true, fmt.Errorf("%w: reduce task %d reports blob %q (partition %d) lost: not one of its inputs", ErrBadMessage, partition, Clip(c.Lost, 128), c.Partition)
	}
	return &c, true, nil
}

// ParseMapRunBlob returns the shard and attempt of a name made by MapRunBlob.
func ParseMapRunBlob(id, name string) (shard, attempt int, err error) {
	rest, ok := strings.CutPrefix(name, MapPrefix(id))
	if !ok {
		return 0, 0, fmt.Errorf("blob %q is not under %s", Clip(name, 128), MapPrefix(id))
	}
	s, a, ok := strings.Cut(rest, ".")
	if shard, err = strconv.Atoi(s); err == nil && ok {
		attempt, err = strconv.Atoi(a)
	}
	if err != nil || !ok || shard < 0 || attempt < 1 || MapRunBlob(id, shard, attempt) != name {
		return 0, 0, fmt.Errorf("blob %q is not a map run's name", Clip(name, 128))
	}
	return shard, attempt, nil
}

// outputExtensions are the stored formats as they end a name, the longest first ("tsv.zst"
// before "tsv").
var outputExtensions = []string{jobs.OutputTSV + jobs.OutputZstd, jobs.OutputJSONL + jobs.OutputZstd, jobs.OutputTSV, jobs.OutputJSONL}

// ParseOutputBlob returns the partition and attempt of a name made by OutputBlobIn.
func ParseOutputBlob(id, name string) (partition, attempt int, err error) {
	rest, ok := strings.CutPrefix(name, OutputPrefix(id)+"part-")
	format, ok2 := "", false
	for _, f := range outputExtensions {
		if rest, ok2 = strings.CutSuffix(rest, "."+f); ok2 {
			format = f
			break
		}
	}
	if !ok || !ok2 {
		return 0, 0, fmt.Errorf("blob %q is not an output's name", Clip(name, 128))
	}
	p, a, ok := strings.Cut(rest, ".")
	if partition, err = strconv.Atoi(p); err == nil && ok {
		attempt, err = strconv.Atoi(a)
	}
	if err != nil || !ok || partition < 0 || attempt < 1 || OutputBlobIn(id, partition, attempt, format) != name {
		return 0, 0, fmt.Errorf("blob %q is not an output's name", Clip(name, 128))
	}
	return partition, attempt, nil
}

// MapManifest is <job>/map-manifest: the committed map attempt of every shard, in shard order.
// The leader stores it (from a stored checkpoint that commits every map task) before it
// dispatches the reduce tasks, which read their partition's range of each blob.
type MapManifest struct {
	Job        string      `json:"job"`
	Partitions int         `json:"partitions"`
	Maps       []MapCommit `json:"maps"`
}

// DecodeMapManifest parses and checks the map manifest of job id: S maps, P partitions.
func DecodeMapManifest(id string, shards, partitions int, data []byte) (*MapManifest, error) {
	var m MapManifest
	if err := json.Unmarshal(data, &m); err != nil {
		return nil, fmt.Errorf("map manifest of job %s: %w", id, err)
	}
	if m.Job != id || m.Partitions != partitions || len(m.Maps) != shards {
		return nil, fmt.Errorf("map manifest of job %s: job %q, %d partitions, %d maps; want %d and %d",
			id, Clip(m.Job, 64), m.Partitions, len(m.Maps), partitions, shards)
	}
	for i, c := range m.Maps {
		if s, _, err := ParseMapRunBlob(id, c.Blob); err != nil || s != i {
			return nil, fmt.Errorf("map manifest of job %s: entry %d names %q", id, i, Clip(c.Blob, 128))
		}
		if err := checkOffsets(c.Offsets, partitions); err != nil {
			return nil, fmt.Errorf("map manifest of job %s: entry %d: %v", id, i, err)
		}
	}
	return &m, nil
}
