package program

import (
	"bytes"
	"context"
	"io"
	"slices"
)

// combiner collects a map task's output, and when it holds Config.CombineBytes, sorts it by key
// and pipes it through the program's combine role.
type combiner struct {
	p     *Program
	ctx   context.Context
	t     taskSpec
	emit  func(key, value []byte) error
	arena []byte
	recs  []rec
}

// rec is a record in the arena: key at [off, off+klen), value after it.
type rec struct {
	off, klen, vlen int
}

func (c *combiner) add(key, value []byte) error {
	off := len(c.arena)
	c.arena = append(append(c.arena, key...), value...)
	c.recs = append(c.recs, rec{off, len(key), len(value)})
	if len(c.arena)+len(c.recs)*24 >= c.p.cfg.CombineBytes {
		return c.flush()
	}
	return nil
}

func (c *combiner) key(r rec) []byte { return c.arena[r.off : r.off+r.klen] }

// flush combines what is collected and emits the result.
func (c *combiner) flush() error {
	if len(c.recs) == 0 {
		return nil
	}
	slices.SortStableFunc(c.recs, func(a, b rec) int { return bytes.Compare(c.key(a), c.key(b)) })
	feed := func(_ context.Context, w io.Writer) error {
		var line []byte
		for _, r := range c.recs {
			line = AppendEscaped(line[:0], c.key(r))
			line = append(line, '\t')
			line = AppendEscaped(line, c.arena[r.off+r.klen:r.off+r.klen+r.vlen])
			line = append(line, '\n')
			if _, err := w.Write(line); err != nil {
				return err
			}
		}
		return nil
	}
	err := c.p.pipe(c.ctx, c.t, feed, c.emit)
	c.arena, c.recs = c.arena[:0], c.recs[:0]
	return err
}
