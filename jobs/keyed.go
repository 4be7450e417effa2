package jobs

import (
	"context"
	"encoding"
	"encoding/json"
	"errors"
	"fmt"
	"iter"
	"reflect"
	"runtime/debug"
	"sync"
)

// KeyedJob is the byte-level interface of a keyed job: map tasks emit key/value pairs, which the
// cluster partitions by key, sorts and combines, and reduce tasks turn each key's values into
// output records written to blob storage. Most keyed jobs are a TypedKeyedJob adapted by Keyed.
//
// Contract, beyond Job's for Validate and Split:
//   - Map is a pure function of the shard: a second run emits the same pairs (in any order).
//   - Combine, if any, is associative and commutative: values of one key may be combined in any
//     grouping and order, on the map side and before Reduce, or not at all.
//   - Reduce is a pure function of the key and its values, whatever their order.
//
// Keys are compared as bytes: within an output partition, records are in encoded-key order.
//
// Optional: a method OutputText() (key, value bool) says which output columns are text, every
// record of them a JSON string. A job whose keys are text stores its outputs as TSV by default,
// a text column without its quotes (OutputTSV, OutputTextOf); Keyed's jobs have it.
type KeyedJob interface {
	// Type is the registered name.
	Type() string
	// Validate checks raw parameters without touching storage.
	Validate(params json.RawMessage) error
	// Split divides the job into map shards; it may read storage through env.
	Split(ctx context.Context, env Env, params json.RawMessage) ([][]byte, error)
	// Partitions is the number of reduce partitions the parameters ask for: 0 means the
	// cluster's default, otherwise 1 to MaxPartitions.
	Partitions(params json.RawMessage) (int, error)
	// Map runs one shard and calls emit for each key/value pair. emit copies what it keeps, so
	// Map may reuse the slices. An error from emit must be returned.
	Map(ctx context.Context, env Env, task Task, emit func(key, value []byte) error) error
	// Combiner returns the job's combine function, or nil if it has none. It appends the
	// combination of encoded values a and b to dst.
	Combiner() func(dst, a, b []byte) ([]byte, error)
	// Reduce turns one key's values into output records: emit(key, value) with both as JSON
	// texts. values yields each value once, valid until the next; Reduce may stop early.
	Reduce(ctx context.Context, key []byte, values iter.Seq[[]byte], emit func(key, value []byte) error) error
}

// Limits of a keyed job: reduce partitions, and an encoded key or value.
const (
	MaxPartitions = 10_000
	MaxKeyBytes   = 64 << 10
	MaxValueBytes = 16 << 20
)

// MapTasksPerPartition is how many map tasks' worth of runs a reduce partition gets when the
// partition count follows the input (PartitionsFor).
const MapTasksPerPartition = 4

// PartitionsFor is the partition count of a keyed job that does not choose one, given its map
// tasks (its input's size in shards) and the cluster's default (least): one partition for every
// MapTasksPerPartition map tasks, never fewer than least, at most MaxPartitions and leaving room
// for the map tasks within MaxShards. A reduce merges a run of every map task, so its input
// grows with the input divided by the partitions: a fixed count made a big input's reduce tasks
// long, few and exposed to every slow read. Dividing by a constant keeps a reduce's input near
// MapTasksPerPartition shards whatever the size, and the run reads (one a map task and
// partition) at S²/MapTasksPerPartition.
func PartitionsFor(mapTasks, least int) int {
	p := max(least, (mapTasks+MapTasksPerPartition-1)/MapTasksPerPartition, 1)
	return max(1, min(p, MaxPartitions, MaxShards-mapTasks))
}

// Reduce tasks: a reduce task reduces a contiguous group of partitions, and reads the group's
// bytes of each map run with one ranged read (a map run's partitions are back to back). A job
// of M map tasks and P partitions makes M × ReduceTasks(M, P) run reads, not M × P.
const (
	// MinReduceTasks is the fewest reduce tasks a job is given (when it has that many
	// partitions): below it, partitions are not grouped, and the reduce phase keeps its
	// parallelism on a small cluster.
	MinReduceTasks = 16
	// MapTasksPerReduceTask is how many map tasks' worth of input a reduce task gets at least:
	// one reduce task for every MapTasksPerReduceTask map tasks beyond MinReduceTasks.
	MapTasksPerReduceTask = 8
)

// PartitionsPerReduceTask is how many partitions one reduce task of a job of mapTasks map tasks
// and partitions partitions reduces: enough that there are at most max(MinReduceTasks,
// mapTasks/MapTasksPerReduceTask) reduce tasks, and at least 1. With PartitionsFor's count a
// partition has about MapTasksPerPartition map tasks' input, so a reduce task gets about
// MapTasksPerReduceTask, and the run reads grow as M²/MapTasksPerReduceTask instead of
// M²/MapTasksPerPartition; a job that asks for many partitions (1,000 × 1,000) reads M × M/8,
// not M × P.
func PartitionsPerReduceTask(mapTasks, partitions int) int {
	if partitions <= 1 {
		return 1
	}
	tasks := max(MinReduceTasks, (mapTasks+MapTasksPerReduceTask-1)/MapTasksPerReduceTask)
	return max(1, (partitions+tasks-1)/tasks)
}

// ErrBadRecord is matched by errors about a key or value that cannot be decoded: a corrupt or
// foreign intermediate.
var ErrBadRecord = errors.New("bad key or value")

// PartitionOf returns the reduce partition (0 to n-1) of an encoded key: FNV-1a (64 bits) of the
// key modulo n. It is the same in every process and version, so runs from any map task agree.
func PartitionOf(key []byte, n int) int {
	if n <= 1 {
		return 0
	}
	h := uint64(14695981039346656037)
	for _, b := range key {
		h ^= uint64(b)
		h *= 1099511628211
	}
	return int(h % uint64(n))
}

// Emitter receives a map task's key/value pairs. It copies them, so a Map may reuse its
// values. It is not safe for concurrent use. If the pairs cannot be kept (a full disk, a failed
// upload), Emitter ignores the rest and cancels Map's context; Map's task then fails.
type Emitter[K, V any] func(key K, value V)

// TypedKeyedJob is a keyed job written with Go types: P is its parameters, S a map shard, K a
// key, V a value and O an output record (one or more per key).
//
//   - Split divides the job into shards, as TypedJob's does.
//   - Map computes one shard and emits key/value pairs; it need not hold them in memory.
//   - Reduce receives each key once, with all its values (combined, if the job has Combine),
//     and emits the key's output records. Records are written as key<TAB>value lines (or JSON).
//
// Optional methods, found by interface assertion:
//
//   - Combine(a, b V) V (WithCombine): combines two values of one key. It must be associative
//     and commutative; with it, values are combined on the map side before they are written, and
//     Reduce usually sees one value per key.
//   - Partitions(p P) int (WithPartitions): the number of reduce partitions, 0 for the cluster's
//     default.
//   - P's Validate and Usage, and S's Validate, as for TypedJob.
//
// Keys and values are encoded for you. Strings, byte slices, integers, booleans and floats use a
// binary encoding whose byte order is the key order, so output partitions are sorted by key. A
// type with MarshalBinary and UnmarshalBinary (on its pointer) uses those; any other type is
// JSON. Such keys are sorted by their encoded bytes, which may not be the order you expect.
type TypedKeyedJob[P, S, K, V, O any] interface {
	Split(ctx context.Context, env Env, params P) ([]S, error)
	Map(ctx context.Context, env Env, shard S, emit Emitter[K, V]) error
	Reduce(ctx context.Context, key K, values iter.Seq[V], emit func(O)) error
}

// WithCombine is the optional map-side combiner of a TypedKeyedJob.
type WithCombine[V any] interface {
	Combine(a, b V) V
}

// WithPartitions is the optional method of a TypedKeyedJob that chooses its partition count.
type WithPartitions[P any] interface {
	Partitions(params P) int
}

// Keyed returns the KeyedJob of type name that runs job. It panics if P is not a struct type, as
// Typed does. A panic in Map, Combine or Reduce becomes that task's error.
func Keyed[P, S, K, V, O any](name string, job TypedKeyedJob[P, S, K, V, O]) KeyedJob {
	if t := reflect.TypeFor[P](); t.Kind() != reflect.Struct {
		panic(fmt.Sprintf("jobs.Keyed(%q): the parameters type %v is not a struct", name, t))
	}
	k := &keyed[P, S, K, V, O]{
		t:      &typed[P, S, struct{}]{name: name, shards: newCodec[S](MaxShardBytes)},
		name:   name,
		job:    job,
		keys:   newKVCodec[K](true),
		values: newKVCodec[V](false),
		out:    newKVCodec[O](false),
	}
	if c, ok := job.(WithCombine[V]); ok {
		k.combine = c.Combine
	}
	k.keyText, k.outText = isText[K](), isText[O]()
	return k
}

// isText: T's output JSON is always a string (its kind is string, without a marshaler of its
// own).
func isText[T any]() bool {
	t := reflect.TypeFor[T]()
	return t.Kind() == reflect.String && !implements(t, reflect.TypeFor[json.Marshaler]()) &&
		!implements(t, reflect.TypeFor[encoding.TextMarshaler]())
}

// OutputText says which output columns are text: a string key or output type's.
func (k *keyed[P, S, K, V, O]) OutputText() (key, value bool) { return k.keyText, k.outText }

type keyed[P, S, K, V, O any] struct {
	t       *typed[P, S, struct{}] // parameters and shards, as a typed job's
	name    string
	job     TypedKeyedJob[P, S, K, V, O]
	keys    kvCodec[K]
	values  kvCodec[V]
	out     kvCodec[O]
	combine func(a, b V) V
	// keyText, outText: K's and O's output JSON is always a string (OutputText).
	keyText, outText bool
	// reducers pools reduceStates.
	reducers sync.Pool
}

func (k *keyed[P, S, K, V, O]) Type() string { return k.name }

func (k *keyed[P, S, K, V, O]) Validate(raw json.RawMessage) error { return k.t.Validate(raw) }

func (k *keyed[P, S, K, V, O]) Split(ctx context.Context, env Env, raw json.RawMessage) ([][]byte, error) {
	p, err := k.t.params(raw)
	if err != nil {
		return nil, err
	}
	shards, err := k.job.Split(ctx, env, p)
	if err != nil {
		return nil, err
	}
	if len(shards) > MaxShards {
		return nil, fmt.Errorf("%s: split made %d shards, the limit is %d", k.name, len(shards), MaxShards)
	}
	out := make([][]byte, len(shards))
	for i, s := range shards {
		if out[i], err = k.t.shards.encode(s); err != nil {
			return nil, fmt.Errorf("%s: encode shard %d: %w", k.name, i, err)
		}
	}
	return out, nil
}

func (k *keyed[P, S, K, V, O]) Partitions(raw json.RawMessage) (int, error) {
	p, err := k.t.params(raw)
	if err != nil {
		return 0, err
	}
	wp, ok := k.job.(WithPartitions[P])
	if !ok {
		return 0, nil
	}
	n := wp.Partitions(p)
	if n < 0 || n > MaxPartitions {
		return 0, fmt.Errorf("%s: %d partitions; a job has 1 to %d, or 0 for the cluster's default", k.name, n, MaxPartitions)
	}
	return n, nil
}

// recovered turns a panic in job code into an error naming the job and the panic's stack.
func recovered(name, what string, err *error) {
	if r := recover(); r != nil {
		*err = fmt.Errorf("%s: panic in %s: %v\n%s", name, what, r, debug.Stack())
	}
}

func (k *keyed[P, S, K, V, O]) Map(ctx context.Context, env Env, task Task, emit func(key, value []byte) error) (err error) {
	defer recovered(k.name, "Map", &err)
	s, err := k.t.decodeShard(task.Shard)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancelCause(withTask(ctx, task))
	defer cancel(nil)
	var kb, vb []byte
	var emitErr error
	e := func(key K, value V) {
		if emitErr != nil {
			return
		}
		var err error
		if kb, err = k.keys.enc(kb[:0], key); err != nil {
			emitErr = fmt.Errorf("%s: encode key %v: %w", k.name, key, err)
		} else if vb, err = k.values.enc(vb[:0], value); err != nil {
			emitErr = fmt.Errorf("%s: encode value: %w", k.name, err)
		} else if err = emit(kb, vb); err != nil {
			emitErr = err
		}
		if emitErr != nil {
			cancel(emitErr)
		}
	}
	err = k.job.Map(ctx, env, s, e)
	if emitErr != nil {
		return emitErr
	}
	return err
}

func (k *keyed[P, S, K, V, O]) Combiner() func(dst, a, b []byte) ([]byte, error) {
	if k.combine == nil {
		return nil
	}
	return func(dst, a, b []byte) (_ []byte, err error) {
		defer recovered(k.name, "Combine", &err)
		va, err := k.values.dec(a)
		if err != nil {
			return dst, fmt.Errorf("%w: %s value: %v", ErrBadRecord, k.name, err)
		}
		vb, err := k.values.dec(b)
		if err != nil {
			return dst, fmt.Errorf("%w: %s value: %v", ErrBadRecord, k.name, err)
		}
		return k.values.enc(dst, k.combine(va, vb))
	}
}

func (k *keyed[P, S, K, V, O]) Reduce(ctx context.Context, key []byte, values iter.Seq[[]byte], emit func(key, value []byte) error) (err error) {
	defer recovered(k.name, "Reduce", &err)
	kv, err := k.keys.dec(key)
	if err != nil {
		return fmt.Errorf("%w: %s key %q: %v", ErrBadRecord, k.name, key, err)
	}
	st, _ := k.reducers.Get().(*reduceState[K, V, O])
	if st == nil {
		st = newReduceState(k.keys, k.values, k.out, k.name)
	}
	st.key, st.keyValue, st.values, st.emit = key, kv, values, emit
	st.keyText, st.err = st.keyText[:0], nil
	err = k.job.Reduce(ctx, kv, st.seq, st.out)
	if st.err != nil {
		err = st.err
	}
	st.key, st.values, st.emit = nil, nil, nil
	var zero K
	st.keyValue = zero
	k.reducers.Put(st)
	return err
}

// reduceState is one Reduce call's adapters, pooled so that a reduce costs no allocation per
// key beyond the decoded key.
type reduceState[K, V, O any] struct {
	k interface {
		reduceCodecs() (kvCodec[K], kvCodec[V], kvCodec[O], string)
	}
	key      []byte
	keyValue K
	values   iter.Seq[[]byte]
	emit     func(key, value []byte) error
	keyText  []byte
	outText  []byte
	err      error
	seq      iter.Seq[V]
	yield    func(V) bool
	onValue  func([]byte) bool
	out      func(O)
}

func newReduceState[K, V, O any](keys kvCodec[K], values kvCodec[V], outs kvCodec[O], name string) *reduceState[K, V, O] {
	st := &reduceState[K, V, O]{}
	// The values, decoded; a value that does not decode ends them and fails the call. Made
	// once, without range-over-func, so that a call allocates nothing.
	st.seq = func(yield func(V) bool) {
		if st.err != nil {
			return
		}
		st.yield = yield
		st.values(st.onValue)
		st.yield = nil
	}
	st.onValue = func(b []byte) bool {
		v, err := values.dec(b)
		if err != nil {
			st.err = fmt.Errorf("%w: %s value of key %q: %v", ErrBadRecord, name, st.key, err)
			return false
		}
		return st.yield(v)
	}
	// An output record, as JSON; the first error is kept and later records are dropped.
	st.out = func(o O) {
		if st.err != nil {
			return
		}
		var err error
		if len(st.keyText) == 0 {
			if st.keyText, err = keys.text(st.keyText[:0], st.keyValue); err != nil {
				st.err = fmt.Errorf("%s: key as JSON: %w", name, err)
				return
			}
		}
		if st.outText, err = outs.text(st.outText[:0], o); err != nil {
			st.err = fmt.Errorf("%s: output as JSON: %w", name, err)
		} else if err = st.emit(st.keyText, st.outText); err != nil {
			st.err = err
		}
	}
	return st
}

// EncodeKey encodes a key of a keyed job as Keyed does, for tests and tools.
func EncodeKey[K any](key K) ([]byte, error) { return newKVCodec[K](true).enc(nil, key) }

// DecodeKey decodes a key that EncodeKey encoded.
func DecodeKey[K any](data []byte) (K, error) { return newKVCodec[K](true).dec(data) }

// EncodeValue encodes a value of a keyed job as Keyed does, for tests and tools.
func EncodeValue[V any](v V) ([]byte, error) { return newKVCodec[V](false).enc(nil, v) }

// DecodeValue decodes a value that EncodeValue encoded.
func DecodeValue[V any](data []byte) (V, error) { return newKVCodec[V](false).dec(data) }
