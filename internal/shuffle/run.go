package shuffle

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"

	"github.com/klauspost/compress/s2"

	"github.com/mapagg/mapagg/jobs"
)

// A run is the sorted key/value records of one partition, as a map task or a spill writes them:
//
//	header  "MRUN" | version 1 | flags | reserved 0 0 | partition u32 | CRC-32C of the 12 bytes before
//	block*  'B' | payload length u32 | records u32 | CRC-32C of length, records and payload | payload
//	end     'E' | records u64 | blocks u32 | CRC-32C of those 12 bytes
//
// Integers are big-endian. A payload is records, each uvarint key length, key, uvarint value
// length, value; keys never decrease. The record count is in the end block because the writer
// streams (a blob upload cannot seek back); a run without its end block is truncated.
//
// Flags: 0, or flagS2: every payload is S2-compressed (klauspost/compress/s2, block format), the
// length and the checksum being the compressed bytes'. Map tasks compress the runs they store
// (S2 encodes at GB/s; the runs of a word count are about half the size); spills and local
// merges do not. A reader takes both.
const (
	runMagic      = "MRUN"
	runVersion    = 1
	headerBytes   = 16
	blockHeadSize = 13
	endBytes      = 17
)

// Limits of a record and a block. A decoder refuses anything larger, so a corrupt length
// cannot make it allocate more than the input holds plus one chunk.
const (
	MaxKeyBytes   = jobs.MaxKeyBytes
	MaxValueBytes = jobs.MaxValueBytes
	maxBlockBytes = MaxKeyBytes + MaxValueBytes + 2*binary.MaxVarintLen32
	readChunk     = 1 << 20
)

// DefaultBlockBytes is the target size of a block's payload.
const DefaultBlockBytes = 64 << 10

// flagS2 in a run's header: its payloads are S2-compressed.
const flagS2 = 1

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// ErrCorruptRun is matched by every error about a run that cannot be read: a bad checksum, a
// truncated or unsorted run, a foreign file.
var ErrCorruptRun = errors.New("corrupt run")

func corrupt(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrCorruptRun, fmt.Sprintf(format, args...))
}

// RunWriter writes one run. Records must be appended in non-decreasing key order.
type RunWriter struct {
	w         io.Writer
	blockSize int
	block     []byte
	blockRecs uint32
	records   uint64
	blocks    uint32
	lastKey   []byte
	started   bool
	bytes     int64
	err       error
	compress  bool
	zblock    []byte // the compressed block (compress)
}

// NewRunWriter writes a run header for partition to w. blockSize is the target payload of a
// block (0: DefaultBlockBytes).
func NewRunWriter(w io.Writer, partition, blockSize int) (*RunWriter, error) {
	return newRunWriter(w, partition, blockSize, 0)
}

// NewCompressedRunWriter is NewRunWriter whose blocks are S2-compressed (flagS2).
func NewCompressedRunWriter(w io.Writer, partition, blockSize int) (*RunWriter, error) {
	return newRunWriter(w, partition, blockSize, flagS2)
}

func newRunWriter(w io.Writer, partition, blockSize int, flags byte) (*RunWriter, error) {
	if blockSize <= 0 {
		blockSize = DefaultBlockBytes
	}
	if partition < 0 || partition > 1<<31 {
		return nil, fmt.Errorf("run partition %d out of range", partition)
	}
	h := make([]byte, 0, headerBytes)
	h = append(h, runMagic...)
	h = append(h, runVersion, flags, 0, 0)
	h = binary.BigEndian.AppendUint32(h, uint32(partition))
	h = binary.BigEndian.AppendUint32(h, crc32.Checksum(h, castagnoli))
	rw := &RunWriter{w: w, blockSize: blockSize, compress: flags&flagS2 != 0}
	if err := rw.write(h); err != nil {
		return nil, err
	}
	rw.block = make([]byte, blockHeadSize, blockHeadSize+blockSize+64)
	return rw, nil
}

func (w *RunWriter) write(b []byte) error {
	if w.err != nil {
		return w.err
	}
	n, err := w.w.Write(b)
	w.bytes += int64(n)
	if err != nil {
		w.err = fmt.Errorf("write run: %w", err)
	}
	return w.err
}

// Append adds a record. It refuses a key smaller than the previous one, and a key or value
// over MaxKeyBytes or MaxValueBytes.
func (w *RunWriter) Append(key, value []byte) error {
	if w.err != nil {
		return w.err
	}
	if len(key) > MaxKeyBytes || len(value) > MaxValueBytes {
		return fmt.Errorf("a record of a %d-byte key and a %d-byte value; the limits are %d and %d", len(key), len(value), MaxKeyBytes, MaxValueBytes)
	}
	if w.started && bytes.Compare(key, w.lastKey) < 0 {
		return fmt.Errorf("run records out of order: %q after %q", key, w.lastKey)
	}
	w.started = true
	w.lastKey = append(w.lastKey[:0], key...)
	w.block = binary.AppendUvarint(w.block, uint64(len(key)))
	w.block = append(w.block, key...)
	w.block = binary.AppendUvarint(w.block, uint64(len(value)))
	w.block = append(w.block, value...)
	w.blockRecs++
	w.records++
	if len(w.block)-blockHeadSize >= w.blockSize {
		return w.flush()
	}
	return nil
}

func (w *RunWriter) flush() error {
	if w.blockRecs == 0 {
		return w.err
	}
	b := w.block
	if w.compress {
		payload := b[blockHeadSize:]
		need := blockHeadSize + s2.MaxEncodedLen(len(payload))
		if cap(w.zblock) < need {
			w.zblock = make([]byte, need)
		}
		z := s2.Encode(w.zblock[blockHeadSize:need], payload)
		b = w.zblock[:blockHeadSize+len(z)]
	}
	b[0] = 'B'
	binary.BigEndian.PutUint32(b[1:5], uint32(len(b)-blockHeadSize))
	binary.BigEndian.PutUint32(b[5:9], w.blockRecs)
	crc := crc32.Update(crc32.Checksum(b[1:9], castagnoli), castagnoli, b[blockHeadSize:])
	binary.BigEndian.PutUint32(b[9:13], crc)
	err := w.write(b)
	w.blocks++
	w.block = w.block[:blockHeadSize]
	w.blockRecs = 0
	return err
}

// Close writes the last block and the end block. It does not close the underlying writer.
func (w *RunWriter) Close() error {
	if err := w.flush(); err != nil {
		return err
	}
	e := make([]byte, 1, endBytes)
	e[0] = 'E'
	e = binary.BigEndian.AppendUint64(e, w.records)
	e = binary.BigEndian.AppendUint32(e, w.blocks)
	e = binary.BigEndian.AppendUint32(e, crc32.Checksum(e[1:], castagnoli))
	return w.write(e)
}

// Records is the number of records appended; Bytes the bytes written so far.
func (w *RunWriter) Records() uint64 { return w.records }

// Bytes is the number of bytes written to the underlying writer.
func (w *RunWriter) Bytes() int64 { return w.bytes }

// bufferBytes is the memory the writer holds.
func (w *RunWriter) bufferBytes() int { return cap(w.block) + cap(w.lastKey) + cap(w.zblock) }

// readBufferBytes is the size of a RunReader's read buffer.
const readBufferBytes = 32 << 10

// RunReader reads one run, checking every checksum, the order of keys and the record count.
type RunReader struct {
	r         *bufio.Reader
	partition int
	block     []byte
	pos       int
	blockRecs uint32
	inBlock   uint32
	records   uint64
	blocks    uint32
	key       []byte
	value     []byte
	lastKey   []byte
	done      bool
	err       error
	bytes     int64
	s2        bool
	zblock    []byte // the compressed block read (s2)
}

// NewRunReader reads the header of a run from r.
func NewRunReader(r io.Reader) (*RunReader, error) {
	rr := &RunReader{r: bufio.NewReaderSize(r, readBufferBytes)}
	h := make([]byte, headerBytes)
	if _, err := io.ReadFull(rr.r, h); err != nil {
		return nil, rr.readErr("header", err)
	}
	rr.bytes += headerBytes
	if string(h[:4]) != runMagic {
		return nil, corrupt("not a run (magic %q)", h[:4])
	}
	if crc32.Checksum(h[:12], castagnoli) != binary.BigEndian.Uint32(h[12:]) {
		return nil, corrupt("header checksum mismatch")
	}
	if h[4] != runVersion || h[5]&^flagS2 != 0 || h[6] != 0 || h[7] != 0 {
		return nil, corrupt("version %d flags %d: this reader knows version %d, flags 0 and %d", h[4], h[5], runVersion, flagS2)
	}
	rr.s2 = h[5]&flagS2 != 0
	p := binary.BigEndian.Uint32(h[8:12])
	if p > 1<<31 {
		return nil, corrupt("partition %d", p)
	}
	rr.partition = int(p)
	return rr, nil
}

func (r *RunReader) readErr(what string, err error) error {
	if err == io.EOF || err == io.ErrUnexpectedEOF {
		return corrupt("truncated in the %s", what)
	}
	return fmt.Errorf("read run %s: %w", what, err)
}

// Partition is the partition named in the header.
func (r *RunReader) Partition() int { return r.partition }

// Next advances to the next record and reports whether there is one. At the end, Err says
// whether the run was whole.
func (r *RunReader) Next() bool {
	if r.done || r.err != nil {
		return false
	}
	if r.inBlock == r.blockRecs {
		if r.pos != len(r.block) {
			r.err = corrupt("block %d has %d bytes after its %d records", r.blocks, len(r.block)-r.pos, r.blockRecs)
			return false
		}
		if !r.readBlock() {
			return false
		}
	}
	key, ok := r.field(MaxKeyBytes)
	if !ok {
		return false
	}
	value, ok := r.field(MaxValueBytes)
	if !ok {
		return false
	}
	if r.records > 0 && bytes.Compare(key, r.lastKey) < 0 {
		r.err = corrupt("keys out of order: %q after %q", key, r.lastKey)
		return false
	}
	r.lastKey = append(r.lastKey[:0], key...)
	r.key, r.value = key, value
	r.inBlock++
	r.records++
	return true
}

func (r *RunReader) field(limit int) ([]byte, bool) {
	n, w := binary.Uvarint(r.block[r.pos:])
	if w <= 0 || n > uint64(limit) || n > uint64(len(r.block)-r.pos-w) {
		r.err = corrupt("bad record length in block %d", r.blocks)
		return nil, false
	}
	r.pos += w
	b := r.block[r.pos : r.pos+int(n) : r.pos+int(n)]
	r.pos += int(n)
	return b, true
}

// readBlock reads the next block, or the end block (then done).
func (r *RunReader) readBlock() bool {
	kind, err := r.r.ReadByte()
	if err != nil {
		r.err = r.readErr("block header", err)
		return false
	}
	switch kind {
	case 'E':
		var e [endBytes - 1]byte
		if _, err := io.ReadFull(r.r, e[:]); err != nil {
			r.err = r.readErr("end block", err)
			return false
		}
		r.bytes += endBytes
		if crc32.Checksum(e[:12], castagnoli) != binary.BigEndian.Uint32(e[12:]) {
			r.err = corrupt("end block checksum mismatch")
			return false
		}
		if n, b := binary.BigEndian.Uint64(e[:8]), binary.BigEndian.Uint32(e[8:12]); n != r.records || b != r.blocks {
			r.err = corrupt("end block says %d records in %d blocks, read %d in %d", n, b, r.records, r.blocks)
			return false
		}
		if _, err := r.r.ReadByte(); err != io.EOF {
			r.err = corrupt("data after the end block")
			if err != nil {
				r.err = fmt.Errorf("read run: %w", err)
			}
			return false
		}
		r.done = true
		return false
	case 'B':
	default:
		r.err = corrupt("block kind %q", kind)
		return false
	}
	var h [blockHeadSize - 1]byte
	if _, err := io.ReadFull(r.r, h[:]); err != nil {
		r.err = r.readErr("block header", err)
		return false
	}
	n := binary.BigEndian.Uint32(h[0:4])
	recs := binary.BigEndian.Uint32(h[4:8])
	if n > maxBlockBytes || recs == 0 || !r.s2 && uint64(recs) > uint64(n)/2 {
		r.err = corrupt("block %d of %d bytes and %d records", r.blocks, n, recs)
		return false
	}
	// Grow as the data arrives: a corrupt length costs at most one chunk more than the input.
	r.block = r.block[:0]
	for len(r.block) < int(n) {
		chunk := min(int(n)-len(r.block), readChunk)
		if cap(r.block)-len(r.block) < chunk {
			nb := make([]byte, len(r.block), len(r.block)+chunk)
			copy(nb, r.block)
			r.block = nb
		}
		m, err := io.ReadFull(r.r, r.block[len(r.block):len(r.block)+chunk])
		r.block = r.block[:len(r.block)+m]
		if err != nil {
			r.err = r.readErr(fmt.Sprintf("block %d", r.blocks), err)
			return false
		}
	}
	r.bytes += blockHeadSize + int64(n)
	crc := crc32.Update(crc32.Checksum(h[0:8], castagnoli), castagnoli, r.block)
	if crc != binary.BigEndian.Uint32(h[8:12]) {
		r.err = corrupt("block %d checksum mismatch", r.blocks)
		return false
	}
	if r.s2 {
		dl, err := s2.DecodedLen(r.block)
		if err != nil || dl > maxBlockBytes || uint64(recs) > uint64(dl)/2 {
			r.err = corrupt("block %d: compressed %d bytes of %d records, decoded length %d (%v)", r.blocks, n, recs, dl, err)
			return false
		}
		if cap(r.zblock) < dl {
			r.zblock = make([]byte, dl)
		}
		d, err := s2.Decode(r.zblock[:dl], r.block)
		if err != nil {
			r.err = corrupt("block %d: %v", r.blocks, err)
			return false
		}
		r.block, r.zblock = d, r.block // keep both buffers for the next block
	}
	r.blocks++
	r.pos, r.blockRecs, r.inBlock = 0, recs, 0
	return true
}

// Key and Value are the current record's; they are valid until the next call of Next.
func (r *RunReader) Key() []byte { return r.key }

// Value is the current record's value, valid until the next call of Next.
func (r *RunReader) Value() []byte { return r.value }

// Err is the error that stopped Next, nil at the end of a whole run.
func (r *RunReader) Err() error { return r.err }

// Records is the number of records read so far; Bytes the bytes of the run read so far.
func (r *RunReader) Records() uint64 { return r.records }

// Bytes is the number of bytes of the run read so far.
func (r *RunReader) Bytes() int64 { return r.bytes }

// bufferBytes is the memory the reader holds.
func (r *RunReader) bufferBytes() int {
	return readBufferBytes + cap(r.block) + cap(r.lastKey) + cap(r.zblock)
}
