package shuffle

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"testing"
	"unicode"
	"unicode/utf8"

	"github.com/mapagg/mapagg/builtin"
	"github.com/mapagg/mapagg/jobs"
	"github.com/mapagg/mapagg/jobs/jobstest"
)

// randomWordBytes is n random bytes over an alphabet rich in bytes that are not UTF-8 (and in
// U+FFFD itself, and in the bytes output formats escape), with spaces, so that words repeat and
// many are not UTF-8.
func randomWordBytes(n int) []byte {
	rng := rand.New(rand.NewPCG(7, 8))
	alphabet := [][]byte{{0x80}, {0xff}, {0xc3}, {0xa9}, {0xed, 0xb2, 0x80}, []byte("\ufffd"), []byte("a"), []byte("b"),
		[]byte("\\"), []byte(`"`), []byte("é"), []byte(" "), []byte("\n"), []byte("\t"), []byte("\u3000"), []byte("\r")}
	var b []byte
	for len(b) < n {
		b = append(b, alphabet[rng.IntN(len(alphabet))]...)
	}
	return b
}

// wordsOf counts the words of b as wordcount does: runs of anything but unicode.IsSpace runes
// (bytes that are not UTF-8 are not space).
func wordsOf(b []byte) map[string]int {
	counts := map[string]int{}
	start := -1
	for i := 0; i < len(b); {
		r, size := utf8.DecodeRune(b[i:])
		space := r != utf8.RuneError && unicode.IsSpace(r)
		switch {
		case space && start >= 0:
			counts[string(b[start:i])]++
			start = -1
		case !space && start < 0:
			start = i
		}
		i += size
	}
	if start >= 0 {
		counts[string(b[start:])]++
	}
	return counts
}

// A keyed wordcount over random bytes keeps every distinct word distinct, byte for byte, in
// both output formats: distinct output keys = distinct input words, with their counts.
func TestShuffle_KeysAreBytes(t *testing.T) {
	data := randomWordBytes(200 << 10)
	want := wordsOf(data)
	env := jobstest.NewEnv()
	env.Put("texts", "in/0", data)
	job := keyedWordcount(t)
	ctx := context.Background()
	const parts = 3
	shards, err := job.Split(ctx, env, []byte(`{"container":"texts","output":"blob","shard_bytes":50000}`))
	if err != nil || len(shards) < 4 {
		t.Fatalf("%d shards, %v", len(shards), err)
	}
	st := newMemStorage()
	for i, s := range shards {
		sink := StorageSink(ctx, st, func(p int) string { return runName(i, p) })
		if _, err := Map(ctx, job, env, jobs.Task{Index: i, Shard: s}, sink, MapConfig{Partitions: parts, TempDir: t.TempDir()}); err != nil {
			t.Fatal(err)
		}
	}
	for _, format := range []string{FormatJSONL, FormatTSV} {
		got := map[string]int{}
		records := 0
		for p := range parts {
			var names []string
			for i := range shards {
				names = append(names, runName(i, p))
			}
			var buf bytes.Buffer
			out, _ := NewOutputWriter(&buf, format)
			if _, err := Reduce(ctx, job, StorageRuns(st, names), out, ReduceConfig{Partition: p, TempDir: t.TempDir()}); err != nil {
				t.Fatal(err)
			}
			for line := range bytes.Lines(buf.Bytes()) {
				line = bytes.TrimSuffix(line, []byte("\n"))
				var key, value []byte
				var err error
				if format == FormatJSONL {
					var k []byte
					if k, value, err = jobs.SplitRecord(line); err == nil {
						key, err = jobs.AppendUnquoted(nil, k)
					}
				} else {
					k, v, ok := bytes.Cut(line, []byte("\t"))
					if !ok {
						t.Fatalf("%s line %q: no tab", format, line)
					}
					key, err = jobs.ParseTSVField(nil, k)
					value = v
				}
				if err != nil {
					t.Fatalf("%s line %q: %v", format, line, err)
				}
				n, err := strconv.Atoi(string(value))
				if err != nil {
					t.Fatalf("%s line %q: %v", format, line, err)
				}
				if _, dup := got[string(key)]; dup {
					t.Fatalf("%s: key %q twice", format, key)
				}
				got[string(key)] = n
				records++
			}
		}
		if len(got) != len(want) {
			t.Fatalf("%s: %d distinct keys (%d records), want %d distinct words", format, len(got), records, len(want))
		}
		for w, n := range want {
			if got[w] != n {
				t.Fatalf("%s: word %q counted %d, want %d", format, w, got[w], n)
			}
		}
	}
	invalid := 0
	for w := range want {
		if !utf8.ValidString(w) {
			invalid++
		}
	}
	if invalid < len(want)/4 {
		t.Fatalf("only %d of %d words are not UTF-8: the test tests little", invalid, len(want))
	}
	t.Log(fmt.Sprintf("%d distinct words, %d not UTF-8", len(want), invalid))
}

// keyedWordcount is the keyed form of the built-in wordcount.
func keyedWordcount(tb testing.TB) jobs.KeyedJob {
	wordcount, err := builtin.Registry().Lookup("wordcount")
	if err != nil {
		tb.Fatal(err)
	}
	return jobs.KeyedForm(wordcount)
}
