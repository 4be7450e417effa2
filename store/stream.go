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
	if err != nil {
		return translate("put "+name, err)
	}
	return nil
}

// Get streams a whole blob.
func (s Streams) Get(ctx context.Context, name string) (io.ReadCloser, error) {
	resp, err := s.c.cc.NewBlobClient(name).DownloadStream(ctx, nil)
	if err != nil {
		return nil, translate("get "+name, err)
	}
	return resp.Body, nil
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
