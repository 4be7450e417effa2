package shuffle

import (
	"context"
	"fmt"
	"io"

	"github.com/mapagg/mapagg/jobs"
)

// Storage is where runs and outputs live: a blob container in a cluster. Put stores what r
// yields under name, replacing nothing half-written: a Put whose reader fails stores nothing.
type Storage interface {
	Put(ctx context.Context, name string, r io.Reader) error
	Get(ctx context.Context, name string) (io.ReadCloser, error)
}

// Map runs one map task of job: Map over the shard into a MapBuffer, then one sorted run per
// partition through sink. A panic in the job's code is the task's error.
func Map(ctx context.Context, job jobs.KeyedJob, env jobs.Env, task jobs.Task, sink Sink, cfg MapConfig) (stats MapStats, err error) {
	b, err := NewMapBuffer(cfg, job.Combiner())
	if err != nil {
		return stats, err
	}
	defer b.Close()
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("%s: panic in map task: %v", job.Type(), r)
		}
		stats = b.Stats()
	}()
	if err := job.Map(ctx, env, task, b.Add); err != nil {
		return stats, err
	}
	return stats, b.Finish(ctx, sink)
}

// StorageSink is a Sink that uploads partition p's run as name(p), streaming.
func StorageSink(ctx context.Context, st Storage, name func(partition int) string) Sink {
	return func(p int) (io.WriteCloser, error) { return PutWriter(ctx, st, name(p)), nil }
}

// PutWriter returns a writer whose bytes st.Put stores as name. Close waits for the Put and
// returns its error; CloseWithError aborts it, so nothing is stored.
func PutWriter(ctx context.Context, st Storage, name string) *BlobWriter {
	pr, pw := io.Pipe()
	w := &BlobWriter{pw: pw, done: make(chan error, 1)}
	go func() {
		err := st.Put(ctx, name, pr)
		_ = pr.CloseWithError(err) // unblock a writer if Put stopped reading
		w.done <- err
	}()
	return w
}

// BlobWriter streams to Storage.Put (see PutWriter). It is used by one goroutine.
type BlobWriter struct {
	pw     *io.PipeWriter
	done   chan error
	closed bool
	err    error
}

func (w *BlobWriter) Write(p []byte) (int, error) { return w.pw.Write(p) }

// Close ends the stream and returns the Put's error.
func (w *BlobWriter) Close() error { return w.CloseWithError(nil) }

// CloseWithError aborts the Put with err (nil: ends the stream) and returns the Put's error.
// Later calls return the same.
func (w *BlobWriter) CloseWithError(err error) error {
	if !w.closed {
		w.closed = true
		_ = w.pw.CloseWithError(err)
		w.err = <-w.done
	}
	return w.err
}

// StorageRuns returns Openers of the named runs in st.
func StorageRuns(st Storage, names []string) []Opener {
	out := make([]Opener, len(names))
	for i, n := range names {
		out[i] = func(ctx context.Context) (io.ReadCloser, error) { return st.Get(ctx, n) }
	}
	return out
}
