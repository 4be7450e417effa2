package jobs

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"iter"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

// checkOrder checks that keys round-trip and that their encodings sort as the keys do.
func checkOrder[K any](t *testing.T, keys []K, compare func(a, b K) int) {
	t.Helper()
	enc := make([][]byte, len(keys))
	for i, k := range keys {
		b, err := EncodeKey(k)
		if err != nil {
			t.Fatalf("EncodeKey(%v): %v", k, err)
		}
		back, err := DecodeKey[K](b)
		if err != nil || compare(back, k) != 0 {
			t.Fatalf("DecodeKey(EncodeKey(%v)) = %v, %v", k, back, err)
		}
		enc[i] = b
	}
	for i := range keys {
		for j := range keys {
			if got, want := bytes.Compare(enc[i], enc[j]), compare(keys[i], keys[j]); got != want {
				t.Fatalf("keys %v and %v compare %d, their encodings %d", keys[i], keys[j], want, got)
			}
		}
	}
}

func TestKeyCodec_OrderPreserving(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	var i64 []int64
	var i8 []int8
	var u32 []uint32
	var f64 []float64
	var strs []string
	for range 60 {
		i64 = append(i64, int64(rng.Uint64()))
		i8 = append(i8, int8(rng.Uint32()))
		u32 = append(u32, rng.Uint32())
		f64 = append(f64, rng.NormFloat64()*math.Pow(10, float64(rng.IntN(40)-20)))
		strs = append(strs, strings.Repeat(string(rune('a'+rng.IntN(3))), rng.IntN(4)))
	}
	i64 = append(i64, math.MinInt64, math.MaxInt64, 0, -1)
	f64 = append(f64, math.Inf(1), math.Inf(-1), 0, math.SmallestNonzeroFloat64, -math.SmallestNonzeroFloat64)
	strs = append(strs, "", "\x00", "\xff", "a\x00")
	checkOrder(t, i64, cmp.Compare[int64])
	checkOrder(t, i8, cmp.Compare[int8])
	checkOrder(t, u32, cmp.Compare[uint32])
	checkOrder(t, f64, cmp.Compare[float64])
	checkOrder(t, strs, strings.Compare)
	checkOrder(t, []bool{false, true}, func(a, b bool) int {
		return cmp.Compare(map[bool]int{false: 0, true: 1}[a], map[bool]int{false: 0, true: 1}[b])
	})
	type id string
	checkOrder(t, []id{"b", "a", ""}, func(a, b id) int { return strings.Compare(string(a), string(b)) })
}

func TestKeyCodec_Refusals(t *testing.T) {
	if _, err := EncodeKey(math.NaN()); err == nil {
		t.Error("a NaN key was encoded")
	}
	neg, _ := EncodeKey(math.Copysign(0, -1))
	pos, _ := EncodeKey(0.0)
	if !bytes.Equal(neg, pos) {
		t.Error("-0 and 0 are different keys")
	}
	for _, bad := range [][]byte{nil, {1}, {1, 2, 3, 4, 5, 6, 7, 8, 9}} {
		if _, err := DecodeKey[int64](bad); err == nil {
			t.Errorf("DecodeKey[int64](%x) succeeded", bad)
		}
	}
	if _, err := DecodeValue[int8]([]byte{0x80, 0x02}); err == nil { // 128
		t.Error("an int8 value of 128 was decoded")
	}
	if _, err := DecodeValue[int64]([]byte{1, 2}); err == nil {
		t.Error("trailing bytes after a varint were accepted")
	}
	if _, err := DecodeValue[bool]([]byte{2}); err == nil {
		t.Error("a boolean 2 was decoded")
	}
	type pair struct{ A, B int }
	if _, err := DecodeValue[pair]([]byte(`{"A":1,"C":2}`)); err == nil {
		t.Error("an unknown JSON field was accepted")
	}
}

func TestValueCodec_RoundTrip(t *testing.T) {
	type pair struct {
		A string
		B []int
	}
	roundTrip(t, int64(-5))
	roundTrip(t, uint16(65535))
	roundTrip(t, float32(1.5))
	roundTrip(t, math.Inf(-1))
	roundTrip(t, "héllo\x00")
	roundTrip(t, pair{"x", []int{1, 2}})
	roundTrip(t, true)
}

func roundTrip[V any](t *testing.T, v V) {
	t.Helper()
	b, err := EncodeValue(v)
	if err != nil {
		t.Fatal(err)
	}
	back, err := DecodeValue[V](b)
	if err != nil {
		t.Fatalf("DecodeValue(%x): %v", b, err)
	}
	if x, _ := json.Marshal(back); string(x) != string(must(json.Marshal(v))) {
		t.Errorf("value %v came back as %v", v, back)
	}
}

func must[T any](v T, _ error) T { return v }

func TestAppendJSONString_MatchesEncodingJSON(t *testing.T) {
	for _, s := range []string{"", "plain", "tab\there", "quote\"back\\", "\x00\x1f", "é€😀", "\u2028\u2029", "<&>"} {
		want, _ := json.Marshal(s)
		want = bytes.ReplaceAll(want, []byte(`\u003c`), []byte("<"))
		want = bytes.ReplaceAll(want, []byte(`\u003e`), []byte(">"))
		want = bytes.ReplaceAll(want, []byte(`\u0026`), []byte("&"))
		if got := AppendJSONString(nil, s); !bytes.Equal(got, want) {
			t.Errorf("AppendJSONString(%q) = %s, want %s", s, got, want)
		}
	}
}

func TestPartitionOf_Stable(t *testing.T) {
	// Fixed values: a change here moves every key of every stored run.
	for _, tt := range []struct {
		key  string
		n    int
		want int
	}{{"", 7, 14695981039346656037 % 7}, {"a", 1000, 12638187200555641996 % 1000}, {"anything", 1, 0}} {
		if got := PartitionOf([]byte(tt.key), tt.n); got != tt.want {
			t.Errorf("PartitionOf(%q, %d) = %d, want %d", tt.key, tt.n, got, tt.want)
		}
	}
}

// sales sums an amount per customer: the package doc's example, with shards of literal lines.
type sales struct{}

type salesParams struct {
	Lines      []string `json:"lines" jobs:"required"`
	Partitions int      `json:"partitions"`
}

func (sales) Split(_ context.Context, _ Env, p salesParams) ([]string, error) { return p.Lines, nil }

func (sales) Map(_ context.Context, _ Env, line string, emit Emitter[string, int64]) error {
	for f := range strings.FieldsSeq(line) {
		name, amount, _ := strings.Cut(f, "=")
		if name == "panic" {
			panic("boom")
		}
		emit(name, int64(len(amount)))
	}
	return nil
}

func (sales) Combine(a, b int64) int64 { return a + b }

func (sales) Reduce(_ context.Context, _ string, sums iter.Seq[int64], emit func(int64)) error {
	var total int64
	for s := range sums {
		total += s
	}
	emit(total)
	return nil
}

func (sales) Partitions(p salesParams) int { return p.Partitions }

func TestKeyed_MapCombineReduce(t *testing.T) {
	job := Keyed("sales", sales{})
	ctx := context.Background()
	raw := json.RawMessage(`{"lines": ["ann=xx bob=x", "ann=xxx"], "partitions": 3}`)
	if err := job.Validate(raw); err != nil {
		t.Fatal(err)
	}
	if n, err := job.Partitions(raw); n != 3 || err != nil {
		t.Fatalf("Partitions = %d, %v", n, err)
	}
	if _, err := job.Partitions(json.RawMessage(`{"lines": [], "partitions": -1}`)); err == nil {
		t.Error("-1 partitions accepted")
	}
	shards, err := job.Split(ctx, nil, raw)
	if err != nil || len(shards) != 2 {
		t.Fatalf("Split = %q, %v", shards, err)
	}
	var keys, values [][]byte
	err = job.Map(ctx, nil, Task{Shard: shards[0]}, func(k, v []byte) error {
		keys, values = append(keys, bytes.Clone(k)), append(values, bytes.Clone(v))
		return nil
	})
	if err != nil || len(keys) != 2 || string(keys[0]) != "ann" {
		t.Fatalf("Map emitted %q, %v", keys, err)
	}
	combined, err := job.Combiner()(nil, values[0], values[1])
	if v, _ := DecodeValue[int64](combined); err != nil || v != 3 {
		t.Fatalf("Combine = %d, %v", v, err)
	}
	var out []string
	err = job.Reduce(ctx, keys[0], slices.Values(values), func(k, v []byte) error {
		out = append(out, string(k)+"\t"+string(v))
		return nil
	})
	if err != nil || len(out) != 1 || out[0] != "\"ann\"\t3" {
		t.Fatalf("Reduce = %q, %v", out, err)
	}

	stop := errors.New("disk full")
	err = job.Map(ctx, nil, Task{Shard: shards[0]}, func(k, v []byte) error { return stop })
	if !errors.Is(err, stop) {
		t.Errorf("an emit error gave %v", err)
	}
	bad, _ := EncodeShard("panic=1")
	if err := job.Map(ctx, nil, Task{Shard: bad}, func(k, v []byte) error { return nil }); err == nil || !strings.Contains(err.Error(), "panic in Map: boom") {
		t.Errorf("a panicking Map gave %v", err)
	}
	err = job.Reduce(ctx, keys[0], slices.Values([][]byte{{0xff, 0xff}}), func(k, v []byte) error { return nil })
	if !errors.Is(err, ErrBadRecord) {
		t.Errorf("a bad value gave %v", err)
	}
	if _, err := job.Combiner()(nil, []byte{0x80}, values[0]); !errors.Is(err, ErrBadRecord) {
		t.Errorf("Combine of a bad value gave %v", err)
	}
}

func FuzzDecodeKey(f *testing.F) {
	for _, s := range []string{"", "abc", "\x80\x00\x00\x00\x00\x00\x00\x01", `{"a":1}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		fuzzKey[int64](t, data)
		fuzzKey[int16](t, data)
		fuzzKey[uint8](t, data)
		fuzzKey[float64](t, data)
		fuzzKey[float32](t, data)
		fuzzKey[bool](t, data)
		fuzzKey[string](t, data)
		fuzzKey[struct{ A int }](t, data)
	})
}

// fuzzKey checks that a decoded key encodes back to the same bytes.
func fuzzKey[K any](t *testing.T, data []byte) {
	k, err := DecodeKey[K](data)
	if err != nil {
		return
	}
	b, err := EncodeKey(k)
	if err != nil {
		t.Fatalf("%T key %v decoded from %x does not encode: %v", k, k, data, err)
	}
	if _, isStruct := any(k).(struct{ A int }); !isStruct && !bytes.Equal(b, data) {
		t.Fatalf("%T key decoded from %x encodes as %x", k, data, b)
	}
}

func FuzzDecodeValue(f *testing.F) {
	for _, s := range []string{"", "\x02", "\x80\x01", `[1,2]`, "\x00\x00\x00\x00\x00\x00\xf0\x3f"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		fuzzValue[int64](t, data)
		fuzzValue[int32](t, data)
		fuzzValue[uint64](t, data)
		fuzzValue[float32](t, data)
		fuzzValue[bool](t, data)
		fuzzValue[[]int](t, data)
	})
}

func fuzzValue[V any](t *testing.T, data []byte) {
	v, err := DecodeValue[V](data)
	if err != nil {
		return
	}
	b, err := EncodeValue(v)
	if err != nil {
		t.Fatalf("%T value decoded from %x does not encode: %v", v, data, err)
	}
	again, err := DecodeValue[V](b)
	if err != nil {
		t.Fatalf("%T value %v re-encoded as %x does not decode: %v", v, v, b, err)
	}
	if x, y := must(json.Marshal(v)), must(json.Marshal(again)); !bytes.Equal(x, y) {
		t.Fatalf("%T value %s came back as %s", v, x, y)
	}
}

func TestPartitionsFor(t *testing.T) {
	for _, tt := range []struct{ maps, least, want int }{
		{1, 8, 8}, {22, 8, 8}, {40, 8, 10}, {41, 8, 11}, {100, 8, 25}, {1000, 1, 250}, {0, 0, 1},
		{200_000, 8, MaxPartitions}, {MaxShards - 3, 8, 3}, {MaxShards, 8, 1},
	} {
		if got := PartitionsFor(tt.maps, tt.least); got != tt.want {
			t.Errorf("PartitionsFor(%d, %d) = %d, want %d", tt.maps, tt.least, got, tt.want)
		}
	}
}

func TestPartitionsPerReduceTask(t *testing.T) {
	for _, tt := range []struct{ maps, parts, want int }{
		{24, 12, 1}, {100, 16, 1}, {100, 64, 4}, {100, 17, 2}, {1000, 1000, 8}, {1000, 250, 2}, {0, 0, 1}, {5, 1, 1},
	} {
		g := PartitionsPerReduceTask(tt.maps, tt.parts)
		if g != tt.want {
			t.Errorf("PartitionsPerReduceTask(%d, %d) = %d, want %d", tt.maps, tt.parts, g, tt.want)
		}
		if tasks := (tt.parts + g - 1) / g; tt.parts > 1 && tt.maps*tasks >= tt.maps*tt.parts && tt.parts > MinReduceTasks {
			t.Errorf("%d maps × %d partitions: %d reduce tasks read no fewer runs", tt.maps, tt.parts, tasks)
		}
	}
}
