package jobs

import (
	"bytes"
	"encoding/binary"
	"encoding/gob"
	"errors"
	"testing"
)

// benchSpan is a typical shard: a byte range of a blob.
type benchSpan struct {
	Blob   string `json:"b"`
	Offset int64  `json:"o"`
	Length int64  `json:"n"`
}

// benchSpanBin is the same shard with a hand-written binary form.
type benchSpanBin benchSpan

func (s benchSpanBin) MarshalBinary() ([]byte, error) {
	b := binary.AppendUvarint(nil, uint64(len(s.Blob)))
	b = append(b, s.Blob...)
	b = binary.AppendVarint(b, s.Offset)
	return binary.AppendVarint(b, s.Length), nil
}

func (s *benchSpanBin) UnmarshalBinary(data []byte) error {
	n, k := binary.Uvarint(data)
	if k <= 0 || n > uint64(len(data)-k) {
		return errors.New("bad blob name")
	}
	s.Blob, data = string(data[k:k+int(n)]), data[k+int(n):]
	var k2 int
	if s.Offset, k = binary.Varint(data); k <= 0 {
		return errors.New("bad offset")
	}
	if s.Length, k2 = binary.Varint(data[k:]); k2 <= 0 || k+k2 != len(data) {
		return errors.New("bad length")
	}
	return nil
}

// benchHist is a typical partial: a histogram of 16 buckets with a count and a sum.
type benchHist struct {
	Count, Sum int64
	Buckets    [16]int64
}

type benchHistBin benchHist

func (h benchHistBin) MarshalBinary() ([]byte, error) {
	b := binary.AppendVarint(nil, h.Count)
	b = binary.AppendVarint(b, h.Sum)
	for _, v := range h.Buckets {
		b = binary.AppendVarint(b, v)
	}
	return b, nil
}

func (h *benchHistBin) UnmarshalBinary(data []byte) error {
	vals := make([]int64, 0, 18)
	for len(data) > 0 {
		v, k := binary.Varint(data)
		if k <= 0 {
			return errors.New("bad varint")
		}
		vals, data = append(vals, v), data[k:]
	}
	if len(vals) != 18 {
		return errors.New("want 18 values")
	}
	h.Count, h.Sum = vals[0], vals[1]
	copy(h.Buckets[:], vals[2:])
	return nil
}

var (
	span = benchSpan{Blob: "numbers/part-0007.txt", Offset: 7 << 20, Length: 1 << 20}
	hist = benchHist{Count: 131072, Sum: 8589869056, Buckets: [16]int64{8192, 8190, 8195, 8188, 8192, 8192, 8191, 8193,
		8192, 8192, 8192, 8192, 8192, 8192, 8192, 8193}}
)

func benchCodec[T comparable](b *testing.B, c codec[T], v T) {
	b.ReportAllocs()
	var size int
	for b.Loop() {
		data, err := c.encode(v)
		if err != nil {
			b.Fatal(err)
		}
		got, err := c.decode(data)
		if err != nil || got != v {
			b.Fatalf("decode: %v, %v", got, err)
		}
		size = len(data)
	}
	b.ReportMetric(float64(size), "bytes")
}

// benchGob encodes and decodes with a fresh gob encoder and decoder each time, as a shard or a
// partial is a message of its own (gob sends its type description in every such stream).
func benchGob[T comparable](b *testing.B, v T) {
	b.ReportAllocs()
	var size int
	for b.Loop() {
		var buf bytes.Buffer
		if err := gob.NewEncoder(&buf).Encode(v); err != nil {
			b.Fatal(err)
		}
		size = buf.Len()
		var got T
		if err := gob.NewDecoder(&buf).Decode(&got); err != nil || got != v {
			b.Fatalf("decode: %v, %v", got, err)
		}
	}
	b.ReportMetric(float64(size), "bytes")
}

// BenchmarkTypedShard measures the encode+decode of a shard (a byte range of a blob) by the
// default encoding (JSON, decoded strictly), by a hand-written MarshalBinary, and by gob.
func BenchmarkTypedShard(b *testing.B) {
	b.Run("json", func(b *testing.B) { benchCodec(b, newCodec[benchSpan](MaxShardBytes), span) })
	b.Run("binary", func(b *testing.B) { benchCodec(b, newCodec[benchSpanBin](MaxShardBytes), benchSpanBin(span)) })
	b.Run("gob", func(b *testing.B) { benchGob(b, span) })
}

// BenchmarkTypedPartial measures the same for partials: an int64 (a count) and a histogram of
// 16 buckets.
func BenchmarkTypedPartial(b *testing.B) {
	b.Run("int64/json", func(b *testing.B) { benchCodec(b, newCodec[int64](0), int64(1270607)) })
	b.Run("hist/json", func(b *testing.B) { benchCodec(b, newCodec[benchHist](0), hist) })
	b.Run("hist/binary", func(b *testing.B) { benchCodec(b, newCodec[benchHistBin](0), benchHistBin(hist)) })
	b.Run("hist/gob", func(b *testing.B) { benchGob(b, hist) })
}

func TestCodec_BinaryOnlyWithBothMethods(t *testing.T) {
	if !newCodec[benchSpanBin](0).binary || newCodec[benchSpan](0).binary || newCodec[int64](0).binary {
		t.Error("codec chose the wrong encoding")
	}
}
