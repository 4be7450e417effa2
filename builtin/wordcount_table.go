package builtin

import (
	"bytes"
	"encoding/binary"
	"hash/maphash"
	"math/bits"
	"slices"
)

// wordList is a list of distinct words in the order they were first counted, with their counts.
// The words are stored back to back in one arena, never moved or changed once added, so a prefix
// of the list (its slices cut at a length) stays valid, and may be read by another goroutine,
// while words are appended.
type wordList struct {
	arena  []byte   // the words' bytes, back to back
	offs   []int    // word i is arena[offs[i]:offs[i+1]]; len(offs) = words + 1
	keys   []uint64 // keys[i] is wordKey(word i): its sort prefix
	counts []uint64 // counts[i] is word i's count
}

func (l *wordList) len() int { return len(l.keys) }

func (l *wordList) word(i int) []byte { return l.arena[l.offs[i]:l.offs[i+1]:l.offs[i+1]] }

// wordKey is the first 8 bytes of w, big-endian, zero-padded. Zero-padding keeps byte order:
// wordKey(a) < wordKey(b) implies a < b, and a < b implies wordKey(a) ≤ wordKey(b).
func wordKey(w []byte) uint64 {
	switch {
	case len(w) >= 8:
		return binary.BigEndian.Uint64(w)
	case cap(w) >= 8: // the bytes past w are readable: load 8 and drop the extra ones
		return binary.BigEndian.Uint64(w[:8]) &^ (1<<(64-8*len(w)) - 1)
	}
	var k uint64
	for i, c := range w {
		k |= uint64(c) << (56 - 8*i)
	}
	return k
}

// compare orders words i and j of l by their bytes.
func (l *wordList) compare(i, j int) int {
	if ki, kj := l.keys[i], l.keys[j]; ki != kj {
		if ki < kj {
			return -1
		}
		return 1
	}
	return bytes.Compare(l.word(i), l.word(j))
}

// wordTable counts words: a wordList indexed by an open-addressing hash table. Counting a word
// already present touches one slot (and, for a word longer than 8 bytes, its bytes) and does not
// allocate. Words are at most wordcountMaxWordBytes long.
//
// A Go map[string]int would do, but costs three dependent memory accesses a look-up (control
// word, key string, count) and an allocation a new word; on a vocabulary of 10^5 words the
// look-ups are cache misses and dominated merging (and counting a shard's words, and sorting
// them, dominated its map step). Measured with BenchmarkWordcountCorpus.
type wordTable struct {
	wordList
	sorter wordSorter // for encoding the table's words in order
	enc    []byte     // the last partial encodeWordcountPartial encoded
	seed   maphash.Seed
	seed64 uint64     // seeds the hash of short words
	slots  []wordSlot // a power of two, at most half full; empty until the first word
}

// wordSlot is a slot of the hash table: the word's key and length, part of its hash, and its
// index in the list plus one (0: the slot is empty).
type wordSlot struct {
	key uint64
	tag uint32 // hash bits above the length | the length (at most 1,024 < 2^11)
	idx uint32
}

const (
	wordTagLenBits = 11
	wordTableMin   = 64
)

func newWordTable() *wordTable {
	seed := maphash.MakeSeed()
	return &wordTable{seed: seed, seed64: maphash.Bytes(seed, []byte("wordcount")), wordList: wordList{offs: []int{0}}}
}

// reset empties t, keeping its memory; slots four times more than its last use needed are
// given back, so one shard of a large vocabulary does not make every later reset costly.
func (t *wordTable) reset() {
	if want := max(wordTableMin, 2*len(t.keys)); len(t.slots) > 4*want {
		t.slots = make([]wordSlot, 1<<bits.Len(uint(want-1)))
	} else {
		clear(t.slots)
	}
	t.arena, t.offs, t.keys, t.counts = t.arena[:0], t.offs[:1], t.keys[:0], t.counts[:0]
}

// hash returns the hash and tag of w, whose key is key. A word of at most 8 bytes is its key
// and length, mixed (the splitmix64 finaliser, a bijection, over them xor a random seed): cheaper
// than maphash, which hashes the longer ones.
func (t *wordTable) hash(w []byte, key uint64) (h uint64, tag uint32) {
	if len(w) <= 8 {
		z := key ^ t.seed64 ^ uint64(len(w))
		z = (z ^ z>>30) * 0xbf58476d1ce4e5b9
		z = (z ^ z>>27) * 0x94d049bb133111eb
		h = z ^ z>>31
	} else {
		h = maphash.Bytes(t.seed, w)
	}
	return h, uint32(h>>32)&^(1<<wordTagLenBits-1) | uint32(len(w))
}

// add counts n more of w (1 to wordcountMaxWordBytes bytes; not retained).
func (t *wordTable) add(w []byte, n uint64) {
	key := wordKey(w)
	h, tag := t.hash(w, key)
	if i := t.lookup(w, key, h, tag); i != 0 {
		t.counts[i-1] += n
		return
	}
	t.insert(w, key, h, tag, n)
}

// lookup returns the index plus one of w (whose key, hash and tag are given), or 0 if t does
// not hold it.
func (t *wordTable) lookup(w []byte, key, h uint64, tag uint32) uint32 {
	if len(t.slots) == 0 {
		return 0
	}
	mask := uint64(len(t.slots) - 1)
	for i := h & mask; ; i = (i + 1) & mask {
		s := &t.slots[i]
		if s.idx == 0 {
			return 0
		}
		if s.key == key && s.tag == tag && (len(w) <= 8 || bytes.Equal(t.word(int(s.idx - 1))[8:], w[8:])) {
			return s.idx
		}
	}
}

// insert adds w (whose key, hash and tag are given) with count n; t must not hold w.
func (t *wordTable) insert(w []byte, key, h uint64, tag uint32, n uint64) {
	if 2*(len(t.keys)+1) > len(t.slots) {
		t.grow()
	}
	t.place(key, h, tag, uint32(len(t.keys)+1))
	t.arena = append(t.arena, w...)
	t.offs = append(t.offs, len(t.arena))
	t.keys = append(t.keys, key)
	t.counts = append(t.counts, n)
}

// place puts a slot for an absent word in the first free slot of its probe sequence.
func (t *wordTable) place(key, h uint64, tag, idx uint32) {
	mask := uint64(len(t.slots) - 1)
	i := h & mask
	for t.slots[i].idx != 0 {
		i = (i + 1) & mask
	}
	t.slots[i] = wordSlot{key: key, tag: tag, idx: idx}
}

// grow doubles the slots (to at least wordTableMin) and re-places every word.
func (t *wordTable) grow() {
	t.slots = make([]wordSlot, max(wordTableMin, 2*len(t.slots)))
	for i := range t.keys {
		h, tag := t.hash(t.word(i), t.keys[i])
		t.place(t.keys[i], h, tag, uint32(i+1))
	}
}

// wordRef is a word's sort key and index, what wordSorter sorts.
type wordRef struct {
	key uint64
	idx uint32
}

// wordSorter sorts words, keeping its scratch memory from one sort to the next. The zero value
// is ready to use.
type wordSorter struct {
	refs, buf []wordRef
	order     []uint32
}

// sortedOrder returns the indices of l's words from..len ascending by their bytes. The result
// is s's memory: valid until s sorts again.
func (s *wordSorter) sortedOrder(l *wordList, from int) []uint32 {
	refs := s.refs[:0]
	for i := from; i < l.len(); i++ {
		refs = append(refs, wordRef{key: l.keys[i], idx: uint32(i)})
	}
	s.refs = refs
	if cap(s.buf) < len(refs) {
		s.buf = make([]wordRef, len(refs))
	}
	refs = sortWordRefs(refs, s.buf[:len(refs)])
	// Words sharing their first 8 bytes (or equal to within trailing zero bytes) tie on the key:
	// order each run of ties by the words' bytes.
	for i := 0; i < len(refs); {
		j := i + 1
		for j < len(refs) && refs[j].key == refs[i].key {
			j++
		}
		if j-i > 1 {
			slices.SortFunc(refs[i:j], func(a, b wordRef) int { return bytes.Compare(l.word(int(a.idx)), l.word(int(b.idx))) })
		}
		i = j
	}
	order := s.order[:0]
	for _, r := range refs {
		order = append(order, r.idx)
	}
	s.order = order
	return order
}

// sortWordRefs sorts refs by key (ties in any order), using buf (as long as refs) as scratch,
// and returns the sorted slice (refs or buf): a least-significant-digit radix sort a byte at a
// time, skipping the bytes every key shares (the trailing zeros of short words, a common first
// letter), so linear in the number of words; small inputs use a comparison sort.
func sortWordRefs(refs, buf []wordRef) []wordRef {
	if len(refs) < 256 {
		slices.SortFunc(refs, func(a, b wordRef) int {
			switch {
			case a.key < b.key:
				return -1
			case a.key > b.key:
				return 1
			}
			return 0
		})
		return refs
	}
	or, and := uint64(0), ^uint64(0)
	for _, r := range refs {
		or |= r.key
		and &= r.key
	}
	differ := or ^ and // the bits that are not the same in every key
	src, dst := refs, buf
	var counts [256]int
	for shift := 0; shift < 64; shift += 8 {
		if byte(differ>>shift) == 0 {
			continue
		}
		clear(counts[:])
		for _, r := range src {
			counts[byte(r.key>>shift)]++
		}
		sum := 0
		for b, c := range counts {
			counts[b], sum = sum, sum+c
		}
		for _, r := range src {
			b := byte(r.key >> shift)
			dst[counts[b]] = r
			counts[b]++
		}
		src, dst = dst, src
	}
	return src
}

// mergeOrder merges two ascending orders of distinct words of l into one.
func (l *wordList) mergeOrder(a, b []uint32) []uint32 {
	out := make([]uint32, 0, len(a)+len(b))
	i, j := 0, 0
	for i < len(a) && j < len(b) {
		if l.compare(int(a[i]), int(b[j])) < 0 {
			out = append(out, a[i])
			i++
		} else {
			out = append(out, b[j])
			j++
		}
	}
	out = append(out, a[i:]...)
	return append(out, b[j:]...)
}
