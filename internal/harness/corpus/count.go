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
// scanning bytes into an open-addressing table of its own keyed by an FNV-1a hash computed
// while scanning, the tables merged at the end.
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
	tables := make([]*wordTable, workers)
	errs := make([]error, workers)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			t := newWordTable(1 << 16)
			buf := make([]byte, 0, 5<<20)
			for c := range work {
				if err := t.countChunk(c, &buf); err != nil {
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
	all := tables[0]
	for _, t := range tables[1:] {
		for i := range t.slots {
			if e := &t.slots[i]; e.count > 0 {
				all.add(t.key(e), e.hash, e.count)
			}
		}
	}
	bw := bufio.NewWriterSize(out, 1<<20)
	line := make([]byte, 0, 64)
	for i := range all.slots {
		if e := &all.slots[i]; e.count > 0 {
			line = append(append(line[:0], all.key(e)...), '\t')
			line = strconv.AppendInt(line, e.count, 10)
			bw.Write(append(line, '\n'))
		}
	}
	return bw.Flush()
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

// countChunk reads c into *buf and counts its words.
func (t *wordTable) countChunk(c chunk, buf *[]byte) error {
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
	t.countBytes(b)
	return nil
}

// countBytes counts the words of b, which starts and ends at word boundaries.
func (t *wordTable) countBytes(b []byte) {
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
