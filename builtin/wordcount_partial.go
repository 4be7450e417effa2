package builtin

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math/bits"
	"unicode"
	"unicode/utf8"
)

// A wordcount partial, and a wordcount checkpoint, is: the tag 'W', a format version, the total
// number of words (uvarint), the number of distinct words n (uvarint), then n entries in strictly
// ascending byte order of their words, each word 1 to 1,024 bytes with no space in it, each count
// at least 1, the counts summing to at most the total.
//
// Version 2, written by this build, front-codes the words (sorted words share long prefixes, and
// a 200k-word vocabulary's partials are mostly words): an entry is a head byte s<<4 | l, where s
// is how many leading bytes the word shares with the one before (the most it can: 0 for the
// first word) and l ≥ 1 how many follow, when both are below 16; otherwise a 0 byte, then s and
// l as uvarints. Then the l bytes, then the count (uvarint). That halves a typical partial, and
// makes the order check O(1) an entry: the first new byte must be above the previous word's
// byte at that place.
//
// Version 1, which earlier builds wrote, is still read (their partials, and checkpoints of jobs
// they were running): an entry is the word's length (uvarint), the word, the count (uvarint).
const (
	wordcountV1      = 1
	wordcountV2      = 2
	wordcountVersion = wordcountV2
)

// encodeWordcountPartial encodes t's words and counts as a partial of total words, sorting them
// (which makes the encoding deterministic). It encodes into t's buffer and returns a copy of
// the right size.
func encodeWordcountPartial(total uint64, t *wordTable) []byte {
	t.enc = appendWordcountOrdered(t.enc[:0], total, &t.wordList, t.sorter.sortedOrder(&t.wordList, 0))
	return bytes.Clone(t.enc)
}

// encodeWordcountOrdered is encodeWordcountPartial with the words' ascending order given.
func encodeWordcountOrdered(total uint64, l *wordList, order []uint32) []byte {
	return appendWordcountOrdered(make([]byte, 0, 2+2*binary.MaxVarintLen64+len(l.arena)/2+4*l.len()), total, l, order)
}

// appendWordcountOrdered appends the partial of l's words, in the ascending order given, to b.
func appendWordcountOrdered(b []byte, total uint64, l *wordList, order []uint32) []byte {
	b = append(b, tagWordcount, wordcountVersion)
	b = binary.AppendUvarint(b, total)
	b = binary.AppendUvarint(b, uint64(l.len()))
	var prev []byte
	var prevKey uint64
	for _, i := range order {
		w, key := l.word(int(i)), l.keys[i]
		// The bytes shared with the word before: within the first 8, where the keys first
		// differ (but no further than either word: keys are zero-padded); then byte by byte.
		s := min(bits.LeadingZeros64(prevKey^key)/8, len(prev), len(w))
		for s >= 8 && s < len(prev) && s < len(w) && prev[s] == w[s] {
			s++
		}
		suffix := w[s:]
		if s < 16 && len(suffix) < 16 {
			b = append(b, byte(s<<4|len(suffix)))
		} else {
			b = append(b, 0)
			b = binary.AppendUvarint(b, uint64(s))
			b = binary.AppendUvarint(b, uint64(len(suffix)))
		}
		if len(suffix) <= 8 {
			for _, c := range suffix {
				b = append(b, c)
			}
		} else {
			b = append(b, suffix...)
		}
		if c := l.counts[i]; c < 0x80 {
			b = append(b, byte(c))
		} else {
			b = binary.AppendUvarint(b, c)
		}
		prev, prevKey = w, key
	}
	return b
}

// wordcountPartial is a checked partial: its format version, total and number of words, and its
// entries still encoded (aliasing the partial's bytes).
type wordcountPartial struct {
	version byte
	total   uint64
	n       uint64
	entries []byte
}

// decodeWordcountPartial checks a partial (of either version) without allocating; addTo then
// adds the entries it checked.
func decodeWordcountPartial(data []byte) (wordcountPartial, error) {
	var p wordcountPartial
	switch {
	case len(data) < 2:
		return p, fmt.Errorf("%d bytes, too short", len(data))
	case data[0] != tagWordcount:
		return p, fmt.Errorf("tag %q, want %q (a partial of another job type?)", data[0], tagWordcount)
	case data[1] != wordcountV1 && data[1] != wordcountV2:
		return p, fmt.Errorf("format version %d, this build reads %d and %d", data[1], wordcountV1, wordcountV2)
	}
	p.version = data[1]
	r := &partialReader{b: data[2:]}
	p.total = r.uvarint()
	p.n = r.uvarint()
	if r.err != nil {
		return p, r.err
	}
	if p.n > uint64(r.remaining()/3) { // an entry takes at least 3 bytes
		return p, fmt.Errorf("%d words cannot fit in %d bytes", p.n, r.remaining())
	}
	p.entries = r.b
	if p.valid() {
		return p, nil
	}
	return p, p.problem()
}

// valid reports whether p's entries are well formed: the fast check of every partial merged.
// problem says what is wrong with entries it rejects.
func (p wordcountPartial) valid() bool {
	if p.version == wordcountV1 {
		return p.validV1()
	}
	var w frontWord
	var buf [wordcountMaxWordBytes]byte
	var sum uint64
	b := p.entries
	for i := range p.n {
		s, suffix, c, rest, ok := frontEntryFast(b)
		if !ok {
			s, suffix, c, rest, ok = nextFrontEntry(b)
		}
		if !ok || len(suffix) == 0 || s > w.n || s+len(suffix) > wordcountMaxWordBytes || c == 0 || c > p.total-sum ||
			i > 0 && s < w.n && suffix[0] <= w.byteAt(s) {
			return false
		}
		if k, ok := shortKey(w.key, s, suffix); ok {
			w.key, w.n = k, s+len(suffix)
		} else {
			w.nextSlow(s, suffix)
		}
		for _, x := range suffix {
			// Only bytes other than printable ASCII can make or complete a space (the shared
			// bytes were checked with the word before; see hasSpaceFrom).
			if x-'!' > '~'-'!' {
				if hasSpace(w.appendFrom(buf[:0], runeBoundary(w.byteAt, s))) {
					return false
				}
				break
			}
		}
		sum += c
		b = rest
	}
	return len(b) == 0
}

func (p wordcountPartial) validV1() bool {
	b := p.entries
	var sum, prevKey uint64
	var prev []byte
	for i := range p.n {
		w, c, rest, ok := nextWordEntry(b)
		if !ok || len(w) == 0 || c == 0 || c > p.total-sum {
			return false
		}
		for _, x := range w {
			// Every space is an ASCII byte below '!' or starts with a byte from 0xC2 up (U+0085).
			if x-'!' >= 0xC2-'!' {
				if hasSpace(w) {
					return false
				}
				break
			}
		}
		key := wordKey(w)
		if i > 0 && (key < prevKey || key == prevKey && bytes.Compare(prev, w) >= 0) {
			return false
		}
		sum += c
		prev, prevKey, b = w, key, rest
	}
	return len(b) == 0
}

// problem describes what is wrong with entries that valid rejected.
func (p wordcountPartial) problem() error {
	r := &partialReader{b: p.entries}
	var sum uint64
	var prev []byte                               // version 1: the word before
	cur := make([]byte, 0, wordcountMaxWordBytes) // version 2: the word being read
	for i := uint64(0); i < p.n && r.err == nil; i++ {
		var w []byte
		var space bool
		if p.version == wordcountV1 {
			w = r.bytes(wordcountMaxWordBytes)
			space = hasSpace(w)
		} else {
			s, suffix, rest, ok := frontHead(r.b)
			switch {
			case !ok:
				return fmt.Errorf("entry %d: truncated, or a length above %d", i, wordcountMaxWordBytes)
			case s > len(cur):
				return fmt.Errorf("entry %d: shares %d bytes with a word of %d", i, s, len(cur))
			case len(suffix) == 0:
				return fmt.Errorf("entry %d: no bytes after the shared ones", i)
			case s+len(suffix) > wordcountMaxWordBytes:
				return fmt.Errorf("entry %d: a word of %d bytes, the limit is %d", i, s+len(suffix), wordcountMaxWordBytes)
			case s < len(cur) && suffix[0] == cur[s]:
				return fmt.Errorf("entry %d: shares more than the %d bytes it says with the word before", i, s)
			case s < len(cur) && suffix[0] < cur[s]:
				return fmt.Errorf("entry %d: words out of order", i)
			}
			cur = append(cur[:s], suffix...)
			w = cur
			space = hasSpace(cur[runeBoundary(func(j int) byte { return cur[j] }, s):])
			r.b = rest
		}
		c := r.uvarint()
		if r.err != nil {
			break
		}
		switch {
		case len(w) == 0 || space:
			return fmt.Errorf("entry %d: %q is not a word", i, w)
		case p.version == wordcountV1 && i > 0 && bytes.Compare(prev, w) >= 0:
			return fmt.Errorf("entry %d: words out of order", i)
		case c == 0 || c > p.total-sum:
			return fmt.Errorf("entry %d: count %d out of range (total %d, %d so far)", i, c, p.total, sum)
		}
		sum += c
		prev = w
	}
	if err := r.finish(); err != nil {
		return err
	}
	return errors.New("malformed entries")
}

// runeBoundary returns where to decode a front-coded word from to check the runes holding its
// bytes from s on, given its byte at each index: the last of the bytes s-3..s that is not a
// UTF-8 continuation byte, else s. Such a byte starts a rune in a decode of the whole word (a
// valid sequence never holds one after its first byte), and any rune holding a byte from s on
// starts there or later (a rune is at most 4 bytes). The runes before it decode as they did in
// the word before, which was checked: a decode before s looks past s only into a rune that holds
// a byte from s on, or to find that the byte at s does not continue it, which it then ends as an
// invalid byte (no space) — and when the new bytes are all printable ASCII, no rune can change
// into a space, so valid checks only words with other new bytes. Checking from here keeps a
// partial of long words that differ in their last bytes linear to check.
func runeBoundary(byteAt func(int) byte, s int) int {
	for j := s; j >= max(0, s-(utf8.UTFMax-1)); j-- {
		if utf8.RuneStart(byteAt(j)) {
			return j
		}
	}
	return s
}

// frontHead reads the head and the new bytes of a version 2 entry: s, how many bytes the word
// shares with the one before, and the bytes after them (aliasing b). ok is false if b does not
// start with an entry or a length is above wordcountMaxWordBytes.
func frontHead(b []byte) (s int, suffix, rest []byte, ok bool) {
	if len(b) == 0 {
		return 0, nil, nil, false
	}
	h := b[0]
	b = b[1:]
	var shared, l uint64
	if h&0x0F != 0 {
		shared, l = uint64(h>>4), uint64(h&0x0F)
	} else {
		var k int
		if h != 0 {
			return 0, nil, nil, false
		}
		if shared, k = binary.Uvarint(b); k <= 0 {
			return 0, nil, nil, false
		}
		b = b[k:]
		if l, k = binary.Uvarint(b); k <= 0 {
			return 0, nil, nil, false
		}
		b = b[k:]
	}
	if shared > wordcountMaxWordBytes || l > wordcountMaxWordBytes || l > uint64(len(b)) {
		return 0, nil, nil, false
	}
	return int(shared), b[:l], b[l:], true
}

// nextFrontEntry reads a version 2 entry: frontHead, then the count.
func nextFrontEntry(b []byte) (s int, suffix []byte, c uint64, rest []byte, ok bool) {
	if s, suffix, b, ok = frontHead(b); !ok {
		return 0, nil, 0, nil, false
	}
	if c, b, ok = nextCount(b); !ok {
		return 0, nil, 0, nil, false
	}
	return s, suffix, c, b, true
}

// frontEntryFast is nextFrontEntry for the common entry, small enough to be inlined: a one-byte
// head and a one-byte count. ok is false for any other (which nextFrontEntry then reads).
func frontEntryFast(b []byte) (s int, suffix []byte, c uint64, rest []byte, ok bool) {
	if len(b) == 0 || b[0]&0x0F == 0 {
		return 0, nil, 0, nil, false
	}
	l := int(b[0] & 0x0F)
	if len(b) <= l+1 || b[l+1] >= 0x80 {
		return 0, nil, 0, nil, false
	}
	return int(b[0] >> 4), b[1 : l+1], uint64(b[l+1]), b[l+2:], true
}

// frontWord follows the words of a version 2 partial, entry by entry: the current word's key
// (its first 8 bytes) and its bytes from the 9th on. A word of at most 8 bytes, the common one,
// is never written out byte by byte.
type frontWord struct {
	key  uint64
	n    int                         // the word's length
	tail [wordcountMaxWordBytes]byte // tail[j] is the word's byte j, for 8 ≤ j < n
}

// next makes w the next word: the first s bytes of w (s ≤ w.n), then suffix. The loops call
// shortKey themselves, which the compiler inlines, and next only when it fails.
func (w *frontWord) next(s int, suffix []byte) {
	if k, ok := shortKey(w.key, s, suffix); ok {
		w.key, w.n = k, s+len(suffix)
		return
	}
	w.nextSlow(s, suffix)
}

// shortKey returns the key of the first s bytes of the word whose key is prev followed by suffix,
// when that word has at most 8 bytes and suffix 8 bytes of capacity to load at once; else ok is
// false.
func shortKey(prev uint64, s int, suffix []byte) (key uint64, ok bool) {
	if s+len(suffix) > 8 || cap(suffix) < 8 {
		return 0, false
	}
	k := binary.BigEndian.Uint64(suffix[:8]) &^ (^uint64(0) >> uint(8*len(suffix)))
	return prev&^(^uint64(0)>>uint(8*s)) | k>>uint(8*s), true
}

func (w *frontWord) nextSlow(s int, suffix []byte) {
	if s < 8 {
		w.key = w.key&^(^uint64(0)>>uint(8*s)) | wordKey(suffix)>>uint(8*s)
	}
	w.n = s + len(suffix)
	if w.n > 8 {
		from := max(s, 8)
		copy(w.tail[from:w.n], suffix[from-s:])
	}
}

// byteAt returns the word's byte i (i < w.n).
func (w *frontWord) byteAt(i int) byte {
	if i < 8 {
		return byte(w.key >> uint(56-8*i))
	}
	return w.tail[i]
}

// appendFrom appends the word's bytes from index from on to b.
func (w *frontWord) appendFrom(b []byte, from int) []byte {
	for i := from; i < min(w.n, 8); i++ {
		b = append(b, w.byteAt(i))
	}
	if w.n > 8 {
		b = append(b, w.tail[max(from, 8):w.n]...)
	}
	return b
}

// appendTo appends the word to b.
func (w *frontWord) appendTo(b []byte) []byte {
	b = binary.BigEndian.AppendUint64(b, w.key)
	b = b[:len(b)-8+min(w.n, 8)]
	if w.n > 8 {
		b = append(b, w.tail[8:w.n]...)
	}
	return b
}

// nextCount reads a uvarint, most often one byte.
func nextCount(b []byte) (c uint64, rest []byte, ok bool) {
	if len(b) > 0 && b[0] < 0x80 {
		return uint64(b[0]), b[1:], true
	}
	c, k := binary.Uvarint(b)
	if k <= 0 {
		return 0, nil, false
	}
	return c, b[k:], true
}

// nextWordEntry reads a version 1 entry: a word of at most wordcountMaxWordBytes bytes (aliasing
// b) and its count. ok is false if b does not start with one.
func nextWordEntry(b []byte) (w []byte, c uint64, rest []byte, ok bool) {
	n, b, ok := nextCount(b)
	if !ok || n > wordcountMaxWordBytes || n > uint64(len(b)) {
		return nil, 0, nil, false
	}
	w, b = b[:n], b[n:]
	if c, b, ok = nextCount(b); !ok {
		return nil, 0, nil, false
	}
	return w, c, b, true
}

// hasSpace reports whether w holds a rune that unicode.IsSpace accepts (decoding w as
// utf8.DecodeRune does, an invalid byte a rune of its own).
func hasSpace(w []byte) bool {
	for i := 0; i < len(w); {
		if c := w[i]; c < utf8.RuneSelf {
			if asciiSpace[c] {
				return true
			}
			i++
			continue
		}
		r, n := utf8.DecodeRune(w[i:])
		if unicode.IsSpace(r) {
			return true
		}
		i += n
	}
	return false
}

// wordBatch is the scratch memory of addTo: a batch of entries on their way into a table.
type wordBatch struct {
	words [wordBatchSize][]byte
	cs    [wordBatchSize]uint64
	keys  [wordBatchSize]uint64
	hs    [wordBatchSize]uint64
	tags  [wordBatchSize]uint32
	idx   [wordBatchSize]uint32
	buf   [wordBatchSize][wordcountMaxWordBytes]byte // buf[i] holds words[i] of a version 2 partial
}

const wordBatchSize = 16

// addTo adds the checked partial's counts to t. On a large table a look-up is a cache miss or
// two (the slot, then the count); entries go through in batches so that the misses of a batch
// overlap: first each entry's slot is loaded, then each found word's count, then the counts are
// added (and new words inserted).
func (p wordcountPartial) addTo(t *wordTable) {
	var bt wordBatch
	var fw frontWord
	b := p.entries
	for left := p.n; left > 0; {
		n := int(min(left, wordBatchSize))
		left -= uint64(n)
		for i := range n {
			if p.version == wordcountV1 {
				bt.words[i], bt.cs[i], b, _ = nextWordEntry(b)
				bt.keys[i] = wordKey(bt.words[i])
				continue
			}
			s, suffix, c, rest, ok := frontEntryFast(b)
			if !ok {
				s, suffix, c, rest, _ = nextFrontEntry(b)
			}
			if k, ok := shortKey(fw.key, s, suffix); ok {
				fw.key, fw.n = k, s+len(suffix)
			} else {
				fw.nextSlow(s, suffix)
			}
			// One 8-byte store of the key, which the table's 8-byte load of the key then reads.
			bt.words[i] = fw.appendTo(bt.buf[i][:0])
			bt.keys[i], bt.cs[i], b = fw.key, c, rest
		}
		bt.add(t, n)
	}
}

// add adds the first n entries of bt to t.
func (bt *wordBatch) add(t *wordTable, n int) {
	if len(t.slots) == 0 {
		t.grow()
	}
	mask := uint64(len(t.slots) - 1)
	for i := range n {
		bt.hs[i], bt.tags[i] = t.hash(bt.words[i], bt.keys[i])
	}
	// Short loops of independent loads: the processor has them all in flight at once.
	var sink uint32
	for i := range n {
		sink += t.slots[bt.hs[i]&mask].idx
	}
	for i := range n {
		bt.idx[i] = t.lookup(bt.words[i], bt.keys[i], bt.hs[i], bt.tags[i])
	}
	for i := range n {
		if bt.idx[i] != 0 {
			sink += uint32(t.counts[bt.idx[i]-1])
		}
	}
	for i := range n {
		if bt.idx[i] != 0 {
			t.counts[bt.idx[i]-1] += bt.cs[i]
		} else {
			t.insert(bt.words[i], bt.keys[i], bt.hs[i], bt.tags[i], bt.cs[i])
		}
	}
	wordSink = sink
}

// wordSink keeps the loads addTo issues early from being optimised away.
var wordSink uint32
