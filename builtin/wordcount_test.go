package builtin

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"unicode"

	"github.com/mapagg/mapagg/jobs"
	"github.com/mapagg/mapagg/jobs/jobstest"
)

// directWordCount counts words the obvious way, over whole texts: the reference for wordcount.
// Words longer than wordcountMaxWordBytes are counted in total only, as the job does.
func directWordCount(texts ...[]byte) (total uint64, counts map[string]uint64) {
	counts = make(map[string]uint64)
	for _, text := range texts {
		for _, w := range strings.FieldsFunc(string(text), unicode.IsSpace) {
			total++
			if len(w) <= wordcountMaxWordBytes {
				counts[w]++
			}
		}
	}
	return total, counts
}

// directResult is the JSON a wordcount job must return for these texts.
func directResult(t testing.TB, top int, texts ...[]byte) string {
	total, counts := directWordCount(texts...)
	words := slices.Collect(maps.Keys(counts))
	slices.SortFunc(words, func(a, b string) int {
		if counts[a] != counts[b] {
			if counts[a] > counts[b] {
				return -1
			}
			return 1
		}
		return strings.Compare(a, b)
	})
	res := WordcountResult{Total: total, Top: []WordFreq{}}
	for _, w := range words[:min(top, len(words))] {
		res.Top = append(res.Top, WordFreq{Word: w, Count: counts[w]})
	}
	b, err := json.Marshal(res)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// trickyTokens are pieces of text that stress the boundary logic: multi-byte runes, Unicode
// spaces of 2 and 3 bytes, invalid and truncated UTF-8 (including a truncated U+3000 and a lone
// lead byte of U+0085), and runs of spaces.
var trickyTokens = []string{
	"a", "b", "word", "é", "世界", "😀", "naïve", "x",
	" ", " ", "   ", "\t", "\n", "\r\n", "\v\f",
	"\u3000", "\u0085", "\u00a0", "\u2028", "\u2003", "\u1680", "\u205f",
	"\xff", "\x80", "\xe3\x80", "\xc2", "\xf0\x9f\x98", "\xed\xa0\x80", "\ufffd",
}

func trickyText(rng *rand.Rand, tokens int) []byte {
	var b bytes.Buffer
	for range tokens {
		b.WriteString(trickyTokens[rng.IntN(len(trickyTokens))])
	}
	return b.Bytes()
}

// countRanges counts text cut into ranges of shardBytes, reading chunk bytes at a time, and
// returns the summed total and counts.
func countRanges(t testing.TB, env *jobstest.Env, name string, size, shardBytes int64, chunk int) (uint64, map[string]uint64) {
	t.Helper()
	var total uint64
	counts := make(map[string]uint64)
	for off := int64(0); off < size; off += shardBytes {
		tally := newWordTable()
		s := wordcountShard{Container: "corpus", Blob: name, Offset: off, Len: min(shardBytes, size-off)}
		n, err := countShardWords(context.Background(), env, s, tally, chunk)
		if err != nil {
			t.Fatalf("shard %+v: %v", s, err)
		}
		total += n
		for i := range tally.len() {
			counts[string(tally.word(i))] += tally.counts[i]
		}
	}
	return total, counts
}

func TestCountShardWords_EveryCut(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 7))
	for trial := range 6 {
		text := trickyText(rng, 60+trial*20)
		env := jobstest.NewEnv()
		env.OneByteReads(trial%2 == 1)
		env.Put("corpus", "t", text)
		wantTotal, wantCounts := directWordCount(text)
		size := int64(len(text))
		for sb := int64(1); sb <= size+1; sb++ {
			for _, chunk := range []int{16, 17, 23, wordcountChunk} {
				total, counts := countRanges(t, env, "t", size, sb, chunk)
				if total != wantTotal || !maps.Equal(counts, wantCounts) {
					t.Fatalf("text %q, shard_bytes %d, chunk %d: total %d, want %d; counts equal: %v",
						text, sb, chunk, total, wantTotal, maps.Equal(counts, wantCounts))
				}
			}
		}
	}
}

func TestCountShardWords_LongWords(t *testing.T) {
	max := wordcountMaxWordBytes
	text := strings.Join([]string{
		strings.Repeat("a", max),       // ranked
		strings.Repeat("b", max+1),     // counted, not ranked
		strings.Repeat("é", max/2),     // exactly max bytes, 2-byte runes: ranked
		strings.Repeat("世", max/3+1),   // max+2 bytes: not ranked
		strings.Repeat("c", 5*max+123), // spans many shards and chunks
		"end",
	}, "\u3000")
	env := jobstest.NewEnv()
	env.Put("corpus", "long", []byte(text))
	wantTotal, wantCounts := directWordCount([]byte(text))
	if wantTotal != 6 || len(wantCounts) != 3 {
		t.Fatalf("reference: %d words, %d ranked", wantTotal, len(wantCounts))
	}
	for _, sb := range []int64{1, 7, 100, int64(max) - 1, int64(max), int64(max) + 1, 3000, int64(len(text))} {
		for _, chunk := range []int{16, 1000, wordcountChunk} {
			total, counts := countRanges(t, env, "long", int64(len(text)), sb, chunk)
			if total != wantTotal || !maps.Equal(counts, wantCounts) {
				t.Errorf("shard_bytes %d, chunk %d: total %d (want %d), ranked %v", sb, chunk, total, wantTotal, slices.Collect(maps.Keys(counts)))
			}
		}
	}
}

func TestCountShardWords_BigText(t *testing.T) {
	// More than one 64 KiB chunk per shard, so runes straddle chunk boundaries.
	rng := rand.New(rand.NewPCG(8, 8))
	text := trickyText(rng, 120_000)
	env := jobstest.NewEnv()
	env.Put("corpus", "big", text)
	wantTotal, wantCounts := directWordCount(text)
	for _, sb := range []int64{100_003, 1 << 20} {
		total, counts := countRanges(t, env, "big", int64(len(text)), sb, wordcountChunk)
		if total != wantTotal || !maps.Equal(counts, wantCounts) {
			t.Errorf("shard_bytes %d: total %d, want %d", sb, total, wantTotal)
		}
	}
}

// Wordcount through jobstest (every shard mapped twice, partials merged in shuffled orders)
// matches a direct count. The byte-sized shards (a word cut at every byte) run over a smaller
// corpus: under -race the full one took 30 s at one byte a shard, for no cut it does not have.
func TestWordcount_MatchesDirectCount(t *testing.T) {
	corpus := func(seed uint64, texts, tokens, step int) (*jobstest.Env, [][]byte) {
		rng := rand.New(rand.NewPCG(seed, seed))
		env := jobstest.NewEnv()
		var out [][]byte
		for i := range texts {
			text := trickyText(rng, tokens+step*i)
			env.Put("corpus", fmt.Sprintf("books/%d.txt", i), text)
			out = append(out, text)
		}
		env.Put("corpus", "books/empty.txt", nil)
		env.Put("corpus", "other/skip.txt", []byte("not counted"))
		return env, out
	}
	small, smallTexts := corpus(7, 3, 120, 60)
	big, bigTexts := corpus(9, 5, 500, 300)
	for _, tt := range []struct {
		shardBytes string
		top        int
		big        bool
	}{
		{`, "shard_bytes": 1`, 20, false}, {`, "shard_bytes": 2`, 5, false}, {`, "shard_bytes": 3`, 0, false}, {`, "shard_bytes": 5`, 1, false},
		{`, "shard_bytes": 97`, 50, true}, {`, "shard_bytes": 4096`, 10000, true}, {``, 10, true},
	} {
		env, texts := small, smallTexts
		if tt.big {
			env, texts = big, bigTexts
		}
		params := fmt.Sprintf(`{"container": "corpus", "prefix": "books/", "top": %d%s}`, tt.top, tt.shardBytes)
		got := jobstest.Run(t, wordcount{}, env, params)
		if want := directResult(t, tt.top, texts...); string(got) != want {
			t.Errorf("%s:\n got %s\nwant %s", params, got, want)
		}
	}
	// Default top is 10.
	got := jobstest.Run(t, wordcount{}, big, `{"container": "corpus", "prefix": "books/"}`)
	if want := directResult(t, 10, bigTexts...); string(got) != want {
		t.Errorf("default top:\n got %s\nwant %s", got, want)
	}
}

func TestWordcount_Result(t *testing.T) {
	env := jobstest.NewEnv()
	env.Put("corpus", "a", []byte("the cat  the dog\u3000the bird  cat zebra apple apple\n"))
	got := jobstest.Run(t, wordcount{}, env, `{"container": "corpus", "top": 4, "shard_bytes": 3}`)
	const want = `{"total":10,"top":[{"word":"the","count":3},{"word":"apple","count":2},{"word":"cat","count":2},{"word":"bird","count":1}]}`
	if string(got) != want {
		t.Errorf("got  %s\nwant %s", got, want)
	}
	got = jobstest.Run(t, wordcount{}, env, `{"container": "corpus", "top": 0}`)
	if string(got) != `{"total":10,"top":[]}` {
		t.Errorf("top 0: %s", got)
	}
}

func TestWordcount_EmptyBlobs(t *testing.T) {
	env := jobstest.NewEnv()
	env.Put("corpus", "e1", nil)
	env.Put("corpus", "e2", nil)
	shards, err := wordcount{}.Split(context.Background(), env, json.RawMessage(`{"container": "corpus"}`))
	if err != nil || len(shards) != 1 {
		t.Fatalf("Split of empty blobs: %d shards, %v", len(shards), err)
	}
	got := jobstest.Run(t, wordcount{}, env, `{"container": "corpus"}`)
	if string(got) != `{"total":0,"top":[]}` {
		t.Errorf("result %s", got)
	}
	env.Put("corpus", "spaces", []byte(" \u3000\n "))
	got = jobstest.Run(t, wordcount{}, env, `{"container": "corpus", "shard_bytes": 1}`)
	if string(got) != `{"total":0,"top":[]}` {
		t.Errorf("result %s", got)
	}
}

func TestWordcount_SplitErrors(t *testing.T) {
	env := jobstest.NewEnv()
	env.Put("corpus", "a", []byte("x"))
	env.Put("big", "a", make([]byte, jobs.MaxShards+1))
	ctx := context.Background()

	_, err := wordcount{}.Split(ctx, env, json.RawMessage(`{"container": "corpus", "prefix": "zz"}`))
	if err == nil || !strings.Contains(err.Error(), `no blobs in container "corpus" with prefix "zz"`) {
		t.Errorf("no blobs: %v", err)
	}
	_, err = wordcount{}.Split(ctx, env, json.RawMessage(`{"container": "missing"}`))
	if err == nil || !strings.Contains(err.Error(), "list blobs") {
		t.Errorf("missing container: %v", err)
	}
	_, err = wordcount{}.Split(ctx, env, json.RawMessage(`{"container": "big", "shard_bytes": 1}`))
	var pe *jobs.ParamError
	if !errors.As(err, &pe) || pe.Field != "shard_bytes" || !strings.Contains(err.Error(), "use a larger") {
		t.Errorf("too many shards: %v", err)
	}
	shards, err := wordcount{}.Split(ctx, env, json.RawMessage(`{"container": "big", "shard_bytes": 2}`))
	if err != nil || len(shards) != jobs.MaxShards/2+1 {
		t.Errorf("big blob in 2-byte shards: %d shards, %v", len(shards), err)
	}
	// A blob name too long for a shard description.
	env.Put("corpus", strings.Repeat("ü", 3000), []byte("x"))
	if _, err := (wordcount{}).Split(ctx, env, json.RawMessage(`{"container": "corpus"}`)); err == nil || !strings.Contains(err.Error(), "limit is 4096") {
		t.Errorf("long blob name: %v", err)
	}
}

func TestWordcount_MapErrors(t *testing.T) {
	env := jobstest.NewEnv()
	env.Put("corpus", "a", []byte("hello world, this is text"))
	ctx := context.Background()
	for _, shard := range []string{
		``, `{}`, `{"c": "corpus", "b": "a", "o": 0, "n": 5, "x": 1}`, `{"c": "Corpus", "b": "a", "o": 0, "n": 5}`,
		`{"c": "corpus", "b": "", "o": 0, "n": 5}`, `{"c": "corpus", "b": "a", "o": -1, "n": 5}`,
		`{"c": "corpus", "b": "a", "o": 0, "n": -5}`, `{"c": "corpus", "b": "a", "o": 0, "n": 1073741825}`,
		`{"c": "corpus", "b": "a", "o": 9223372036854775807, "n": 5}`,
	} {
		if _, err := (wordcount{}).Map(ctx, env, jobs.Task{Shard: []byte(shard)}); !errors.Is(err, jobs.ErrBadShard) {
			t.Errorf("Map(%q) = %v, want jobs.ErrBadShard", shard, err)
		}
	}
	// The blob shrank after the split.
	_, err := wordcount{}.Map(ctx, env, jobs.Task{Shard: []byte(`{"c": "corpus", "b": "a", "o": 10, "n": 100}`)})
	if err == nil || !strings.Contains(err.Error(), "change after the job was split") {
		t.Errorf("short blob: %v", err)
	}
	_, err = wordcount{}.Map(ctx, env, jobs.Task{Shard: []byte(`{"c": "corpus", "b": "gone", "o": 0, "n": 5}`)})
	if err == nil || !strings.Contains(err.Error(), "not found") {
		t.Errorf("missing blob: %v", err)
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	env.Put("corpus", "big", bytes.Repeat([]byte("word "), 100_000))
	_, err = wordcount{}.Map(cctx, env, jobs.Task{Shard: []byte(`{"c": "corpus", "b": "big", "o": 0, "n": 500000}`)})
	if !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled: %v", err)
	}
}

func TestWordcountAggregate(t *testing.T) {
	params := json.RawMessage(`{"container": "corpus", "top": 3}`)
	env := jobstest.NewEnv()
	rng := rand.New(rand.NewPCG(5, 5))
	var texts [][]byte
	for i := range 3 {
		text := trickyText(rng, 400)
		texts = append(texts, text)
		env.Put("corpus", fmt.Sprint(i), text)
	}
	_, partials := jobstest.MapAll(t, wordcount{}, env, `{"container": "corpus", "top": 3, "shard_bytes": 50}`)
	want := directResult(t, 3, texts...)
	for seed := range uint64(8) {
		if got := jobstest.MergeShuffled(t, wordcount{}, string(params), partials, seed); string(got) != want {
			t.Fatalf("result %s, want %s", got, want)
		}
	}

	entry := func(b []byte, w string, c uint64) []byte {
		b = append(b, byte(len(w)))
		return append(append(b, w...), byte(c))
	}
	head := func(total, n byte) []byte { return []byte{tagWordcount, 1, total, n} }
	good := entry(entry(head(3, 2), "a", 1), "b", 2)
	agg, _ := wordcount{}.NewAggregate(params)
	if err := agg.Merge(good); err != nil {
		t.Fatalf("Merge(%x): %v", good, err)
	}
	before, _ := agg.MarshalBinary()
	for name, bad := range map[string][]byte{
		"empty":          nil,
		"other job":      encodeSleepPartial(1, 1),
		"version":        {tagWordcount, 3, 0, 0},
		"truncated":      good[:len(good)-1],
		"trailing":       append(bytes.Clone(good), 0),
		"out of order":   entry(entry(head(3, 2), "b", 1), "a", 2),
		"duplicate":      entry(entry(head(3, 2), "a", 1), "a", 2),
		"zero count":     entry(head(3, 1), "a", 0),
		"counts > total": entry(entry(head(2, 2), "a", 1), "b", 2),
		"empty word":     entry(head(3, 1), "", 1),
		"space in word":  entry(head(3, 1), "a b", 1),
		"U+3000 in word": entry(head(3, 1), "a\u3000b", 1),
		"word too long":  append(append(binaryUvarint([]byte{tagWordcount, 1, 3, 1}, wordcountMaxWordBytes+1), strings.Repeat("x", wordcountMaxWordBytes+1)...), 1),
		"too many words": {tagWordcount, 1, 3, 0xff, 0xff, 0xff, 0xff, 0x0f},
		"total overflow": binaryUvarint([]byte{tagWordcount, 1}, 1<<64-1, 0),
	} {
		if err := agg.Merge(bad); !errors.Is(err, jobs.ErrBadPartial) {
			t.Errorf("%s: Merge = %v, want jobs.ErrBadPartial", name, err)
		}
		if after, _ := agg.MarshalBinary(); !bytes.Equal(before, after) {
			t.Errorf("%s: the failed Merge changed the aggregate", name)
		}
		if name != "total overflow" {
			fresh, _ := wordcount{}.NewAggregate(params)
			if err := fresh.UnmarshalBinary(bad); !errors.Is(err, jobs.ErrBadCheckpoint) {
				t.Errorf("%s: UnmarshalBinary = %v, want jobs.ErrBadCheckpoint", name, err)
			}
		}
	}
}

func binaryUvarint(b []byte, vs ...uint64) []byte {
	for _, v := range vs {
		for v >= 0x80 {
			b = append(b, byte(v)|0x80)
			v >>= 7
		}
		b = append(b, byte(v))
	}
	return b
}

func TestWordcountPartial_Deterministic(t *testing.T) {
	env := jobstest.NewEnv()
	env.Put("corpus", "a", trickyText(rand.New(rand.NewPCG(1, 2)), 3000))
	task := jobs.Task{Shard: []byte(`{"c": "corpus", "b": "a", "o": 100, "n": 5000}`)}
	first, err := wordcount{}.Map(context.Background(), env, task)
	if err != nil {
		t.Fatal(err)
	}
	for range 5 {
		again, err := wordcount{}.Map(context.Background(), env, task)
		if err != nil || !bytes.Equal(first, again) {
			t.Fatalf("Map gave different partials (err %v)", err)
		}
	}
}

func FuzzWordcountParams(f *testing.F) {
	for _, s := range []string{
		`{"container": "corpus", "prefix": "books/", "top": 10}`, `{"container": "a-b"}`, `{"container": "ab-"}`,
		`{"container": "corpus", "shard_bytes": 0}`, `{"container": "corpus", "top": -1}`, `{"container": 1}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, params []byte) {
		checkParamsFuzz(t, wordcount{}, params, false)
	})
}

func FuzzWordcountShard(f *testing.F) {
	text := []byte("one two\u3000three\u0085four  é世😀 \xff\xe3\x80 five")
	for _, s := range []string{
		`{"c": "corpus", "b": "t", "o": 0, "n": 5}`, `{"c": "corpus", "b": "t", "o": 9, "n": 3}`,
		`{"c": "corpus", "b": "t", "o": 40, "n": 100}`, `{"c": "corpus", "b": "t", "o": 0, "n": 0}`,
		`{"c": "corpus", "b": "nope", "o": 0, "n": 1}`,
	} {
		f.Add([]byte(s))
	}
	env := jobstest.NewEnv()
	env.Put("corpus", "t", text)
	f.Fuzz(func(t *testing.T, shard []byte) {
		s, decErr := decodeWordcountShard(shard)
		p, err := wordcount{}.Map(context.Background(), env, jobs.Task{Shard: shard})
		if decErr != nil {
			if !errors.Is(err, jobs.ErrBadShard) {
				t.Fatalf("Map of an undecodable shard = %v", err)
			}
			return
		}
		if s.Container == "corpus" && s.Blob == "t" && s.Offset+s.Len <= int64(len(text)) && err != nil {
			t.Fatalf("Map of a valid shard %+v: %v", s, err)
		}
		if err == nil {
			if _, err := decodeWordcountPartial(p); err != nil {
				t.Fatalf("Map's partial does not decode: %v", err)
			}
		}
	})
}

func FuzzWordcountAggregate(f *testing.F) {
	t := newWordTable()
	t.add([]byte("b"), 2)
	t.add([]byte("a\xff"), 1)
	seed := newWordTable()
	seed.add([]byte("a"), 1)
	jobstest.FuzzAggregate(f, wordcount{}, `{"container": "corpus", "top": 2}`,
		encodeWordcountPartial(1, seed), encodeWordcountPartial(4, t), encodeWordcountPartial(0, newWordTable()),
		[]byte{tagWordcount, 1, 3, 1, 1, 'a', 0})
}

// FuzzWordcountBoundaries checks that however a text is cut into shards, and read in whatever
// chunks, the words add up to those of the whole text.
func FuzzWordcountBoundaries(f *testing.F) {
	f.Add([]byte("hello world"), uint16(3), uint8(0))
	f.Add([]byte("a\u3000b\u0085c\u00a0d é世😀"), uint16(1), uint8(1))
	f.Add([]byte("\xe3\x80\x80\xe3\x80x\xc2\x85\xc2 \xf0\x9f\x98\x80\xf0"), uint16(2), uint8(3))
	f.Add([]byte(strings.Repeat("long", 300)+" x"), uint16(7), uint8(5))
	f.Fuzz(func(t *testing.T, text []byte, shardBytes uint16, chunk uint8) {
		if len(text) == 0 || len(text) > 1<<12 {
			return
		}
		sb := 1 + int64(shardBytes)%int64(len(text)+3)
		sb = max(sb, int64(len(text)+127)/128) // at most 128 shards: each reads a KiB past its range
		env := jobstest.NewEnv()
		env.OneByteReads(chunk%2 == 1)
		env.Put("corpus", "t", text)
		wantTotal, wantCounts := directWordCount(text)
		total, counts := countRanges(t, env, "t", int64(len(text)), sb, 16+int(chunk))
		if total != wantTotal || !maps.Equal(counts, wantCounts) {
			t.Fatalf("shard_bytes %d, chunk %d: total %d, want %d; counts equal: %v", sb, 16+int(chunk), total, wantTotal, maps.Equal(counts, wantCounts))
		}
	})
}

func BenchmarkWordcountMap(b *testing.B) {
	text := trickyText(rand.New(rand.NewPCG(1, 1)), 1<<20)
	// Mostly ASCII prose, as real corpora are.
	prose := bytes.Repeat([]byte("the quick brown fox jumps over the lazy dog; "), len(text)/45)
	for _, tc := range []struct {
		name string
		text []byte
	}{{"prose", prose}, {"tricky", text}} {
		b.Run(tc.name, func(b *testing.B) {
			env := jobstest.NewEnv()
			env.Put("corpus", "t", tc.text)
			shard := []byte(fmt.Sprintf(`{"c": "corpus", "b": "t", "o": 0, "n": %d}`, len(tc.text)))
			b.SetBytes(int64(len(tc.text)))
			for b.Loop() {
				if _, err := (wordcount{}).Map(context.Background(), env, jobs.Task{Shard: shard}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
