package joblog

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"
)

// Handler is a slog.Handler that keeps a job's lines for its log: what a worker gives job
// code as env.Logger() for one shard attempt. Lines are buffered and written by Flush (a worker
// flushes when the attempt ends), at most MaxBufferedLines of them; the rest are counted and
// reported by one line.
type Handler struct {
	s     *jobLogSink
	attrs []slog.Attr
	group string
}

// MaxBufferedLines bounds the lines one shard attempt keeps between flushes.
const MaxBufferedLines = 1000

type jobLogSink struct {
	log     *Log
	job     string
	base    Line // worker, shard, attempt, trace id
	shard   int  // what base.Shard points at
	level   slog.Leveler
	mu      sync.Mutex
	lines   []Line
	dropped int
}

var _ slog.Handler = (*Handler)(nil)

// NewHandler returns the handler of job's log for one shard attempt on worker (shard < 0:
// a line not about one shard). traceID, when set, goes on every line. Level: default Info.
// A worker makes one a shard attempt: the handler and its sink are one allocation.
func NewHandler(log *Log, job, worker string, shard, attempt int, traceID string, level slog.Leveler) *Handler {
	if level == nil {
		level = slog.LevelInfo
	}
	hs := &struct {
		h Handler
		s jobLogSink
	}{}
	hs.s = jobLogSink{log: log, job: job, base: Line{Worker: worker, Attempt: attempt, TraceID: traceID}, level: level}
	if shard >= 0 {
		hs.s.shard = shard
		hs.s.base.Shard = &hs.s.shard
	}
	hs.h.s = &hs.s
	return &hs.h
}

// Enabled reports whether level is kept.
func (h *Handler) Enabled(_ context.Context, level slog.Level) bool {
	return level >= h.s.level.Level()
}

// Handle buffers r as a line of the job's log.
func (h *Handler) Handle(_ context.Context, r slog.Record) error {
	ln := h.s.base
	ln.At, ln.Level, ln.Msg = r.Time.UTC(), r.Level.String(), r.Message
	if ln.At.IsZero() {
		ln.At = time.Now().UTC()
	}
	add := func(a slog.Attr) {
		a.Value = a.Value.Resolve()
		if a.Equal(slog.Attr{}) {
			return
		}
		if ln.Attrs == nil {
			ln.Attrs = map[string]string{}
		}
		key := a.Key
		if h.group != "" {
			key = h.group + "." + key
		}
		ln.Attrs[key] = a.Value.String()
	}
	for _, a := range h.attrs {
		add(a)
	}
	r.Attrs(func(a slog.Attr) bool { add(a); return true })
	h.s.mu.Lock()
	defer h.s.mu.Unlock()
	if len(h.s.lines) >= MaxBufferedLines {
		h.s.dropped++
		return nil
	}
	h.s.lines = append(h.s.lines, ln)
	return nil
}

// WithAttrs returns a handler whose lines carry attrs too.
func (h *Handler) WithAttrs(attrs []slog.Attr) slog.Handler {
	c := *h
	c.attrs = append(append([]slog.Attr(nil), h.attrs...), attrs...)
	return &c
}

// WithGroup returns a handler whose later attributes are named under group.
func (h *Handler) WithGroup(name string) slog.Handler {
	if name == "" {
		return h
	}
	c := *h
	if c.group != "" {
		name = c.group + "." + name
	}
	c.group = name
	return &c
}

// FlushTimeout bounds Flush's write of an attempt's lines.
const FlushTimeout = 10 * time.Second

// Flush writes the buffered lines to the job's log (one append, within FlushTimeout) and
// empties the buffer. With none buffered it returns at once.
func (h *Handler) Flush(ctx context.Context) error {
	h.s.mu.Lock()
	lines, dropped := h.s.lines, h.s.dropped
	h.s.lines, h.s.dropped = nil, 0
	h.s.mu.Unlock()
	if len(lines) == 0 && dropped == 0 {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, FlushTimeout)
	defer cancel()
	if dropped > 0 {
		ln := h.s.base
		ln.At, ln.Level, ln.Source = time.Now().UTC(), "WARN", "mapagg"
		ln.Msg = fmt.Sprintf("%d more lines of this attempt were dropped (at most %d between flushes)", dropped, MaxBufferedLines)
		lines = append(lines, ln)
	}
	return h.s.log.Append(ctx, h.s.job, lines...)
}
