package shuffle

import (
	"bytes"
	"context"
	"iter"
)

// cursor is a sorted stream of records: a run being read, or a sorted in-memory buffer.
type cursor interface {
	Next() bool
	Key() []byte
	Value() []byte
	Err() error
}

// merger is a k-way merge of sorted cursors, one key at a time. Memory: the cursors' buffers
// and a copy of the current key; nothing grows with the number of keys or values.
type merger struct {
	h   cursorHeap
	key []byte
	err error
	seq iter.Seq[[]byte] // the current key's values (values), made once
}

// cursorHeap is a binary min-heap of cursors by their current key, kept beside each cursor
// with its first 8 bytes (keyPrefix), so that a compare makes no interface call and most
// compares read no key bytes. It moves entries as container/heap does (Init, Fix at the root,
// Pop), without that package's interface calls, which were a quarter of a merge's time.
type cursorHeap []heapItem

type heapItem struct {
	pfx uint64
	key []byte
	c   cursor
}

func (h cursorHeap) less(i, j int) bool {
	if h[i].pfx != h[j].pfx {
		return h[i].pfx < h[j].pfx
	}
	return bytes.Compare(h[i].key, h[j].key) < 0
}

// down moves entry i down to its place.
func (h cursorHeap) down(i int) {
	for {
		l := 2*i + 1
		if l >= len(h) {
			return
		}
		j := l
		if r := l + 1; r < len(h) && h.less(r, l) {
			j = r
		}
		if !h.less(j, i) {
			return
		}
		h[i], h[j] = h[j], h[i]
		i = j
	}
}

func newMerger(cs []cursor) *merger {
	m := &merger{h: make(cursorHeap, 0, len(cs))}
	for _, c := range cs {
		if c.Next() {
			k := c.Key()
			m.h = append(m.h, heapItem{keyPrefix(k), k, c})
		} else if err := c.Err(); err != nil && m.err == nil {
			m.err = err
		}
	}
	for i := len(m.h)/2 - 1; i >= 0; i-- {
		m.h.down(i)
	}
	m.seq = m.valueSeq
	return m
}

// advance moves the smallest cursor on, keeping the heap in order.
func (m *merger) advance() {
	c := m.h[0].c
	if c.Next() {
		m.h[0].key = c.Key()
		m.h[0].pfx = keyPrefix(m.h[0].key)
		m.h.down(0)
		return
	}
	if err := c.Err(); err != nil && m.err == nil {
		m.err = err
	}
	last := len(m.h) - 1
	m.h[0] = m.h[last]
	m.h[last] = heapItem{}
	m.h = m.h[:last]
	m.h.down(0)
}

// nextKey skips what is left of the current key's values and moves to the next key. It returns
// false at the end or on error (see err).
func (m *merger) nextKey() bool {
	for m.err == nil && len(m.h) > 0 && m.key != nil && bytes.Equal(m.h[0].key, m.key) {
		m.advance()
	}
	if m.err != nil || len(m.h) == 0 {
		return false
	}
	m.key = append(m.key[:0], m.h[0].key...)
	if m.key == nil {
		m.key = []byte{}
	}
	return true
}

// values yields the current key's values, each valid until the next.
func (m *merger) values() iter.Seq[[]byte] { return m.seq }

func (m *merger) valueSeq(yield func([]byte) bool) {
	for m.more() {
		ok := yield(m.h[0].c.Value())
		m.advance()
		if !ok {
			return
		}
	}
}

// value is the current key's next value (when more), valid until advance.
func (m *merger) value() []byte { return m.h[0].c.Value() }

// more reports whether the current key has another value: then value is it, and advance moves
// past it.
func (m *merger) more() bool {
	return m.err == nil && len(m.h) > 0 && bytes.Equal(m.h[0].key, m.key)
}

// combined combines the current key's values into acc, with scratch as the other buffer,
// and returns both (for reuse).
func (m *merger) combined(combine func(dst, a, b []byte) ([]byte, error), acc, scratch []byte) ([]byte, []byte, error) {
	acc = append(acc[:0], m.value()...)
	m.advance()
	for m.more() {
		var err error
		if scratch, err = combine(scratch[:0], acc, m.value()); err != nil {
			return acc, scratch, err
		}
		acc, scratch = scratch, acc
		m.advance()
	}
	return acc, scratch, nil
}

// combineTo merges the cursors into emit, one record per key when combine is set (its values
// combined), every record otherwise.
func combineTo(ctx context.Context, cs []cursor, combine func(dst, a, b []byte) ([]byte, error), emit func(key, value []byte) error) (records int64, err error) {
	m := newMerger(cs)
	var acc, scratch []byte
	for keys := 0; m.nextKey(); keys++ {
		if keys%4096 == 0 {
			if err := ctx.Err(); err != nil {
				return records, err
			}
		}
		if combine == nil {
			for m.more() {
				if err := emit(m.key, m.value()); err != nil {
					return records, err
				}
				records++
				m.advance()
			}
			continue
		}
		if acc, scratch, err = m.combined(combine, acc, scratch); err != nil {
			return records, err
		}
		if m.err != nil {
			break
		}
		if err := emit(m.key, acc); err != nil {
			return records, err
		}
		records++
	}
	return records, m.err
}
