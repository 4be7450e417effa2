package builtin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"sync"
	"sync/atomic"
	"unicode"
	"unicode/utf8"

	"github.com/mapagg/mapagg/jobs"
)

// wordcount is the built-in job "wordcount": count the words in the blobs of a container whose
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
type wordcount struct{}

var (
	_ jobs.Job         = wordcount{}
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
	// Output is what the job gives: "value" (default) the total and top words as its result;
	// "blob" every word's count as output records in blob storage (a keyed job: `worker output`
	// prints them), the total and top not computed. Words longer than 1,024 bytes are not output.
	Output string `json:"output,omitempty"`
	// Partitions is the number of output blobs with "output":"blob", 1 to 10,000. Optional,
	// default the cluster's (--partitions).
	Partitions int `json:"partitions,omitempty"`
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
func (wordcount) Type() string { return wordcountType }

// Validate checks the parameters without touching storage; errors match ErrBadParams.
func (wordcount) Validate(params json.RawMessage) error {
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
	case p.Output != "" && p.Output != wordcountOutputValue && p.Output != wordcountOutputBlob:
		return p, badParam(wordcountType, "output", `"output" must be %q or %q (got %q)`, wordcountOutputValue, wordcountOutputBlob, p.Output)
	case p.Partitions < 0 || p.Partitions > jobs.MaxPartitions:
		return p, badParam(wordcountType, "partitions", `"partitions" must be between 1 and %d (got %d)`, jobs.MaxPartitions, p.Partitions)
	case p.Partitions != 0 && p.Output != wordcountOutputBlob:
		return p, badParam(wordcountType, "partitions", `"partitions" needs "output": %q`, wordcountOutputBlob)
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
func (wordcount) Split(ctx context.Context, env jobs.Env, params json.RawMessage) ([][]byte, error) {
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
func (wordcount) Map(ctx context.Context, env jobs.Env, task jobs.Task) ([]byte, error) {
	s, err := decodeWordcountShard(task.Shard)
	if err != nil {
		return nil, err
	}
	t := getWordTable()
	defer putWordTable(t)
	total, err := countShardWords(ctx, env, s, t, wordcountChunk)
	if err != nil {
		return nil, err
	}
	return encodeWordcountPartial(total, t), nil
}

// countShardWords counts into t the words starting in the shard's range and returns their number.
// It reads chunk bytes at a time (at least 16: the first chunk must hold the look-behind and the
// first rune of the range).
func countShardWords(ctx context.Context, env jobs.Env, s wordcountShard, t *wordTable, chunk int) (uint64, error) {
	return scanShardWords(ctx, env, s, t, nil, chunk)
}

// scanShardWords is countShardWords giving each word to emit instead of a table when emit is
// not nil (the keyed wordcount).
func scanShardWords(ctx context.Context, env jobs.Env, s wordcountShard, t *wordTable, emit func([]byte), chunk int) (uint64, error) {
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
	var buf []byte
	if chunk == wordcountChunk {
		p := wordReadPool.Get().(*[]byte)
		defer wordReadPool.Put(p)
		buf = *p
	} else {
		buf = make([]byte, max(chunk, 16))
	}
	n, eof, err := readChunk(rc, buf)
	if err != nil {
		return 0, fmt.Errorf("wordcount: read %q at %d: %w", s.Blob, from, err)
	}
	if eof && from+int64(n) < end {
		return 0, tooShort(from + int64(n))
	}
	at := int(s.Offset - from) // index of the range's first byte in buf
	first, prevSpace := firstRuneInRange(buf[:n], at, from == 0)

	sc := wordScanner{end: end, tally: t, emit: emit, inWord: !prevSpace}
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
	tally     *wordTable
	emit      func([]byte) // instead of tally, if set
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
	w := tail
	if len(s.word) > 0 {
		s.word = append(s.word, tail...)
		w = s.word
	}
	if s.emit != nil {
		s.emit(w)
		return
	}
	s.tally.add(w, 1)
}

// wordTablePool keeps the tables of finished Map calls: a shard's table is reused, not regrown.
var wordTablePool = sync.Pool{New: func() any { return newWordTable() }}

// wordReadPool keeps the read buffers (wordcountChunk bytes) of finished Map calls.
var wordReadPool = sync.Pool{New: func() any { b := make([]byte, wordcountChunk); return &b }}

// Tables bigger than this are not kept in wordTablePool (a shard of a huge vocabulary).
const (
	wordPoolMaxSlots = 1 << 17
	wordPoolMaxArena = 4 << 20
)

func getWordTable() *wordTable {
	t := wordTablePool.Get().(*wordTable)
	t.reset()
	return t
}

func putWordTable(t *wordTable) {
	if len(t.slots) <= wordPoolMaxSlots && cap(t.arena) <= wordPoolMaxArena && cap(t.enc) <= 2*wordPoolMaxArena {
		wordTablePool.Put(t)
	}
}

// NewAggregate returns an aggregate summing the shards' counts.
func (wordcount) NewAggregate(params json.RawMessage) (jobs.Aggregate, error) {
	p, err := parseWordcountParams(params)
	if err != nil {
		return nil, err
	}
	return &wordcountAggregate{top: p.Top, tab: newWordTable()}, nil
}

// wordcountAggregate holds every word's count. The counts never sum to more than total, so no
// count can overflow before total does, and Merge checks total.
type wordcountAggregate struct {
	top   int
	total uint64
	tab   *wordTable
	// order is the ascending order of the first words of tab, as the last snapshot sorted them:
	// the next one sorts only the words added since and merges (words are only ever appended),
	// so a checkpoint's sort costs O(new words + vocabulary), not O(V log V). Stored by the
	// snapshot's encoder, in another goroutine.
	order atomic.Pointer[wordOrder]
}

// wordOrder is the ascending order of the first len(order) words of tab.
type wordOrder struct {
	tab   *wordTable
	order []uint32
}

// Merge checks the whole partial first, so a bad one changes nothing, then adds its counts.
func (a *wordcountAggregate) Merge(partial []byte) error {
	p, err := decodeWordcountPartial(partial)
	if err == nil && a.total+p.total < a.total {
		err = errors.New("total overflows")
	}
	if err != nil {
		return fmt.Errorf("%w: wordcount: %v", jobs.ErrBadPartial, err)
	}
	a.total += p.total
	p.addTo(a.tab)
	return nil
}

func (a *wordcountAggregate) MarshalBinary() ([]byte, error) {
	return encodeWordcountPartial(a.total, a.tab), nil
}

// Snapshot copies the counts (8 bytes a word; the words themselves are immutable and only ever
// appended) and leaves sorting and encoding to the returned function, which the coordinator runs
// off its merge loop: a checkpoint of a large vocabulary costs the loop a copy, not a sort.
func (a *wordcountAggregate) Snapshot() func() ([]byte, error) {
	t := a.tab
	n := t.len()
	end := t.offs[n]
	l := &wordList{arena: t.arena[:end:end], offs: t.offs[: n+1 : n+1], keys: t.keys[:n:n], counts: slices.Clone(t.counts)}
	total := a.total
	var prev []uint32
	if p := a.order.Load(); p != nil && p.tab == t && len(p.order) <= n {
		prev = p.order
	}
	return func() ([]byte, error) {
		var s wordSorter
		order := l.mergeOrder(prev, s.sortedOrder(l, len(prev)))
		a.order.Store(&wordOrder{tab: t, order: order})
		return encodeWordcountOrdered(total, l, order), nil
	}
}

func (a *wordcountAggregate) UnmarshalBinary(data []byte) error {
	p, err := decodeWordcountPartial(data)
	if err != nil {
		return fmt.Errorf("%w: wordcount aggregate: %v", jobs.ErrBadCheckpoint, err)
	}
	t := newWordTable()
	p.addTo(t)
	a.total, a.tab = p.total, t
	a.order.Store(nil)
	return nil
}

// Result lists the top words, count descending and then word ascending. Bytes of a word that are
// not valid UTF-8 appear as U+FFFD in the JSON.
func (a *wordcountAggregate) Result() (json.RawMessage, error) {
	l := &a.tab.wordList
	top := topWords(l, a.top)
	res := WordcountResult{Total: a.total, Top: make([]WordFreq, 0, len(top))}
	for _, i := range top {
		res.Top = append(res.Top, WordFreq{Word: string(l.word(int(i))), Count: l.counts[i]})
	}
	return json.Marshal(res)
}

// topWords returns the indices of l's k most frequent words, count descending and then word
// ascending: one pass keeping the best k in a heap, O(V log k).
func topWords(l *wordList, k int) []uint32 {
	// better reports whether word i ranks before word j.
	better := func(i, j uint32) bool {
		if l.counts[i] != l.counts[j] {
			return l.counts[i] > l.counts[j]
		}
		return l.compare(int(i), int(j)) < 0
	}
	k = min(k, l.len())
	h := make([]uint32, 0, k) // a heap whose root is the worst word kept
	down := func(i int) {
		for {
			worst := i
			for _, c := range []int{2*i + 1, 2*i + 2} {
				if c < len(h) && better(h[worst], h[c]) {
					worst = c
				}
			}
			if worst == i {
				return
			}
			h[i], h[worst] = h[worst], h[i]
			i = worst
		}
	}
	for i := range uint32(l.len()) {
		switch {
		case len(h) < k:
			h = append(h, i)
			for c := len(h) - 1; c > 0 && better(h[(c-1)/2], h[c]); c = (c - 1) / 2 {
				h[c], h[(c-1)/2] = h[(c-1)/2], h[c]
			}
		case k > 0 && better(i, h[0]):
			h[0] = i
			down(0)
		}
	}
	slices.SortFunc(h, func(i, j uint32) int {
		if better(i, j) {
			return -1
		}
		return 1
	})
	return h
}
