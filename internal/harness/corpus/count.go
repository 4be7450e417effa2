package corpus

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"unicode"
	"unicode/utf8"
)

// The single-process counts a keyed wordcount is judged against. Both count words as the
// built-in wordcount does: runs of runes that are not unicode.IsSpace, invalid UTF-8 bytes
// counting as non-space. Both read local files and write word<TAB>count lines in no order.

// CountNaive is the count a newcomer writes: bufio lines, strings.FieldsFunc, a
// map[string]int64, one goroutine. Lines may be of any length.
func CountNaive(files []string, out io.Writer) error {
	counts := make(map[string]int64)
	for _, name := range files {
		f, err := os.Open(name)
		if err != nil {
			return err
		}
		r := bufio.NewReaderSize(f, 1<<20)
		for {
			line, err := r.ReadString('\n')
			for _, w := range strings.FieldsFunc(line, unicode.IsSpace) {
				counts[w]++
			}
			if err == io.EOF {
				break
			}
			if err != nil {
				f.Close()
				return err
			}
		}
		f.Close()
	}
	bw := bufio.NewWriterSize(out, 1<<20)
	for w, n := range counts {
		bw.WriteString(w)
		bw.WriteByte('\t')
		bw.WriteString(strconv.FormatInt(n, 10))
		bw.WriteByte('\n')
	}
	return bw.Flush()
}

// CountFast is the strongest single-process count written here: the files cut into chunks of
// about 4 MiB at ASCII whitespace, one goroutine a core (workers ≤ 0: GOMAXPROCS), each
// scanning bytes into open-addressing tables of its own keyed by an FNV-1a hash computed while
// scanning. Each goroutine's words are split by the hash's top bits into countParts tables, so
// that at the end every goroutine merges and writes out a share of the parts at once (with one
// table a goroutine, one goroutine merged and wrote 5M words alone). On 5M distinct words it
// is still no cheaper in CPU than the naive count (about 20 CPU-s each, 1.1 GiB peak against
// 1.6 with one table): each goroutine sees nearly every word, so the tables are the work; its
// gain is wall time on several cores. The bench reports both counts, and judges against each.
func CountFast(files []string, workers int, out io.Writer) error {
	if workers <= 0 {
		workers = runtime.GOMAXPROCS(0)
	}
	chunks, err := planChunks(files, 4<<20)
	if err != nil {
		return err
	}
	work := make(chan chunk, len(chunks))
	for _, c := range chunks {
		work <- c
	}
	close(work)
	tables := make([]*partTables, workers)
	errs := make([]error, workers)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			t := newPartTables()
			buf := make([]byte, 0, 5<<20)
			for c := range work {
				if err := countChunk(t, c, &buf); err != nil {
					errs[w] = err
					return
				}
			}
			tables[w] = t
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return err
	}
	// Each part: merged into the first goroutine's table, its lines made, by any goroutine.
	lines := make([][]byte, countParts)
	parts := make(chan int, countParts)
	for p := range countParts {
		parts <- p
	}
	close(parts)
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for p := range parts {
				all := tables[0][p]
				for _, ts := range tables[1:] {
					t := ts[p]
					for i := range t.slots {
						if e := &t.slots[i]; e.count > 0 {
							all.add(t.key(e), e.hash, e.count)
						}
					}
				}
				var b []byte
				for i := range all.slots {
					if e := &all.slots[i]; e.count > 0 {
						b = append(append(b, all.key(e)...), '\t')
						b = append(strconv.AppendInt(b, e.count, 10), '\n')
					}
				}
				lines[p] = b
			}
		}()
	}
	wg.Wait()
	for _, b := range lines {
		if _, err := out.Write(b); err != nil {
			return err
		}
	}
	return nil
}

// countParts is how many tables a goroutine of CountFast splits its words into (a power of two:
// the hash's top bits choose).
const countParts = 64

// partTables is one goroutine's words, split by hash into countParts tables.
type partTables [countParts]*wordTable

func newPartTables() *partTables {
	var ts partTables
	for p := range ts {
		ts[p] = newWordTable(1 << 10)
	}
	return &ts
}

func (ts *partTables) add(word []byte, h uint64, n int64) { ts[h>>58].add(word, h, n) }

// wordAdder counts a word whose FNV-1a hash is h: a table, or a goroutine's parts.
type wordAdder interface {
	add(word []byte, h uint64, n int64)
}

// chunk is a byte range of a file that starts and ends at ASCII whitespace (or the file's ends),
// so no word crosses two chunks.
type chunk struct {
	name     string
	off, len int64
}

// planChunks cuts every file into chunks of about size bytes, each boundary moved forward to
// the next ASCII whitespace byte.
func planChunks(files []string, size int64) ([]chunk, error) {
	var out []chunk
	probe := make([]byte, 64<<10)
	for _, name := range files {
		f, err := os.Open(name)
		if err != nil {
			return nil, err
		}
		st, err := f.Stat()
		if err != nil {
			f.Close()
			return nil, err
		}
		start := int64(0)
		for start < st.Size() {
			end := min(start+size, st.Size())
			for end < st.Size() {
				n, err := f.ReadAt(probe, end)
				if i := bytes.IndexFunc(probe[:n], func(r rune) bool { return r < utf8.RuneSelf && asciiSpace[r] }); i >= 0 {
					end += int64(i)
					break
				}
				end += int64(n)
				if err != nil {
					break
				}
			}
			out = append(out, chunk{name: name, off: start, len: end - start})
			start = end
		}
		f.Close()
	}
	return out, nil
}

// asciiSpace marks the ASCII bytes unicode.IsSpace accepts.
var asciiSpace = [utf8.RuneSelf]bool{'\t': true, '\n': true, '\v': true, '\f': true, '\r': true, ' ': true}

// wordTable is an open-addressing hash table of words to counts; keys live in one arena.
type wordTable struct {
	slots []slot
	arena []byte
	n     int
}

type slot struct {
	hash  uint64
	off   uint32
	klen  uint32
	count int64
}

func newWordTable(size int) *wordTable {
	return &wordTable{slots: make([]slot, size), arena: make([]byte, 0, 1<<20)}
}

func (t *wordTable) key(e *slot) []byte { return t.arena[e.off : e.off+e.klen] }

const (
	fnvOffset = 14695981039346656037
	fnvPrime  = 1099511628211
)

// add counts word (whose FNV-1a hash is h) n more times.
func (t *wordTable) add(word []byte, h uint64, n int64) {
	mask := uint64(len(t.slots) - 1)
	for i := h & mask; ; i = (i + 1) & mask {
		e := &t.slots[i]
		if e.count == 0 {
			e.hash, e.off, e.klen, e.count = h, uint32(len(t.arena)), uint32(len(word)), n
			t.arena = append(t.arena, word...)
			if t.n++; t.n*2 > len(t.slots) {
				t.grow()
			}
			return
		}
		if e.hash == h && bytes.Equal(t.key(e), word) {
			e.count += n
			return
		}
	}
}

func (t *wordTable) grow() {
	old := t.slots
	t.slots = make([]slot, 2*len(old))
	mask := uint64(len(t.slots) - 1)
	for _, e := range old {
		if e.count == 0 {
			continue
		}
		i := e.hash & mask
		for t.slots[i].count != 0 {
			i = (i + 1) & mask
		}
		t.slots[i] = e
	}
}

// countChunk reads c into *buf and counts its words into t.
func countChunk(t wordAdder, c chunk, buf *[]byte) error {
	f, err := os.Open(c.name)
	if err != nil {
		return err
	}
	defer f.Close()
	b := slices.Grow((*buf)[:0], int(c.len))[:c.len]
	*buf = b
	if _, err := f.ReadAt(b, c.off); err != nil && !(errors.Is(err, io.EOF)) {
		return fmt.Errorf("read %s at %d: %w", filepath.Base(c.name), c.off, err)
	}
	countBytes(t, b)
	return nil
}

// countBytes counts the words of b, which starts and ends at word boundaries.
func countBytes(t wordAdder, b []byte) {
	start, h := -1, uint64(fnvOffset)
	for i := 0; i < len(b); {
		c := b[i]
		size, space := 1, false
		if c < utf8.RuneSelf {
			space = asciiSpace[c]
		} else {
			var r rune
			r, size = utf8.DecodeRune(b[i:])
			space = r != utf8.RuneError && unicode.IsSpace(r)
		}
		if space {
			if start >= 0 {
				t.add(b[start:i], h, 1)
				start, h = -1, fnvOffset
			}
		} else {
			if start < 0 {
				start = i
			}
			for _, x := range b[i : i+size] {
				h = (h ^ uint64(x)) * fnvPrime
			}
		}
		i += size
	}
	if start >= 0 {
		t.add(b[start:], h, 1)
	}
}

// Files lists the regular files of dir, sorted.
func Files(dir string) ([]string, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var files []string
	for _, e := range ents {
		if e.Type().IsRegular() {
			files = append(files, filepath.Join(dir, e.Name()))
		}
	}
	if len(files) == 0 {
		return nil, fmt.Errorf("no files in %s", dir)
	}
	return files, nil
}
