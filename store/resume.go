package store

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/blob"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/bloberror"
)

// A body read from storage is bounded by the SDK's time per try (15 s), which covers reading
// the body as well as the request: a Map that consumes a range slowly, or a reduce that merges
// while it reads, would fail with "context deadline exceeded" however healthy the service. So
// every download here is resumable: when a read of the body fails while the caller's context
// lives, the reader asks again from the offset it reached. Only a stall fails it: StallTries
// requests in a row that yield no byte.

// StallTries is how many requests in a row may fail without a byte before a read gives up.
const StallTries = 5

// ErrStalled wraps the last error of a read that got no byte in StallTries requests in a row.
var ErrStalled = errors.New("storage read stalled")

// rangeGetter opens a body of the blob from offset (count bytes, or to the end when count is 0)
// and says how many bytes it holds.
type rangeGetter func(ctx context.Context, offset, count int64) (io.ReadCloser, int64, error)

// resumable reads name through get, reopening at the offset reached after a failed read.
type resumable struct {
	ctx      context.Context
	name     string
	get      rangeGetter
	body     io.ReadCloser
	off      int64         // the next byte's offset
	left     int64         // bytes still to read
	yielded  bool          // body gave a byte
	failures int           // requests in a row without a byte
	pause    time.Duration // the last wait between requests
}

// openResumable opens count bytes of name from offset (count 0: to the end; fewer at the end of
// the blob) for reading through get.
func openResumable(ctx context.Context, name string, offset, count int64, get rangeGetter) (*resumable, error) {
	body, n, err := get(ctx, offset, count)
	if err != nil {
		return nil, err
	}
	return &resumable{ctx: ctx, name: name, get: get, body: body, off: offset, left: n}, nil
}

func (r *resumable) Read(p []byte) (int, error) {
	if r.left == 0 {
		return 0, io.EOF
	}
	if int64(len(p)) > r.left {
		p = p[:r.left]
	}
	for {
		if r.body == nil {
			if err := r.ctx.Err(); err != nil {
				return 0, fmt.Errorf("read %s at %d: %w", r.name, r.off, err)
			}
			body, _, err := r.get(r.ctx, r.off, r.left)
			if err != nil {
				if err := r.failed(err); err != nil {
					return 0, err
				}
				continue
			}
			r.body, r.yielded = body, false
		}
		n, err := r.body.Read(p)
		r.off += int64(n)
		r.left -= int64(n)
		if n > 0 {
			r.yielded, r.failures, r.pause = true, 0, 0
		}
		if r.left == 0 {
			return n, io.EOF
		}
		if err == nil {
			return n, nil
		}
		// The body failed, or ended before the bytes it announced: ask for the rest.
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		r.body.Close()
		r.body = nil
		if n > 0 {
			return n, nil // the next Read resumes
		}
		if !r.yielded {
			if err := r.failed(err); err != nil {
				return 0, err
			}
		}
	}
}

// failed counts a request that yielded no byte and waits before the next (100 ms, doubling to
// 2 s), or returns the error that ends the read: the caller's context ended, the blob is gone,
// or the read stalled.
func (r *resumable) failed(err error) error {
	if cerr := r.ctx.Err(); cerr != nil {
		return fmt.Errorf("read %s at %d: %w", r.name, r.off, cerr)
	}
	if errors.Is(err, ErrNotFound) {
		return err
	}
	if r.failures++; r.failures >= StallTries {
		return fmt.Errorf("read %s at %d: %w: no byte in %d requests in a row: %w", r.name, r.off, ErrStalled, r.failures, err)
	}
	r.pause = min(max(2*r.pause, 100*time.Millisecond), 2*time.Second)
	select {
	case <-r.ctx.Done():
		return fmt.Errorf("read %s at %d: %w", r.name, r.off, r.ctx.Err())
	case <-time.After(r.pause):
	}
	return nil
}

func (r *resumable) Close() error {
	if r.body == nil {
		return nil
	}
	err := r.body.Close()
	r.body = nil
	return err
}

// downloadRange opens count bytes of name from offset (count 0: to the end) as one request, and
// says how many bytes the body holds (fewer than count at the blob's end; 0 past it).
func (c *Container) downloadRange(ctx context.Context, name string, offset, count int64) (io.ReadCloser, int64, error) {
	opts := &blob.DownloadStreamOptions{}
	if offset > 0 || count > 0 {
		opts.Range = blob.HTTPRange{Offset: offset, Count: count}
	}
	resp, err := c.cc.NewBlobClient(name).DownloadStream(ctx, opts)
	if err != nil {
		if bloberror.HasCode(err, bloberror.InvalidRange) {
			return io.NopCloser(bytes.NewReader(nil)), 0, nil
		}
		return nil, 0, translate("read "+name, err)
	}
	if resp.ContentLength == nil {
		resp.Body.Close()
		return nil, 0, fmt.Errorf("read %s: the response has no length", name)
	}
	return resp.Body, *resp.ContentLength, nil
}
