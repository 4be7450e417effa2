package shuffle

import (
	"bytes"
	"cmp"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"testing/iotest"
)

// writeRun returns a run of partition p holding n records key%04d -> value.
func writeRun(t testing.TB, p, n, blockBytes int) []byte {
	t.Helper()
	var buf bytes.Buffer
	w, err := NewRunWriter(&buf, p, blockBytes)
	if err != nil {
		t.Fatal(err)
	}
	for i := range n {
		if err := w.Append(fmt.Appendf(nil, "key%04d", i), fmt.Appendf(nil, "value %d", i*i)); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if w.Bytes() != int64(buf.Len()) || w.Records() != uint64(n) {
		t.Fatalf("writer counted %d bytes %d records, wrote %d bytes", w.Bytes(), w.Records(), buf.Len())
	}
	return buf.Bytes()
}

// readRun reads a whole run, returning its records as "key=value".
func readRun(data []byte) (part int, recs []string, err error) {
	r, err := NewRunReader(bytes.NewReader(data))
	if err != nil {
		return 0, nil, err
	}
	for r.Next() {
		recs = append(recs, string(r.Key())+"="+string(r.Value()))
	}
	return r.Partition(), recs, r.Err()
}

func TestRun_RoundTrip(t *testing.T) {
	for _, n := range []int{0, 1, 100, 3000} {
		data := writeRun(t, 7, n, 512)
		p, recs, err := readRun(data)
		if err != nil || p != 7 || len(recs) != n {
			t.Fatalf("%d records: read partition %d, %d records, %v", n, p, len(recs), err)
		}
		for i, r := range recs {
			if want := fmt.Sprintf("key%04d=value %d", i, i*i); r != want {
				t.Fatalf("record %d = %q, want %q", i, r, want)
			}
		}
	}
	if got := len(writeRun(t, 0, 0, 0)); got != headerBytes+endBytes {
		t.Errorf("an empty run is %d bytes, want %d", got, headerBytes+endBytes)
	}
}

func TestRunWriter_Refusals(t *testing.T) {
	w, _ := NewRunWriter(io.Discard, 0, 0)
	if err := w.Append([]byte("b"), nil); err != nil {
		t.Fatal(err)
	}
	if err := w.Append([]byte("a"), nil); err == nil {
		t.Error("a key out of order was appended")
	}
	if err := w.Append(make([]byte, MaxKeyBytes+1), nil); err == nil {
		t.Error("an oversized key was appended")
	}
}

// Every flipped bit and every truncation of a run is detected.
func TestRunReader_DetectsCorruption(t *testing.T) {
	data := writeRun(t, 3, 40, 128)
	for i := range data {
		for _, bit := range []byte{0x01, 0x80} {
			bad := bytes.Clone(data)
			bad[i] ^= bit
			if _, _, err := readRun(bad); !errors.Is(err, ErrCorruptRun) {
				t.Fatalf("bit %#x of byte %d flipped: %v", bit, i, err)
			}
		}
	}
	for n := range len(data) {
		if _, _, err := readRun(data[:n]); !errors.Is(err, ErrCorruptRun) {
			t.Fatalf("truncated to %d of %d bytes: %v", n, len(data), err)
		}
	}
	if _, _, err := readRun(append(bytes.Clone(data), 0)); !errors.Is(err, ErrCorruptRun) {
		t.Errorf("trailing data: %v", err)
	}
}

func FuzzRunReader(f *testing.F) {
	f.Add(writeRun(f, 0, 0, 0))
	f.Add(writeRun(f, 1, 5, 16))
	f.Add(writeRun(f, 2, 50, 64))
	f.Add(writeCompressedRun(f, 3, 50, 64))
	f.Fuzz(func(t *testing.T, data []byte) {
		r, err := NewRunReader(bytes.NewReader(data))
		if err != nil {
			if !errors.Is(err, ErrCorruptRun) {
				t.Fatalf("header error does not match ErrCorruptRun: %v", err)
			}
			return
		}
		var keys, values [][]byte
		for r.Next() {
			keys, values = append(keys, bytes.Clone(r.Key())), append(values, bytes.Clone(r.Value()))
		}
		if r.Err() != nil {
			if !errors.Is(r.Err(), ErrCorruptRun) {
				t.Fatalf("error does not match ErrCorruptRun: %v", r.Err())
			}
			return
		}
		if r.bufferBytes() > readBufferBytes+len(data)+readChunk {
			t.Fatalf("a %d-byte run held %d bytes of buffers", len(data), r.bufferBytes())
		}
		// A run the reader accepts is a fixed point of the writer, whatever its block sizes.
		var buf bytes.Buffer
		w, _ := NewRunWriter(&buf, r.Partition(), 1<<20)
		for i := range keys {
			if err := w.Append(keys[i], values[i]); err != nil {
				t.Fatalf("accepted record %d refused by the writer: %v", i, err)
			}
		}
		_ = w.Close()
		_, recs, err := readRun(buf.Bytes())
		if err != nil || len(recs) != len(keys) {
			t.Fatalf("rewritten run: %d records, %v", len(recs), err)
		}
	})
}

// sortEntries orders as the comparison it replaces: partition, then key bytes, for keys
// shorter than, as long as and longer than the 8-byte prefix, with shared prefixes (some longer
// than sortRest goes), and leaves every entry as it was (sortRest shifts them and back).
func TestSortEntries_MatchesComparisonSort(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 10))
	for _, n := range []int{0, 1, 5, 63, 64, 65, 1000, 20000} {
		for _, parts := range []int{1, 3, 300} {
			var arena []byte
			es := make([]entry, n)
			for i := range es {
				k := []byte(fmt.Sprintf("%0*d", rng.IntN(12), rng.IntN(50)))
				switch rng.IntN(4) {
				case 0:
					k = append([]byte("shared-prefix-"), k...)
				case 1: // shared past sortRest's levels (maxTieLevels × 8 bytes)
					k = append([]byte("https://example.com/a/long/shared/path/that/runs/on/past/sixty-four/bytes/"), k...)
				}
				if rng.IntN(5) == 0 {
					k = append(k, 0, byte(rng.IntN(256)))
				}
				h := keyHash(k)
				es[i] = entry{prefix: keyPrefix(k), part: uint32(h % uint64(parts)), koff: uint32(len(arena)), klen: uint32(len(k))}
				arena = append(arena, k...)
			}
			want := slices.Clone(es)
			slices.SortStableFunc(want, func(x, y entry) int {
				if c := cmp.Compare(x.part, y.part); c != 0 {
					return c
				}
				return bytes.Compare(arena[x.koff:x.koff+x.klen], arena[y.koff:y.koff+y.klen])
			})
			sortEntries(es, arena, parts)
			for i := range es {
				x, y := es[i], want[i]
				if x.part != y.part || !bytes.Equal(arena[x.koff:x.koff+x.klen], arena[y.koff:y.koff+y.klen]) || x.prefix != keyPrefix(arena[x.koff:x.koff+x.klen]) {
					t.Fatalf("n %d, %d partitions: entry %d is %q of partition %d, want %q of %d", n, parts, i,
						arena[x.koff:x.koff+x.klen], x.part, arena[y.koff:y.koff+y.klen], y.part)
				}
			}
		}
	}
}

// A prefetched run reads as the run, ends with its error, and closes early without a leak.
func TestPrefetch(t *testing.T) {
	data := bytes.Repeat([]byte("0123456789"), 30_000)
	open := func(context.Context) (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(data)), nil }
	p := prefetch(context.Background(), open)
	got, err := io.ReadAll(p)
	if err != nil || !bytes.Equal(got, data) {
		t.Fatalf("read %d bytes, %v; want %d", len(got), err, len(data))
	}
	p.Close()
	boom := errors.New("boom")
	p = prefetch(context.Background(), func(context.Context) (io.ReadCloser, error) {
		return io.NopCloser(io.MultiReader(bytes.NewReader(data[:100_000]), iotest.ErrReader(boom))), nil
	})
	if got, err := io.ReadAll(p); !errors.Is(err, boom) || !bytes.Equal(got, data[:100_000]) {
		t.Fatalf("read %d bytes, %v; want 100000 and boom", len(got), err)
	}
	p.Close()
	p = prefetch(context.Background(), func(context.Context) (io.ReadCloser, error) { return nil, boom })
	if _, err := p.Read(make([]byte, 10)); !errors.Is(err, boom) {
		t.Fatalf("open failed: %v", err)
	}
	p.Close()
	// Closed before the end: the goroutine stops.
	p = prefetch(context.Background(), open)
	_, _ = p.Read(make([]byte, 10))
	p.Close()
}

// writeCompressedRun is writeRun with S2-compressed blocks.
func writeCompressedRun(t testing.TB, p, n, blockBytes int) []byte {
	t.Helper()
	var buf bytes.Buffer
	w, err := NewCompressedRunWriter(&buf, p, blockBytes)
	if err != nil {
		t.Fatal(err)
	}
	for i := range n {
		if err := w.Append(fmt.Appendf(nil, "key%04d", i), fmt.Appendf(nil, "value %d", i*i)); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// A compressed run reads back as the same records as an uncompressed one (which a reader still
// takes), smaller; a flipped bit in a compressed block is caught.
func TestRun_Compressed(t *testing.T) {
	plain, packed := writeRun(t, 4, 3000, 4096), writeCompressedRun(t, 4, 3000, 4096)
	if len(packed) >= len(plain)*3/4 || packed[5] != flagS2 || plain[5] != 0 {
		t.Fatalf("compressed %d bytes (flags %d), plain %d (flags %d)", len(packed), packed[5], len(plain), plain[5])
	}
	read := func(data []byte) ([]string, error) {
		r, err := NewRunReader(bytes.NewReader(data))
		if err != nil {
			return nil, err
		}
		var recs []string
		for r.Next() {
			recs = append(recs, string(r.Key())+"="+string(r.Value()))
		}
		return recs, r.Err()
	}
	a, err := read(plain)
	if err != nil {
		t.Fatal(err)
	}
	b, err := read(packed)
	if err != nil || !slices.Equal(a, b) || len(a) != 3000 {
		t.Fatalf("compressed run: %d records, %v; plain %d", len(b), err, len(a))
	}
	bad := bytes.Clone(packed)
	bad[len(bad)/2] ^= 1
	if _, err := read(bad); !errors.Is(err, ErrCorruptRun) {
		t.Fatalf("flipped bit: %v", err)
	}
	unknown := bytes.Clone(plain)
	unknown[5] = 2
	binary.BigEndian.PutUint32(unknown[12:16], crc32.Checksum(unknown[:12], castagnoli))
	if _, err := read(unknown); !errors.Is(err, ErrCorruptRun) || !strings.Contains(err.Error(), "flags 2") {
		t.Fatalf("unknown flag: %v", err)
	}
}
