package jobstest

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"sort"
	"strings"
	"sync"

	"github.com/mapagg/mapagg/jobs"
)

// Env is an in-memory jobs.Env: containers of named blobs, and a Logger whose lines Logs returns.
// It is safe for concurrent use.
type Env struct {
	mu         sync.Mutex
	containers map[string]map[string][]byte
	oneByte    bool
	logs       lockedBuffer
	log        *slog.Logger
}

var _ jobs.Env = (*Env)(nil)

// NewEnv returns an empty Env.
func NewEnv() *Env {
	e := &Env{containers: make(map[string]map[string][]byte)}
	e.log = slog.New(slog.NewTextHandler(&e.logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	return e
}

// Logger implements jobs.Env: lines job code logs are kept, in slog's text form, for Logs.
func (e *Env) Logger() *slog.Logger {
	if e.log == nil {
		return slog.Default()
	}
	return e.log
}

// Logs returns what job code logged through Logger so far, one line a record (slog's text form:
// time=… level=INFO msg=… key=value).
func (e *Env) Logs() string { return e.logs.String() }

type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// Put stores a copy of data as blob name of container, creating the container if needed.
func (e *Env) Put(container, name string, data []byte) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.containers[container] == nil {
		e.containers[container] = make(map[string][]byte)
	}
	e.containers[container][name] = bytes.Clone(data)
}

// OneByteReads makes every reader ReadRange returns yield at most one byte per Read, as a slow
// network may: a job must not assume a Read fills its buffer.
func (e *Env) OneByteReads(on bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.oneByte = on
}

// ListBlobs lists the blobs of container whose names start with prefix, in name order. An
// unknown container is an error, as in Azure.
func (e *Env) ListBlobs(_ context.Context, container, prefix string) ([]jobs.BlobInfo, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	c, ok := e.containers[container]
	if !ok {
		return nil, fmt.Errorf("container %q not found", container)
	}
	var out []jobs.BlobInfo
	for name, data := range c {
		if strings.HasPrefix(name, prefix) {
			out = append(out, jobs.BlobInfo{Name: name, Size: int64(len(data))})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// ReadRange reads count bytes of a blob from offset, fewer at the end of the blob. A missing
// blob, a negative offset or count, or an offset past the end is an error.
func (e *Env) ReadRange(_ context.Context, container, name string, offset, count int64) (io.ReadCloser, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	data, ok := e.containers[container][name]
	if !ok {
		return nil, fmt.Errorf("blob %q/%q not found", container, name)
	}
	if offset < 0 || count <= 0 || offset > int64(len(data)) {
		return nil, fmt.Errorf("invalid range: %d bytes at %d of a %d-byte blob", count, offset, len(data))
	}
	end := min(int64(len(data)), offset+count)
	var r io.Reader = bytes.NewReader(data[offset:end])
	if e.oneByte {
		r = &oneByteReader{r: r}
	}
	return io.NopCloser(r), nil
}

type oneByteReader struct{ r io.Reader }

func (o *oneByteReader) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	return o.r.Read(p[:1])
}
