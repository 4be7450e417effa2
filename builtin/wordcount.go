package builtin

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/mapagg/mapagg/jobs"
	"io"
	"slices"
	"strings"
	"sync/atomic"
	"unicode"
	"unicode/utf8"
)

// Wordcount is the built-in job "wordcount": count the words in the blobs of a container whose
// names start with a prefix, and rank the most frequent. A word is a maximal run of runes that
// are not unicode.IsSpace, as `wc -w` counts; bytes that are not valid UTF-8 count as non-space.
//
// Shards are byte ranges of blobs, read straight from storage. A word belongs to the shard whose
// range holds its first byte: each shard decodes the rune before its range to learn whether a word
// is already running, skips that word, and reads past its end to finish its own last word. So each
// word is counted exactly once however the ranges cut the text, even through a multi-byte rune.
//
// Words longer than 1,024 bytes count toward the total but are not ranked: a shard reads at most
// that far past its range.
type Wordcount struct{}

var (
	_ jobs.Job         = Wordcount{}
	_ jobs.Snapshotter = (*wordcountAggregate)(nil)
)

// WordcountParams are the parameters of a wordcount job, e.g.
// {"container": "corpus", "prefix": "books/", "top": 10}.
type WordcountParams struct {
	// Container holds the blobs. Required; a valid Azure container name: 3 to 63 characters of
	// a-z, 0-9 and '-', starting with a letter or digit, no '-' at the end or next to another.
	Container string `json:"container" jobs:"required"`
	// Prefix selects the blobs whose names start with it. Optional, default "" (all); at most
	// 1,024 bytes.
	Prefix string `json:"prefix,omitempty"`
	// Top is how many of the most frequent words the result lists. Optional, default 10 when
	// absent or null; 0 ≤ top ≤ 10,000. Encoding this struct always sends it: 0 lists none.
	Top int `json:"top"`
	// ShardBytes is the size of a shard's byte range. Optional, default 8 MiB; 1 byte to 1 GiB,
	// and no more than 1,000,000 shards in all (checked by Split, against the blobs' sizes).
	ShardBytes int64 `json:"shard_bytes,omitempty"`
}

// WordcountResult is the result of a wordcount job.
type WordcountResult struct {
	Total uint64     `json:"total"` // words in all the blobs
	Top   []WordFreq `json:"top"`   // the most frequent words: count descending, then word ascending
}

// WordFreq is a word and how often it occurs.
type WordFreq struct {
	Word  string `json:"word"`
	Count uint64 `json:"count"`
}

// Usage is an example of good parameters.
func (WordcountParams) Usage() string {
	return `{"container": "corpus", "prefix": "books/", "top": 10}`
}

const (
	wordcountType              = "wordcount"
	wordcountDefaultTop        = 10
	wordcountMaxTop            = 10_000
	wordcountDefaultShardBytes = 8 << 20
	wordcountMaxShardBytes     = 1 << 30
	wordcountMaxPrefix         = 1024
	// wordcountMaxWordBytes bounds a ranked word, and so how far a shard reads past its range.
	wordcountMaxWordBytes = 1024
	// wordcountLookBehind is how many bytes before its range a shard reads: enough to decode the
	// rune that ends just before the first rune starting in the range (which may itself start up
	// to 3 bytes before the range).
	wordcountLookBehind = 2 * utf8.UTFMax
	// wordcountChunk is the read buffer of a shard.
	wordcountChunk = 64 << 10
)

// Type returns "wordcount".
func (Wordcount) Type() string { return wordcountType }

// Validate checks the parameters without touching storage; errors match ErrBadParams.
func (Wordcount) Validate(params json.RawMessage) error {
	_, err := parseWordcountParams(params)
	return err
}

func parseWordcountParams(raw json.RawMessage) (WordcountParams, error) {
	var p WordcountParams
	present, err := jobs.DecodeParams(wordcountType, raw, &p)
	if err != nil {
		return p, err
	}
	if !present["top"] {
		p.Top = wordcountDefaultTop
	}
	if !present["shard_bytes"] {
		p.ShardBytes = wordcountDefaultShardBytes
	}
	if reason := jobs.ContainerNameProblem(p.Container); reason != "" {
		return p, badParam(wordcountType, "container", `"container" %s (got %q)`, reason, p.Container)
	}
	switch {
	case len(p.Prefix) > wordcountMaxPrefix:
		return p, badParam(wordcountType, "prefix", `"prefix" must be at most %d bytes (got %d)`, wordcountMaxPrefix, len(p.Prefix))
	case p.Top < 0 || p.Top > wordcountMaxTop:
		return p, badParam(wordcountType, "top", `"top" must be between 0 and %d (got %d)`, wordcountMaxTop, p.Top)
	case p.ShardBytes < 1 || p.ShardBytes > wordcountMaxShardBytes:
		return p, badParam(wordcountType, "shard_bytes", `"shard_bytes" must be between 1 and %d (1 GiB) (got %d)`,
			wordcountMaxShardBytes, p.ShardBytes)
	}
	return p, nil
}

// wordcountShard is a shard of a wordcount job: the words starting in bytes [O, O+N) of blob B.
type wordcountShard struct {
	Container string `json:"c"`
	Blob      string `json:"b"`
	Offset    int64  `json:"o"`
	Len       int64  `json:"n"`
}

// Split lists the blobs and cuts each into ranges of shard_bytes (the last one shorter). Empty
// blobs get no shard; if every blob is empty the job gets one empty shard, so that it has at least
// one. It fails if no blob matches, or if the blobs need more than MaxShards shards.
func (Wordcount) Split(ctx context.Context, env jobs.Env, params json.RawMessage) ([][]byte, error) {
	p, err := parseWordcountParams(params)
	if err != nil {
		return nil, err
	}
	blobs, err := env.ListBlobs(ctx, p.Container, p.Prefix)
	if err != nil {
		return nil, fmt.Errorf("wordcount: list blobs in container %q with prefix %q: %w", p.Container, p.Prefix, err)
	}
	if len(blobs) == 0 {
		return nil, fmt.Errorf("wordcount: no blobs in container %q with prefix %q", p.Container, p.Prefix)
	}
	var count uint64
	for _, b := range blobs {
		if b.Name == "" || b.Size < 0 {
			return nil, fmt.Errorf("wordcount: listing of container %q returned a blob named %q of %d bytes", p.Container, b.Name, b.Size)
		}
		count += ceilDiv(uint64(b.Size), uint64(p.ShardBytes))
		if count > jobs.MaxShards {
			return nil, badParam(wordcountType, "shard_bytes",
				`"shard_bytes" is too small: the %d blobs would need more than %d shards of %d bytes; use a larger "shard_bytes" (at least %d)`,
				len(blobs), jobs.MaxShards, p.ShardBytes, ceilDiv(totalSize(blobs), jobs.MaxShards))
		}
	}
	shards := make([][]byte, 0, max(count, 1))
	add := func(s wordcountShard) error {
		b, err := encodeShardJSON(wordcountType, s)
		if err != nil {
			return fmt.Errorf("%w (blob %q)", err, s.Blob)
		}
		shards = append(shards, b)
		return nil
	}
	for _, b := range blobs {
		for off := int64(0); off < b.Size; off += p.ShardBytes {
			s := wordcountShard{Container: p.Container, Blob: b.Name, Offset: off, Len: min(p.ShardBytes, b.Size-off)}
			if err := add(s); err != nil {
				return nil, err
			}
		}
	}
	if len(shards) == 0 {
		if err := add(wordcountShard{Container: p.Container, Blob: blobs[0].Name}); err != nil {
			return nil, err
		}
	}
	return shards, nil
}

func totalSize(blobs []jobs.BlobInfo) uint64 {
	var n uint64
	for _, b := range blobs {
		n += uint64(b.Size)
	}
	return n
}

func decodeWordcountShard(data []byte) (wordcountShard, error) {
	var s wordcountShard
	if err := decodeShardJSON(wordcountType, data, &s); err != nil {
		return s, err
	}
	switch {
	case jobs.ContainerNameProblem(s.Container) != "":
		return s, fmt.Errorf("%w: wordcount: bad container name %q", jobs.ErrBadShard, s.Container)
	case s.Blob == "":
		return s, fmt.Errorf("%w: wordcount: no blob name", jobs.ErrBadShard)
	case s.Offset < 0 || s.Len < 0 || s.Len > wordcountMaxShardBytes || s.Offset > 1<<62:
		return s, fmt.Errorf("%w: wordcount: range of %d bytes at %d out of bounds", jobs.ErrBadShard, s.Len, s.Offset)
	}
	return s, nil
}

// Map counts the words that start in the shard's range. The partial holds the number of words
// and the count of each word of at most 1,024 bytes.
func (Wordcount) Map(ctx context.Context, env jobs.Env, task jobs.Task) ([]byte, error) {
	s, err := decodeWordcountShard(task.Shard)
	if err != nil {
		return nil, err
	}
	t := newWordTally()
	total, err := countShardWords(ctx, env, s, t, wordcountChunk)
	if err != nil {
		return nil, err
	}
	return encodeWordcountPartial(total, t), nil
}

// countShardWords counts into t the words starting in the shard's range and returns their number.
// It reads chunk bytes at a time (at least 16: the first chunk must hold the look-behind and the
// first rune of the range).
func countShardWords(ctx context.Context, env jobs.Env, s wordcountShard, t *wordTally, chunk int) (uint64, error) {
	if s.Len == 0 {
		return 0, nil
	}
	end := s.Offset + s.Len
	from := max(0, s.Offset-wordcountLookBehind)
	readEnd := end + wordcountMaxWordBytes + utf8.UTFMax
	rc, err := env.ReadRange(ctx, s.Container, s.Blob, from, readEnd-from)
	if err != nil {
		return 0, fmt.Errorf("wordcount: read %q at %d: %w", s.Blob, from, err)
	}
	defer rc.Close()

	tooShort := func(size int64) error {
		return fmt.Errorf("wordcount: blob %q ends at %d, before the end of the shard's range [%d, %d): did it change after the job was split?",
			s.Blob, size, s.Offset, end)
	}
	buf := make([]byte, max(chunk, 16))
	n, eof, err := readChunk(rc, buf)
	if err != nil {
		return 0, fmt.Errorf("wordcount: read %q at %d: %w", s.Blob, from, err)
	}
	if eof && from+int64(n) < end {
		return 0, tooShort(from + int64(n))
	}
	at := int(s.Offset - from) // index of the range's first byte in buf
	first, prevSpace := firstRuneInRange(buf[:n], at, from == 0)

	sc := wordScanner{end: end, tally: t, inWord: !prevSpace}
	pos := from + int64(first) // the position of data[0] in the blob
	data := buf[first:n]
	for {
		used := sc.scan(data, pos, eof)
		if sc.done || eof {
			break
		}
		if err := ctx.Err(); err != nil {
			return 0, err
		}
		rest := copy(buf, data[used:]) // an incomplete rune, carried to the next chunk
		pos += int64(used)
		n, eof, err = readChunk(rc, buf[rest:])
		if err != nil {
			return 0, fmt.Errorf("wordcount: read %q at %d: %w", s.Blob, pos+int64(rest), err)
		}
		if eof && pos+int64(rest+n) < end {
			return 0, tooShort(pos + int64(rest+n))
		}
		data = buf[:rest+n]
	}
	return sc.total, nil
}

// readChunk fills b from r, reporting whether r is exhausted.
func readChunk(r io.Reader, b []byte) (n int, eof bool, err error) {
	n, err = io.ReadFull(r, b)
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return n, true, nil
	}
	return n, false, err
}

// firstRuneInRange finds where the first rune starting at or after index at of buf begins, and
// whether the rune just before it is a space (true at the start of the blob). buf holds the bytes
// from up to wordcountLookBehind before at (from the start of the blob when atStart) to at least
// utf8.UTFMax past at, or to the end of the blob.
//
// Runes are the ones a left-to-right decode of the whole blob sees (utf8.DecodeRune: an invalid
// byte is a rune of width 1). A byte that is not a UTF-8 continuation byte always starts such a
// rune; so the last one at or before at, if within 3 bytes, tells whether at falls inside a rune.
func firstRuneInRange(buf []byte, at int, atStart bool) (first int, prevSpace bool) {
	first = at
	for j := at; j >= 0 && j >= at-(utf8.UTFMax-1); j-- {
		if utf8.RuneStart(buf[j]) {
			if j < at {
				if _, w := utf8.DecodeRune(buf[j:]); j+w > at {
					first = j + w // at is inside the rune at j: the rune belongs to the previous range
				}
			}
			break
		}
	}
	if first == 0 && atStart {
		return 0, true
	}
	r, _ := utf8.DecodeLastRune(buf[:first])
	return first, unicode.IsSpace(r)
}

// asciiSpace marks the ASCII bytes unicode.IsSpace accepts.
var asciiSpace = [256]bool{'\t': true, '\n': true, '\v': true, '\f': true, '\r': true, ' ': true}

// wordScanner counts the words that start before end, fed the text a chunk at a time.
type wordScanner struct {
	end       int64 // words starting here or later belong to the next range
	tally     *wordTally
	total     uint64
	inWord    bool   // the last rune seen is part of a word
	own       bool   // that word started in range: it is counted and collected
	wordStart int64  // where the own word started
	word      []byte // the own word's bytes from earlier chunks
	done      bool   // nothing further can change the counts
}

// scan processes data, whose first byte is at position pos and starts a rune. Unless eof, it
// stops before a rune that may continue past data and returns the bytes it used; the caller feeds
// the rest again with the next chunk. It sets done when the range's last word is finished.
func (s *wordScanner) scan(data []byte, pos int64, eof bool) int {
	start := 0 // index in data where the own word's bytes begin
	i := 0
	for i < len(data) {
		p := pos + int64(i)
		if p >= s.end && !(s.inWord && s.own && p-s.wordStart <= wordcountMaxWordBytes) {
			s.done = true // past the range, and no word of ours left to finish
			return i
		}
		c := data[i]
		w := 1
		var space bool
		if c < utf8.RuneSelf {
			space = asciiSpace[c]
		} else {
			if !eof && !utf8.FullRune(data[i:]) {
				break
			}
			var r rune
			r, w = utf8.DecodeRune(data[i:])
			space = unicode.IsSpace(r)
		}
		if space {
			if s.inWord && s.own {
				s.endWord(data[start:i], p)
			}
			s.inWord = false
		} else if !s.inWord {
			s.inWord, s.own = true, true
			s.total++
			s.wordStart, start = p, i
			s.word = s.word[:0]
		}
		i += w
	}
	if s.inWord && s.own {
		if eof {
			s.endWord(data[start:i], pos+int64(i))
			s.inWord = false
		} else if pos+int64(i)-s.wordStart <= wordcountMaxWordBytes {
			s.word = append(s.word, data[start:i]...)
		}
	}
	if eof {
		s.done = true
	}
	return i
}

// endWord records the own word whose last bytes are tail and which ends before position p.
func (s *wordScanner) endWord(tail []byte, p int64) {
	if p-s.wordStart > wordcountMaxWordBytes {
		return
	}
	if len(s.word) == 0 {
		s.tally.add(tail, 1)
		return
	}
	s.word = append(s.word, tail...)
	s.tally.add(s.word, 1)
}

// wordTally counts words. Looking a word up by its bytes does not allocate.
type wordTally struct {
	index  map[string]int // word → position in words and counts
	words  []string
	counts []uint64
}

func newWordTally() *wordTally { return &wordTally{index: make(map[string]int)} }

func (t *wordTally) add(w []byte, n uint64) {
	if i, ok := t.index[string(w)]; ok {
		t.counts[i] += n
		return
	}
	word := string(w)
	t.index[word] = len(t.words)
	t.words = append(t.words, word)
	t.counts = append(t.counts, n)
}

// byWord returns the positions of the words in ascending byte order.
func (t *wordTally) byWord() []int {
	order := make([]int, len(t.words))
	for i := range order {
		order[i] = i
	}
	slices.SortFunc(order, func(a, b int) int { return strings.Compare(t.words[a], t.words[b]) })
	return order
}

// encodeWordcountPartial writes: total, the number of words, then each word (ascending, as a
// length-prefixed byte string) and its count. Sorting makes the encoding deterministic.
func encodeWordcountPartial(total uint64, t *wordTally) []byte {
	return encodeWordcountOrdered(total, t, t.byWord())
}

// encodeWordcountOrdered is encodeWordcountPartial with the words' ascending order given.
func encodeWordcountOrdered(total uint64, t *wordTally, order []int) []byte {
	size := 2 + 2*binary.MaxVarintLen64
	for _, w := range t.words {
		size += len(w) + 6
	}
	b := appendPartialHeader(make([]byte, 0, size), tagWordcount)
	b = binary.AppendUvarint(b, total)
	b = binary.AppendUvarint(b, uint64(len(t.words)))
	for _, i := range order {
		b = binary.AppendUvarint(b, uint64(len(t.words[i])))
		b = append(b, t.words[i]...)
		b = binary.AppendUvarint(b, t.counts[i])
	}
	return b
}

// wordcountPartial is a decoded partial; its words alias the encoded bytes.
type wordcountPartial struct {
	total  uint64
	words  [][]byte
	counts []uint64
}

// decodeWordcountPartial decodes and checks a partial: words strictly ascending, each 1 to 1,024
// bytes with no space in it, each count at least 1, and the counts summing to at most total.
func decodeWordcountPartial(data []byte) (wordcountPartial, error) {
	var p wordcountPartial
	r := newPartialReader(data, tagWordcount)
	p.total = r.uvarint()
	n := r.uvarint()
	if r.err == nil && n > uint64(r.remaining()/3) { // an entry takes at least 3 bytes
		return p, fmt.Errorf("%d words cannot fit in %d bytes", n, r.remaining())
	}
	p.words = make([][]byte, 0, n)
	p.counts = make([]uint64, 0, n)
	var sum uint64
	for i := uint64(0); i < n && r.err == nil; i++ {
		w := r.bytes(wordcountMaxWordBytes)
		c := r.uvarint()
		if r.err != nil {
			break
		}
		switch {
		case len(w) == 0 || bytes.IndexFunc(w, unicode.IsSpace) >= 0:
			return p, fmt.Errorf("entry %d: %q is not a word", i, w)
		case i > 0 && bytes.Compare(p.words[i-1], w) >= 0:
			return p, fmt.Errorf("entry %d: words out of order", i)
		case c == 0 || c > p.total-sum:
			return p, fmt.Errorf("entry %d: count %d out of range (total %d, %d so far)", i, c, p.total, sum)
		}
		sum += c
		p.words = append(p.words, w)
		p.counts = append(p.counts, c)
	}
	return p, r.finish()
}

// NewAggregate returns an aggregate summing the shards' counts.
func (Wordcount) NewAggregate(params json.RawMessage) (jobs.Aggregate, error) {
	p, err := parseWordcountParams(params)
	if err != nil {
		return nil, err
	}
	return &wordcountAggregate{top: p.Top, tally: newWordTally()}, nil
}

// wordcountAggregate holds every word's count. The counts never sum to more than total, so no
// count can overflow before total does, and Merge checks total.
type wordcountAggregate struct {
	top   int
	total uint64
	tally *wordTally
	// order is the ascending order of the first words of tally, as the last snapshot
	// sorted them: the next one sorts only the words added since and merges (words are only ever
	// appended), so a checkpoint's sort costs O(new words · log + vocabulary), not O(V log V).
	// Stored by the snapshot's encoder, in another goroutine.
	order atomic.Pointer[wordOrder]
}

// wordOrder is the ascending order of the first len(order) words of tally.
type wordOrder struct {
	tally *wordTally
	order []int
}

func (a *wordcountAggregate) Merge(partial []byte) error {
	p, err := decodeWordcountPartial(partial)
	if err == nil && a.total+p.total < a.total {
		err = errors.New("total overflows")
	}
	if err != nil {
		return fmt.Errorf("%w: wordcount: %v", jobs.ErrBadPartial, err)
	}
	a.total += p.total
	for i, w := range p.words {
		a.tally.add(w, p.counts[i])
	}
	return nil
}

func (a *wordcountAggregate) MarshalBinary() ([]byte, error) {
	return encodeWordcountPartial(a.total, a.tally), nil
}

// Snapshot copies the counts (8 bytes a word; the words themselves are immutable and only ever
// appended) and leaves sorting and encoding to the returned function, which the coordinator runs
// off its merge loop: a checkpoint of a large vocabulary costs the loop a copy, not a sort.
func (a *wordcountAggregate) Snapshot() func() ([]byte, error) {
	n := len(a.tally.words)
	t := &wordTally{words: a.tally.words[:n:n], counts: slices.Clone(a.tally.counts)}
	total := a.total
	live := a.tally
	var prev []int
	if p := a.order.Load(); p != nil && p.tally == live && len(p.order) <= n {
		prev = p.order
	}
	return func() ([]byte, error) {
		order := extendOrder(t.words, prev)
		a.order.Store(&wordOrder{tally: live, order: order})
		return encodeWordcountOrdered(total, t, order), nil
	}
}

// extendOrder returns the ascending order of words, given prev, that of words[:len(prev)]: the
// words after are sorted and merged in.
func extendOrder(words []string, prev []int) []int {
	fresh := make([]int, 0, len(words)-len(prev))
	for i := len(prev); i < len(words); i++ {
		fresh = append(fresh, i)
	}
	slices.SortFunc(fresh, func(a, b int) int { return strings.Compare(words[a], words[b]) })
	out := make([]int, 0, len(words))
	i, j := 0, 0
	for i < len(prev) && j < len(fresh) {
		if words[prev[i]] < words[fresh[j]] {
			out = append(out, prev[i])
			i++
		} else {
			out = append(out, fresh[j])
			j++
		}
	}
	out = append(out, prev[i:]...)
	return append(out, fresh[j:]...)
}

func (a *wordcountAggregate) UnmarshalBinary(data []byte) error {
	p, err := decodeWordcountPartial(data)
	if err != nil {
		return fmt.Errorf("%w: wordcount aggregate: %v", jobs.ErrBadCheckpoint, err)
	}
	t := newWordTally()
	for i, w := range p.words {
		t.add(w, p.counts[i])
	}
	a.total, a.tally = p.total, t
	a.order.Store(nil)
	return nil
}

// Result lists the top words, count descending and then word ascending. Bytes of a word that are
// not valid UTF-8 appear as U+FFFD in the JSON.
func (a *wordcountAggregate) Result() (json.RawMessage, error) {
	t := a.tally
	order := make([]int, len(t.words))
	for i := range order {
		order[i] = i
	}
	slices.SortFunc(order, func(x, y int) int {
		if t.counts[x] != t.counts[y] {
			if t.counts[x] > t.counts[y] {
				return -1
			}
			return 1
		}
		return strings.Compare(t.words[x], t.words[y])
	})
	res := WordcountResult{Total: a.total, Top: make([]WordFreq, 0, min(a.top, len(order)))}
	for _, i := range order[:min(a.top, len(order))] {
		res.Top = append(res.Top, WordFreq{Word: t.words[i], Count: t.counts[i]})
	}
	return json.Marshal(res)
}
