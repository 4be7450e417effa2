package builtin

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"maps"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/mapagg/mapagg/jobs"
)

// encodeV1 encodes words (ascending) and their counts in version 1 of the partial format, as
// earlier builds wrote it.
func encodeV1(total uint64, words []string, counts []uint64) []byte {
	b := []byte{tagWordcount, wordcountV1}
	b = binary.AppendUvarint(b, total)
	b = binary.AppendUvarint(b, uint64(len(words)))
	for i, w := range words {
		b = binary.AppendUvarint(b, uint64(len(w)))
		b = append(b, w...)
		b = binary.AppendUvarint(b, counts[i])
	}
	return b
}

// encodeV2 encodes words (in any order, distinct) and their counts in the current format.
func encodeV2(total uint64, words []string, counts []uint64) []byte {
	t := newWordTable()
	for i, w := range words {
		t.add([]byte(w), counts[i])
	}
	return encodeWordcountPartial(total, t)
}

// randomWords returns n distinct words (no spaces in them) that share prefixes of every length (none, under 8 bytes,
// exactly 8, beyond 16), differ only in trailing NUL bytes, hold multi-byte runes and invalid
// bytes, and run up to the 1,024-byte limit, with counts of 1 to 300.
func randomWords(rng *rand.Rand, n int) (words []string, counts []uint64, total uint64) {
	stems := []string{"", "a", "ab", "abcdefg", "abcdefgh", "abcdefghi", strings.Repeat("p", 17), strings.Repeat("q", 40),
		"é", "世界", "\xe3\x80", "\xff", "ab\x00", strings.Repeat("z", 1000)}
	tails := []string{"", "a", "b", "\x00", "\x00\x00", "xyz", "😀", "\xc2", "\x80", "1234567890", strings.Repeat("t", 24)}
	seen := map[string]bool{}
	for len(words) < n {
		w := stems[rng.IntN(len(stems))] + tails[rng.IntN(len(tails))] + tails[rng.IntN(len(tails))]
		if rng.IntN(2) == 0 {
			w += strconv.Itoa(rng.IntN(100_000)) // enough distinct words for any n
		}
		if w == "" || len(w) > wordcountMaxWordBytes || seen[w] || hasSpace([]byte(w)) {
			continue
		}
		seen[w] = true
		c := 1 + uint64(rng.IntN(300))
		words, counts, total = append(words, w), append(counts, c), total+c
	}
	return words, counts, total
}

func sortedWords(words []string, counts []uint64) ([]string, []uint64) {
	m := make(map[string]uint64, len(words))
	for i, w := range words {
		m[w] = counts[i]
	}
	ws := slices.Sorted(maps.Keys(m))
	cs := make([]uint64, len(ws))
	for i, w := range ws {
		cs[i] = m[w]
	}
	return ws, cs
}

// Both formats carry the same counts: merging either gives the same aggregate. Version 2 is
// smaller, and what this build writes.
func TestWordcountPartial_Formats(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for _, n := range []int{1, 2, 17, 300, 3000} {
		words, counts, total := randomWords(rng, n)
		v2 := encodeV2(total+5, words, counts)
		ws, cs := sortedWords(words, counts)
		v1 := encodeV1(total+5, ws, cs)
		if v2[1] != wordcountVersion || n >= 300 && len(v2) >= len(v1) {
			t.Errorf("%d words: version %d, %d bytes (version 1: %d)", n, v2[1], len(v2), len(v1))
		}
		var results [][]byte
		for _, p := range [][]byte{v1, v2} {
			agg, _ := wordcount{}.NewAggregate(json.RawMessage(`{"container":"corpus","top":50}`))
			if err := agg.Merge(p); err != nil {
				t.Fatalf("%d words, version %d: %v", n, p[1], err)
			}
			if err := agg.Merge(p); err != nil { // again: every word already there
				t.Fatalf("%d words, version %d, twice: %v", n, p[1], err)
			}
			enc, _ := agg.MarshalBinary()
			res, _ := agg.Result()
			results = append(results, enc, res)
		}
		if !bytes.Equal(results[0], results[2]) || !bytes.Equal(results[1], results[3]) {
			t.Fatalf("%d words: the two formats merge differently", n)
		}
		doubled := slices.Clone(cs)
		for i := range doubled {
			doubled[i] *= 2
		}
		if want := encodeV2(2*(total+5), ws, doubled); !bytes.Equal(results[0], want) {
			t.Fatalf("%d words: the aggregate holds other counts than the partial's, twice", n)
		}
	}
}

// A checkpoint written by an earlier build (version 1) is restored, merged into and written
// again as version 2.
func TestWordcountAggregate_ReadsV1Checkpoint(t *testing.T) {
	words, counts, total := randomWords(rand.New(rand.NewPCG(5, 6)), 500)
	ws, cs := sortedWords(words, counts)
	params := json.RawMessage(`{"container":"corpus"}`)
	agg, _ := wordcount{}.NewAggregate(params)
	if err := agg.UnmarshalBinary(encodeV1(total, ws, cs)); err != nil {
		t.Fatal(err)
	}
	if got, _ := agg.MarshalBinary(); !bytes.Equal(got, encodeV2(total, ws, cs)) {
		t.Fatal("a version 1 checkpoint restores to other counts")
	}
	if err := agg.Merge(encodeV2(1, []string{"new"}, []uint64{1})); err != nil {
		t.Fatal(err)
	}
	got, _ := agg.MarshalBinary()
	if want := encodeV2(total+1, append(ws, "new"), append(cs, 1)); !bytes.Equal(got, want) {
		t.Fatal("merging after a version 1 checkpoint")
	}
}

// A space can be completed by the new bytes of a front-coded word: "a" U+3001 then "a" U+3000
// share "a\xe3\x80", and the new byte alone is no space. Such a word is still refused, and words
// whose shared bytes cut a rune that is no space are still accepted.
func TestWordcountPartial_SpaceInPrefix(t *testing.T) {
	for _, tc := range []struct {
		words []string
		ok    bool
	}{
		{[]string{"a\u3001", "a\u3000"}, false},
		{[]string{"b\u0084", "b\u0085"}, false},           // U+0085 NEL: C2 85 after C2 84
		{[]string{"c\u2001", "c\u2028x"}, false},          // E2 80 A8 after E2 80 81
		{[]string{"d", "d\u00a0"}, false},                 // the whole space is new
		{[]string{"e", "e\t"}, false},                     // an ASCII space
		{[]string{"f\xe3", "f\xe3\x80\x80"}, false},       // completes a rune the word before left open
		{[]string{"j\u3001", "j\xe3\x80\xc2\x85"}, false}, // the shared E3 80 now ends early; C2 85 is NEL
		{[]string{"a\u3001", "a\u3002", "a\u3003"}, true}, // U+3001-3: punctuation, no space
		{[]string{"k\u3001", "k\xe3\x80\xc3\xa9"}, true},  // the shared E3 80 now ends early; then é
		{[]string{"g\xe3", "g\xe3\x80", "g\xe3\x81"}, true},
		{[]string{"h\xc2", "h\xc2\x84", "h\xc2\x86"}, true},
	} {
		counts := make([]uint64, len(tc.words))
		for i := range counts {
			counts[i] = 1
		}
		p := encodeV2(uint64(len(tc.words)), tc.words, counts)
		_, err := decodeWordcountPartial(p)
		if (err == nil) != tc.ok {
			t.Errorf("%q: decode error %v, want ok %v", tc.words, err, tc.ok)
		}
		_, errV1 := decodeWordcountPartial(encodeV1(uint64(len(tc.words)), tc.words, counts))
		if (errV1 == nil) != tc.ok {
			t.Errorf("%q: version 1 decode error %v, want ok %v", tc.words, errV1, tc.ok)
		}
	}
}

// Front-coded words are refused for a space exactly when the words themselves hold one, however
// the shared bytes cut a multi-byte rune: random short words over bytes that start, continue and
// complete spaces (U+3000 E3 80 80, U+0085 C2 85, U+00A0 C2 A0).
func TestWordcountPartial_SpaceCheckMatchesWords(t *testing.T) {
	rng := rand.New(rand.NewPCG(14, 15))
	alphabet := []byte{'a', 0xe3, 0x80, 0x81, 0xc2, 0x85, 0xa0, ' '}
	refused := 0
	for range 20_000 {
		seen := map[string]bool{}
		var words []string
		for range 2 + rng.IntN(4) {
			w := make([]byte, 1+rng.IntN(5))
			for i := range w {
				w[i] = alphabet[rng.IntN(len(alphabet))]
			}
			if !seen[string(w)] {
				seen[string(w)] = true
				words = append(words, string(w))
			}
		}
		slices.Sort(words)
		space := slices.ContainsFunc(words, func(w string) bool { return hasSpace([]byte(w)) })
		counts := slices.Repeat([]uint64{1}, len(words))
		_, err := decodeWordcountPartial(encodeV2(uint64(len(words)), words, counts))
		if (err != nil) != space {
			t.Fatalf("%q: decode error %v, but a word with a space: %v", words, err, space)
		}
		if space {
			refused++
		}
	}
	if refused < 1000 || refused > 19_000 {
		t.Fatalf("%d of 20000 lists refused: the test draws too few or too many spaces", refused)
	}
}

// A bad version 2 partial is refused with a reason and changes nothing.
func TestWordcountPartial_BadV2(t *testing.T) {
	head := func(total, n byte) []byte { return []byte{tagWordcount, wordcountV2, total, n} }
	long := strings.Repeat("x", wordcountMaxWordBytes)
	longWord := binary.AppendUvarint(append(binary.AppendUvarint(append(head(9, 2), 0, 0), wordcountMaxWordBytes), long...), 1)
	for name, tc := range map[string]struct {
		p    []byte
		want string
	}{
		"first word shares":     {append(head(2, 1), 0x11, 'a', 1), "shares 1 bytes with a word of 0"},
		"shares too much":       {append(head(2, 2), 0x01, 'a', 1, 0x21, 'b', 1), "shares 2 bytes with a word of 1"},
		"no new bytes":          {append(head(2, 2), 0x01, 'a', 1, 0, 1, 0, 1), "no bytes after the shared ones"},
		"head without length":   {append(head(2, 1), 0x10, 1, 0), "truncated"},
		"prefix not the most":   {append(head(2, 2), 0x02, 'a', 'b', 1, 0x02, 'a', 'c', 1), "shares more than the 0 bytes"},
		"out of order":          {append(head(2, 2), 0x01, 'b', 1, 0x01, 'a', 1), "out of order"},
		"suffix too long":       {binary.AppendUvarint(append(head(2, 1), 0, 0), wordcountMaxWordBytes+1), "truncated, or a length above"},
		"word too long":         {append(longWord, 0, 0x80, 0x08, 1, 'y', 1), "a word of 1025 bytes"},
		"truncated suffix":      {append(head(2, 1), 0x05, 'a', 'b'), "truncated"},
		"space in word":         {append(head(2, 1), 0x03, 'a', ' ', 'b', 1), "is not a word"},
		"zero count":            {append(head(2, 1), 0x01, 'a', 0), "count 0 out of range"},
		"counts above total":    {append(head(2, 2), 0x01, 'a', 2, 0x01, 'b', 1), "count 1 out of range"},
		"trailing bytes":        {append(head(2, 1), 0x01, 'a', 1, 7), "trailing"},
		"count varint overlong": {append(head(2, 1), 0x01, 'a', 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01), "varint"},
	} {
		agg, _ := wordcount{}.NewAggregate(json.RawMessage(`{"container":"corpus"}`))
		good := encodeV2(3, []string{"a", "b"}, []uint64{1, 2})
		if err := agg.Merge(good); err != nil {
			t.Fatal(err)
		}
		before, _ := agg.MarshalBinary()
		err := agg.Merge(tc.p)
		if !errors.Is(err, jobs.ErrBadPartial) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: Merge(%x) = %v, want jobs.ErrBadPartial saying %q", name, tc.p, err, tc.want)
		}
		if after, _ := agg.MarshalBinary(); !bytes.Equal(before, after) {
			t.Errorf("%s: the failed Merge changed the aggregate", name)
		}
	}
}

// The table counts like a map and sorts like sort.Strings, through growth, words that tie on
// their first 8 bytes, and reuse after reset.
func TestWordTable(t *testing.T) {
	rng := rand.New(rand.NewPCG(8, 9))
	tab := newWordTable()
	for round := range 3 {
		want := map[string]uint64{}
		words, _, _ := randomWords(rng, 2000+round*1000)
		for range 5 {
			for _, w := range words[:rng.IntN(len(words))+1] {
				c := uint64(rng.IntN(4) + 1)
				tab.add([]byte(w), c)
				want[w] += c
			}
		}
		got := map[string]uint64{}
		var order []string
		for _, i := range tab.sorter.sortedOrder(&tab.wordList, 0) {
			w := string(tab.word(int(i)))
			got[w] = tab.counts[i]
			order = append(order, w)
		}
		if !maps.Equal(got, want) || tab.len() != len(want) {
			t.Fatalf("round %d: the table's counts differ from a map's (%d words, want %d)", round, tab.len(), len(want))
		}
		if !slices.Equal(order, slices.Sorted(maps.Keys(want))) {
			t.Fatalf("round %d: the table's order is not the words' byte order", round)
		}
		tab.reset()
		if tab.len() != 0 {
			t.Fatalf("round %d: %d words after reset", round, tab.len())
		}
	}
	// A reset after a small use gives back most of the slots a large one grew.
	for range 2 {
		tab.add([]byte("small"), 1)
		tab.reset()
	}
	if len(tab.slots) > 2*wordTableMin {
		t.Fatalf("%d slots kept after a use of one word", len(tab.slots))
	}
	tab.add([]byte("again"), 2)
	tab.add([]byte("again"), 1)
	if tab.len() != 1 || string(tab.word(0)) != "again" || tab.counts[0] != 3 {
		t.Fatalf("after shrinking: %d words, count %d", tab.len(), tab.counts[0])
	}
}

// A snapshot's order is the previous snapshot's merged with the new words': the same as sorting
// all of them.
func TestWordList_MergeOrder(t *testing.T) {
	rng := rand.New(rand.NewPCG(10, 11))
	words, counts, _ := randomWords(rng, 3000)
	tab := newWordTable()
	var order []uint32
	for from := 0; from < len(words); {
		to := min(len(words), from+1+rng.IntN(700))
		for i := from; i < to; i++ {
			tab.add([]byte(words[i]), counts[i])
		}
		var s wordSorter
		order = tab.mergeOrder(order, s.sortedOrder(&tab.wordList, from))
		var all wordSorter
		if !slices.Equal(order, all.sortedOrder(&tab.wordList, 0)) {
			t.Fatalf("after %d words: the merged order differs from a full sort", to)
		}
		from = to
	}
}

// topWords ranks like a full sort by count descending, then word ascending.
func TestTopWords(t *testing.T) {
	rng := rand.New(rand.NewPCG(12, 13))
	tab := newWordTable()
	words, _, _ := randomWords(rng, 1500)
	for _, w := range words {
		tab.add([]byte(w), uint64(1+rng.IntN(20))) // many ties
	}
	all := make([]uint32, tab.len())
	for i := range all {
		all[i] = uint32(i)
	}
	slices.SortFunc(all, func(a, b uint32) int {
		if tab.counts[a] != tab.counts[b] {
			if tab.counts[a] > tab.counts[b] {
				return -1
			}
			return 1
		}
		return bytes.Compare(tab.word(int(a)), tab.word(int(b)))
	})
	for _, k := range []int{0, 1, 2, 10, 999, 1500, 5000} {
		if got := topWords(&tab.wordList, k); !slices.Equal(got, all[:min(k, len(all))]) {
			t.Fatalf("top %d: %v, want %v", k, got[:min(5, len(got))], all[:min(5, k)])
		}
	}
}

// FuzzWordcountPartialFormats checks that the two formats accept the same word lists (a list with
// a space in a word, or a word too long, is refused by both) and, when they do, merge the same.
// The input is words separated by '|'.
func FuzzWordcountPartialFormats(f *testing.F) {
	f.Add([]byte("a|ab|abc|b"))
	f.Add([]byte("a\u3001|a\u3000"))
	f.Add([]byte("x\xe3|x\xe3\x80\x80|x\xe3\x80\x81"))
	f.Add([]byte("abcdefgh|abcdefghi|abcdefgh\x00|" + strings.Repeat("q", 30) + "|" + strings.Repeat("q", 31)))
	f.Add([]byte("a b|c"))
	f.Fuzz(func(t *testing.T, data []byte) {
		var words []string
		seen := map[string]bool{}
		for _, w := range bytes.Split(data, []byte("|")) {
			if len(w) == 0 || len(w) > wordcountMaxWordBytes || seen[string(w)] {
				continue
			}
			seen[string(w)] = true
			words = append(words, string(w))
		}
		counts := make([]uint64, len(words))
		var total uint64
		for i := range counts {
			counts[i] = uint64(1 + i%3)
			total += counts[i]
		}
		ws, cs := sortedWords(words, counts)
		v1, v2 := encodeV1(total, ws, cs), encodeV2(total, words, counts)
		_, err1 := decodeWordcountPartial(v1)
		_, err2 := decodeWordcountPartial(v2)
		if (err1 == nil) != (err2 == nil) {
			t.Fatalf("%q: version 1 says %v, version 2 says %v", words, err1, err2)
		}
		if err1 != nil {
			return
		}
		var encs [][]byte
		for _, p := range [][]byte{v1, v2} {
			agg, _ := wordcount{}.NewAggregate(json.RawMessage(`{"container":"corpus"}`))
			if err := agg.Merge(p); err != nil {
				t.Fatal(err)
			}
			enc, _ := agg.MarshalBinary()
			encs = append(encs, enc)
		}
		if !bytes.Equal(encs[0], encs[1]) || !bytes.Equal(encs[1], v2) {
			t.Fatalf("%q: the formats merge differently", words)
		}
	})
}
