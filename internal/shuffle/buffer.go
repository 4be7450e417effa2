package shuffle

import (
	"bytes"
	"cmp"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"os"
	"sync"

	"github.com/mapagg/mapagg/jobs"
)

// MapConfig configures a map task's buffer.
type MapConfig struct {
	// Partitions is the number of reduce partitions, 1 to jobs.MaxPartitions. Required.
	Partitions int
	// MemoryBytes bounds the buffered pairs, and later the merge buffers (bytes). Default
	// DefaultMemoryBytes; at least MinMemoryBytes.
	MemoryBytes int64
	// BlockBytes is the target block size of the runs written (bytes). Default DefaultBlockBytes.
	BlockBytes int
	// TempDir holds spill files. Default os.TempDir().
	TempDir string
}

// Memory budgets of a map buffer or a reduce merge.
const (
	DefaultMemoryBytes = 64 << 20
	MinMemoryBytes     = 512 << 10
	maxMemoryBytes     = 3 << 30 // arena offsets are 32 bits
)

// WithDefaults returns c with every zero field set to its default.
func (c MapConfig) WithDefaults() MapConfig {
	c.MemoryBytes = cmp.Or(c.MemoryBytes, DefaultMemoryBytes)
	c.BlockBytes = cmp.Or(c.BlockBytes, DefaultBlockBytes)
	c.TempDir = cmp.Or(c.TempDir, os.TempDir())
	return c
}

// Validate refuses impossible settings.
func (c MapConfig) Validate() error {
	switch {
	case c.Partitions < 1 || c.Partitions > jobs.MaxPartitions:
		return fmt.Errorf("shuffle: invalid MapConfig: Partitions %d, want 1 to %d", c.Partitions, jobs.MaxPartitions)
	case c.MemoryBytes < MinMemoryBytes || c.MemoryBytes > maxMemoryBytes:
		return fmt.Errorf("shuffle: invalid MapConfig: MemoryBytes %d, want %d to %d", c.MemoryBytes, MinMemoryBytes, maxMemoryBytes)
	case c.BlockBytes < 1 || c.BlockBytes > 8<<20:
		return fmt.Errorf("shuffle: invalid MapConfig: BlockBytes %d, want 1 to 8 MiB", c.BlockBytes)
	}
	return nil
}

// fanIn is how many runs a merge reads at once within budget bytes (a reduce's given runs are
// prefetched: that is counted too).
func fanIn(budget int64, blockBytes int) int {
	perReader := int64(readBufferBytes + 2*blockBytes + 1024 + prefetchBytes)
	return int(max(2, budget/perReader))
}

// MapStats counts a map task's work, for metrics.
type MapStats struct {
	Emitted      int64 // pairs emitted by Map
	Combined     int64 // pairs combined into a value already buffered
	Spills       int   // sorted buffers spilled to local disk
	SpilledBytes int64 // bytes written to spill files, intermediate merges included
	Merges       int   // intermediate merges of spill files (fan-in exceeded)
	Records      int64 // records written to the partition runs
	RunBytes     int64 // bytes of the partition runs
	PeakMemory   int64 // the most buffer memory held at once (bytes); at most MemoryBytes
}

// entry is one buffered pair: its partition, the first 8 key bytes (to sort without reading the
// arena), a hash for the combining index, and where key and value sit in the arena. A value of
// at most inlineValue bytes is kept in voff itself (see inline), so that combining a short
// value into a key of at most 8 bytes reads the entry and nothing else.
type entry struct {
	prefix                 uint64
	part, hash             uint32
	koff, klen, voff, vlen uint32
}

const entryBytes = 32

// inlineValue is the longest value kept in an entry's voff instead of the arena.
const inlineValue = 4

// value returns e's value: from the arena, or (an inline one) copied into tmp.
func (e *entry) value(arena []byte, tmp *[inlineValue]byte) []byte {
	if e.vlen <= inlineValue {
		binary.LittleEndian.PutUint32(tmp[:], e.voff)
		return tmp[:e.vlen]
	}
	return arena[e.voff : e.voff+e.vlen]
}

// key returns e's key: a key of at most 8 bytes is its prefix, made into tmp without reading
// the arena (spills and runs are written in key order, which is no order in the arena: reading
// each key there was a cache miss a record).
func (e *entry) key(arena []byte, tmp *[8]byte) []byte {
	if e.klen <= 8 {
		binary.BigEndian.PutUint64(tmp[:], e.prefix)
		return tmp[:e.klen]
	}
	return arena[e.koff : e.koff+e.klen]
}

// inline is the voff of an inline value v (at most inlineValue bytes).
func inline(v []byte) uint32 {
	var x uint32
	for i, c := range v[:min(len(v), inlineValue)] {
		x |= uint32(c) << (8 * i)
	}
	return x
}

// MapBuffer holds a map task's pairs within a memory budget. It partitions each key by
// jobs.PartitionOf, combines the values of a key already buffered (when the job has a combiner),
// and sorts and spills to a local file when the budget is full. Finish writes one sorted run
// per partition. A MapBuffer is used by one goroutine.
//
// Without a combiner, entries is the pairs in the order added. With one, entries is itself an
// open-addressing hash table (linear probing, a power of two long, at most 7/8 full; a slot
// with koff 0 is empty, the arena's first byte being kept unused): finding a key reads one slot
// and, for a key of at most 8 bytes, nothing else (the prefix and the length are the key),
// where an index of entry numbers read the index, the entry and the arena. Before a sort, the
// used slots are moved to the front (dense).
type MapBuffer struct {
	cfg     MapConfig
	combine func(dst, a, b []byte) ([]byte, error)
	arena   []byte
	entries []entry
	used    int // combining: occupied slots of entries
	scratch []byte
	vtmp    [inlineValue]byte // an inline value, as bytes
	ktmp    [8]byte           // a short key, as bytes
	spills  []*spillFile
	temp    tempFiles
	stats   MapStats
	// lastRunWriter is the buffer memory of the last run writer.
	lastRunWriter int
}

// NewMapBuffer returns an empty buffer; combine is the job's combiner, or nil.
func NewMapBuffer(cfg MapConfig, combine func(dst, a, b []byte) ([]byte, error)) (*MapBuffer, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	b := &MapBuffer{cfg: cfg, combine: combine, temp: tempFiles{dir: cfg.TempDir}}
	if m, _ := bufferPool.Get().(*bufferMem); m != nil {
		if int64(cap(m.arena))+int64(cap(m.entries))*entryBytes <= cfg.MemoryBytes-b.spillReserve() {
			b.arena, b.entries = m.arena[:0], m.entries[:0]
			if combine != nil && cap(b.entries)&(cap(b.entries)-1) != 0 {
				b.entries = nil // a table is a power of two long
			}
		}
	}
	b.reset()
	return b, nil
}

// reset empties the buffer, keeping its memory.
func (b *MapBuffer) reset() {
	b.arena, b.entries = b.arena[:0], b.entries[:0]
	if b.combine != nil {
		b.arena = append(b.arena, 0) // koff 0 marks an empty slot
		b.entries = b.entries[:cap(b.entries)]
		clear(b.entries)
		b.used = 0
	}
}

// bufferPool keeps the memory of closed map buffers for the next task. A worker runs task after
// task; growing each buffer anew made garbage at the rate tasks ended, so many short tasks made a
// worker's heap peak higher than a few long ones. sync.Pool drops what two collections find idle.
var bufferPool sync.Pool // of *bufferMem

// bufferMem is a closed buffer's memory: empty, the table's slots not yet cleared.
type bufferMem struct {
	arena   []byte
	entries []entry
}

// keyHash is jobs.PartitionOf's hash (FNV-1a, 64 bits), computed once per pair for both the
// partition and the index; TestKeyHash_IsPartitionOf keeps the two equal.
func keyHash(key []byte) uint64 {
	h := uint64(14695981039346656037)
	for _, b := range key {
		h ^= uint64(b)
		h *= 1099511628211
	}
	return h
}

// indexHash folds a key's hash to the 32 bits an entry keeps for the table.
func indexHash(h uint64) uint32 { return uint32(h ^ h>>32) }

// keyPrefix is the first 8 bytes of key, zero-padded, big-endian: it sorts as the key does
// until a tie.
func keyPrefix(key []byte) uint64 {
	if len(key) >= 8 {
		return binary.BigEndian.Uint64(key)
	}
	var p uint64
	for i, c := range key {
		p |= uint64(c) << (56 - 8*i)
	}
	return p
}

// memory is the buffer memory held now.
func (b *MapBuffer) memory() int64 {
	return int64(cap(b.arena)) + int64(cap(b.entries))*entryBytes + int64(cap(b.scratch))
}

func (b *MapBuffer) notePeak(extra int64) {
	b.stats.PeakMemory = max(b.stats.PeakMemory, b.memory()+extra)
}

// Add buffers one pair; it copies key and value. Its signature is KeyedJob.Map's emit.
func (b *MapBuffer) Add(key, value []byte) error {
	if len(key) > MaxKeyBytes || len(value) > MaxValueBytes {
		return fmt.Errorf("emit: a %d-byte key and a %d-byte value; the limits are %d and %d bytes", len(key), len(value), MaxKeyBytes, MaxValueBytes)
	}
	b.stats.Emitted++
	h := keyHash(key)
	h32 := indexHash(h)
	pfx := keyPrefix(key)
	if b.combine == nil {
		if !b.reserve(len(key)+len(value), false) {
			if err := b.spill(); err != nil {
				return err
			}
			b.reserve(len(key)+len(value), true)
		}
		b.entries = append(b.entries, b.store(h, pfx, key, value))
		return nil
	}
	slot, found := b.find(h32, pfx, key)
	if found {
		e := &b.entries[slot]
		var err error
		b.scratch, err = b.combine(b.scratch[:0], e.value(b.arena, &b.vtmp), value)
		if err != nil {
			return err
		}
		if len(b.scratch) > MaxValueBytes {
			return fmt.Errorf("combine: a %d-byte value; the limit is %d bytes", len(b.scratch), MaxValueBytes)
		}
		if len(b.scratch) <= inlineValue {
			e.voff, e.vlen = inline(b.scratch), uint32(len(b.scratch))
			b.stats.Combined++
			return nil
		}
		if len(b.scratch) <= int(e.vlen) {
			copy(b.arena[e.voff:], b.scratch)
			e.vlen = uint32(len(b.scratch))
			b.stats.Combined++
			return nil
		}
		if b.reserveArena(len(b.scratch), false) {
			e.voff, e.vlen = uint32(len(b.arena)), uint32(len(b.scratch))
			b.arena = append(b.arena, b.scratch...)
			b.stats.Combined++
			return nil
		}
		// Full: the spill takes the buffered value, and value starts the key anew.
	}
	if size := len(b.entries); !found && b.reserve(len(key)+len(value), false) {
		if len(b.entries) != size {
			slot, _ = b.find(h32, pfx, key) // the table grew
		}
	} else {
		if err := b.spill(); err != nil {
			return err
		}
		b.reserve(len(key)+len(value), true)
		slot, _ = b.find(h32, pfx, key)
	}
	b.entries[slot] = b.store(h, pfx, key, value)
	b.used++
	return nil
}

// store copies key and value to the arena (reserved) and returns their entry; h is the key's
// hash, pfx its prefix. The partition is worked out here, not in Add: a division is a good part
// of combining a value into a key already buffered.
func (b *MapBuffer) store(h, pfx uint64, key, value []byte) entry {
	e := entry{prefix: pfx, part: uint32(h % uint64(b.cfg.Partitions)), hash: indexHash(h), koff: uint32(len(b.arena)), klen: uint32(len(key))}
	b.arena = append(b.arena, key...)
	if e.vlen = uint32(len(value)); len(value) <= inlineValue {
		e.voff = inline(value)
		return e
	}
	e.voff = uint32(len(b.arena))
	b.arena = append(b.arena, value...)
	return e
}

// find looks key up in the table: its slot and true, or the empty slot where it goes and
// false. The table must have an empty slot (it is at most 7/8 full), or be empty (then 0).
func (b *MapBuffer) find(h uint32, pfx uint64, key []byte) (int, bool) {
	if len(b.entries) == 0 {
		return 0, false
	}
	mask := len(b.entries) - 1
	short := len(key) <= 8
	for s := int(h) & mask; ; s = (s + 1) & mask {
		e := &b.entries[s]
		if e.koff == 0 {
			return s, false
		}
		if e.hash == h && e.prefix == pfx && e.klen == uint32(len(key)) &&
			(short || bytes.Equal(b.arena[e.koff:e.koff+e.klen], key)) {
			return s, true
		}
	}
}

// reserve makes room for n arena bytes and one entry within the budget, growing the buffers
// by doubling (with a combiner, the table at 7/8 full). It reports false when the budget is
// full; force grows anyway (one pair into an empty buffer).
func (b *MapBuffer) reserve(n int, force bool) bool {
	if !b.reserveArena(n, force) {
		return false
	}
	budget := b.cfg.MemoryBytes - int64(cap(b.scratch)) - b.spillReserve()
	if b.combine != nil {
		if (b.used+1)*8 <= len(b.entries)*7 {
			return true
		}
		size := max(2*len(b.entries), 1024)
		if int64(cap(b.arena))+int64(size)*entryBytes > budget && !force {
			return false
		}
		b.rehash(size)
		b.notePeak(0)
		return true
	}
	if len(b.entries) == cap(b.entries) {
		other := int64(cap(b.arena))
		c := int64(max(2*cap(b.entries), 1024))
		c = min(c, (budget-other)/entryBytes)
		if c <= int64(len(b.entries)) {
			if !force {
				return false
			}
			c = int64(len(b.entries)) + 1
		}
		b.entries = regrow(b.entries, int(c))
	}
	b.notePeak(0)
	return true
}

// reserveArena makes room for n arena bytes within the budget (see reserve).
func (b *MapBuffer) reserveArena(n int, force bool) bool {
	need := len(b.arena) + n
	if need <= cap(b.arena) {
		return true
	}
	budget := b.cfg.MemoryBytes - int64(cap(b.scratch)) - b.spillReserve()
	other := int64(cap(b.entries)) * entryBytes
	if b.combine != nil && (b.used+1)*8 > len(b.entries)*7 {
		other = int64(max(2*len(b.entries), 1024)) * entryBytes // the table grows next
	}
	c := int64(max(need, 2*cap(b.arena), 64<<10))
	c = min(c, budget-other)
	if c < int64(need) {
		if !force {
			return false
		}
		c = int64(need)
	}
	b.arena = regrow(b.arena, int(c))
	b.notePeak(0)
	return true
}

// rehash makes the table size slots long (a power of two), moving every entry.
func (b *MapBuffer) rehash(size int) {
	old := b.entries
	b.entries = make([]entry, size)
	mask := size - 1
	for i := range old {
		if old[i].koff == 0 {
			continue
		}
		s := int(old[i].hash) & mask
		for b.entries[s].koff != 0 {
			s = (s + 1) & mask
		}
		b.entries[s] = old[i]
	}
}

// dense moves the table's used slots to the front and cuts entries to them, for a sort; reset
// makes it a table again.
func (b *MapBuffer) dense() {
	if b.combine == nil {
		return
	}
	j := 0
	for i := range b.entries {
		if b.entries[i].koff != 0 {
			b.entries[j] = b.entries[i]
			j++
		}
	}
	b.entries = b.entries[:j]
}

// regrow returns s with capacity c exactly (slices.Grow may round up past the budget).
func regrow[T any](s []T, c int) []T {
	n := make([]T, len(s), c)
	copy(n, s)
	return n
}

// spillReserve is the part of the budget kept for writing a spill or a run: the file buffer,
// a block and the last key.
func (b *MapBuffer) spillReserve() int64 {
	return spillWriteBuffer + 2*int64(b.cfg.BlockBytes) + MaxKeyBytes
}

// sort sorts the buffered entries by partition, then key (with a combiner, after making the
// table dense).
func (b *MapBuffer) sort() {
	b.dense()
	sortEntries(b.entries, b.arena, b.cfg.Partitions)
}

// spill sorts the buffer and writes it to a new spill file, then empties it (keeping its memory).
func (b *MapBuffer) spill() error {
	if len(b.entries) == 0 || b.combine != nil && b.used == 0 {
		return nil
	}
	b.sort()
	f, err := b.temp.create()
	if err != nil {
		return err
	}
	sw := newSpillWriter(f, b.cfg.BlockBytes)
	i := 0
	for p := range b.cfg.Partitions {
		if err := sw.startRun(p); err != nil {
			return err
		}
		for ; i < len(b.entries) && b.entries[i].part == uint32(p); i++ {
			e := &b.entries[i]
			if err := sw.rw.Append(e.key(b.arena, &b.ktmp), e.value(b.arena, &b.vtmp)); err != nil {
				return err
			}
		}
	}
	sf, err := sw.finish()
	if err != nil {
		return err
	}
	b.notePeak(spillWriteBuffer + int64(sw.rw.bufferBytes()))
	b.spills = append(b.spills, sf)
	b.stats.Spills++
	b.stats.SpilledBytes += sf.size()
	b.reset()
	return nil
}

// sortedRange emits the sorted entries [start, end) (one partition's) as they are.
func (b *MapBuffer) sortedRange(ctx context.Context, start, end int) func(emit func(key, value []byte) error) (int64, error) {
	return func(emit func(key, value []byte) error) (int64, error) {
		for i := start; i < end; i++ {
			if (i-start)%4096 == 4095 {
				if err := ctx.Err(); err != nil {
					return int64(i - start), err
				}
			}
			e := &b.entries[i]
			if err := emit(e.key(b.arena, &b.ktmp), e.value(b.arena, &b.vtmp)); err != nil {
				return int64(i - start), err
			}
		}
		return int64(end - start), nil
	}
}

// Sink opens the run of a partition for writing. Finish calls it for partitions 0, 1, … in order
// and closes each writer before it opens the next, so a sink may also concatenate the runs into
// one object and note their offsets. On failure Finish calls CloseWithError if the writer has it
// (an *io.PipeWriter does), so that a half-written run is not committed.
type Sink func(partition int) (io.WriteCloser, error)

// Finish writes one sorted run per partition to sink, every partition included (an empty one is
// 33 bytes), merging the spills if there were any. The buffer is empty afterwards.
func (b *MapBuffer) Finish(ctx context.Context, sink Sink) (err error) {
	if len(b.spills) == 0 {
		b.sort()
		i := 0
		for p := range b.cfg.Partitions {
			start := i
			for i < len(b.entries) && b.entries[i].part == uint32(p) {
				i++
			}
			// One sorted table: its records go out as they are, without a merge (a combiner
			// left one record a key; without one, every record goes out anyway).
			if err := b.writeRun(ctx, sink, p, b.sortedRange(ctx, start, i)); err != nil {
				return err
			}
			b.notePeak(int64(b.lastRunWriter))
		}
		b.reset()
		return nil
	}
	// Spilled: spill the rest too and give back the buffer, so the merges have the budget.
	if err := b.spill(); err != nil {
		return err
	}
	b.arena, b.entries, b.scratch = nil, nil, nil
	fan := fanIn(b.cfg.MemoryBytes-spillWriteBuffer, b.cfg.BlockBytes)
	for len(b.spills) > fan {
		if err := b.mergeSpills(ctx, fan); err != nil {
			return err
		}
	}
	for p := range b.cfg.Partitions {
		cs, err := openSpills(b.spills, p)
		if err != nil {
			return err
		}
		if err := b.writeRun(ctx, sink, p, func(emit func(key, value []byte) error) (int64, error) {
			return combineTo(ctx, cs, b.combine, emit)
		}); err != nil {
			return err
		}
		b.stats.PeakMemory = max(b.stats.PeakMemory, readersMemory(cs)+spillWriteBuffer)
	}
	for _, sf := range b.spills {
		b.temp.remove(sf.f)
	}
	b.spills = nil
	return nil
}

// openSpills opens partition p's run of every spill file.
func openSpills(spills []*spillFile, p int) ([]cursor, error) {
	cs := make([]cursor, 0, len(spills))
	for _, sf := range spills {
		rr, err := sf.open(p)
		if err != nil {
			return nil, err
		}
		cs = append(cs, rr)
	}
	return cs, nil
}

// readersMemory is the memory the run readers among cs hold (measured after a merge: their
// buffers only grow).
func readersMemory(cs []cursor) int64 {
	var mem int64
	for _, c := range cs {
		if rr, ok := c.(interface{ bufferBytes() int }); ok {
			mem += int64(rr.bufferBytes())
		}
	}
	return mem
}

// mergeSpills merges the first fan spill files into one.
func (b *MapBuffer) mergeSpills(ctx context.Context, fan int) error {
	group := b.spills[:fan]
	f, err := b.temp.create()
	if err != nil {
		return err
	}
	sw := newSpillWriter(f, b.cfg.BlockBytes)
	for p := range b.cfg.Partitions {
		if err := ctx.Err(); err != nil {
			return err
		}
		if err := sw.startRun(p); err != nil {
			return err
		}
		cs, err := openSpills(group, p)
		if err != nil {
			return err
		}
		if _, err := combineTo(ctx, cs, b.combine, sw.rw.Append); err != nil {
			return err
		}
		b.stats.PeakMemory = max(b.stats.PeakMemory, readersMemory(cs)+spillWriteBuffer+int64(sw.rw.bufferBytes()))
	}
	sf, err := sw.finish()
	if err != nil {
		return err
	}
	for _, g := range group {
		b.temp.remove(g.f)
	}
	b.spills = append([]*spillFile{sf}, b.spills[fan:]...)
	b.stats.Merges++
	b.stats.SpilledBytes += sf.size()
	return nil
}

// writeRun writes partition p's run through sink: the records fill emits, in order (sorted and,
// with a combiner, one a key).
func (b *MapBuffer) writeRun(ctx context.Context, sink Sink, p int, fill func(emit func(key, value []byte) error) (int64, error)) (err error) {
	if err := ctx.Err(); err != nil {
		return err
	}
	w, err := sink(p)
	if err != nil {
		return fmt.Errorf("open run of partition %d: %w", p, err)
	}
	defer func() {
		if err != nil {
			if a, ok := w.(interface{ CloseWithError(error) error }); ok {
				_ = a.CloseWithError(err)
			} else {
				_ = w.Close()
			}
		}
	}()
	rw, err := NewCompressedRunWriter(w, p, b.cfg.BlockBytes)
	if err != nil {
		return err
	}
	n, err := fill(rw.Append)
	if err != nil {
		return err
	}
	if err := rw.Close(); err != nil {
		return err
	}
	if err := w.Close(); err != nil {
		return fmt.Errorf("close run of partition %d: %w", p, err)
	}
	b.stats.Records += n
	b.stats.RunBytes += rw.Bytes()
	b.lastRunWriter = rw.bufferBytes()
	return nil
}

// Stats returns the counters so far.
func (b *MapBuffer) Stats() MapStats { return b.stats }

// Close removes the spill files and leaves the buffer's memory to the next one. It is safe to call
// more than once; the buffer is not used after it.
func (b *MapBuffer) Close() error {
	b.temp.remove(nil)
	b.spills = nil
	if cap(b.arena) > 0 || cap(b.entries) > 0 {
		bufferPool.Put(&bufferMem{arena: b.arena[:0], entries: b.entries[:0]})
	}
	b.arena, b.entries = nil, nil
	return nil
}
