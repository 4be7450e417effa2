package store

import (
	"context"
	"fmt"
	"io"

	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob"
)

// Streams is a container seen as streams (shuffle.Storage): uploads and downloads that never
// hold a whole blob, for a keyed job's map runs and outputs.
type Streams struct{ c *Container }

// Streams returns the container's streaming view.
func (c *Container) Streams() Streams { return Streams{c: c} }

// StreamBlockSize is the block size of a streamed upload; it holds StreamConcurrency+1 blocks.
const (
	StreamBlockSize   = 1 << 20
	StreamConcurrency = 2
)

// Put stores what r yields under name (staged blocks, committed only when r ends cleanly: a
// reader that fails stores nothing).
func (s Streams) Put(ctx context.Context, name string, r io.Reader) error {
	_, err := s.c.cc.NewBlockBlobClient(name).UploadStream(ctx, r,
		&azblob.UploadStreamOptions{BlockSize: StreamBlockSize, Concurrency: StreamConcurrency})
	if s.c.lost(ctx, err, "put "+name) {
		err = fmt.Errorf("put %s: the container was missing and was created again; write the blob again: %w", name, ErrNotFound)
	}
	if err != nil {
		return translate("put "+name, err)
	}
	return nil
}

// Get streams a whole blob, resuming where it stopped after a failed read (Container.ReadRange).
func (s Streams) Get(ctx context.Context, name string) (io.ReadCloser, error) {
	return openResumable(ctx, name, 0, 0, func(ctx context.Context, off, n int64) (io.ReadCloser, int64, error) {
		return s.c.downloadRange(ctx, name, off, n)
	})
}

// Size returns a blob's size in bytes.
func (s Streams) Size(ctx context.Context, name string) (int64, error) {
	p, err := s.c.cc.NewBlobClient(name).GetProperties(ctx, nil)
	if err != nil {
		return 0, translate("stat "+name, err)
	}
	if p.ContentLength == nil {
		return 0, fmt.Errorf("stat %s: no length", name)
	}
	return *p.ContentLength, nil
}
