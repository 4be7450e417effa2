package store_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"

	"github.com/mapagg/mapagg/internal/harness/testenv"
	"github.com/mapagg/mapagg/store"
)

func TestMain(m *testing.M) { testenv.Main(m) }

func newContainer(t *testing.T) *store.Container {
	t.Helper()
	client, err := store.NewClient(testenv.Azurite(t))
	if err != nil {
		t.Fatal(err)
	}
	c := store.New(client, testenv.Name(t, "store"))
	if err := c.Ensure(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := c.Ensure(context.Background()); err != nil { // idempotent
		t.Fatalf("second Ensure: %v", err)
	}
	return c
}

func TestContainer_ConditionalPut(t *testing.T) {
	ctx := context.Background()
	c := newContainer(t)
	e1, err := c.Put(ctx, "a/checkpoint", []byte("one"), store.Cond{IfNoneMatch: true})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Put(ctx, "a/checkpoint", []byte("two"), store.Cond{IfNoneMatch: true}); !errors.Is(err, store.ErrExists) {
		t.Fatalf("second create: %v, want ErrExists", err)
	}
	e2, err := c.Put(ctx, "a/checkpoint", []byte("two"), store.Cond{IfMatch: e1})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Put(ctx, "a/checkpoint", []byte("stale"), store.Cond{IfMatch: e1}); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("write with a stale etag: %v, want ErrConflict", err)
	}
	data, etag, err := c.Get(ctx, "a/checkpoint")
	if err != nil || string(data) != "two" || etag != e2 {
		t.Fatalf("Get = %q %q %v, want two %q", data, etag, err, e2)
	}
	if _, _, err := c.Get(ctx, "missing"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("Get missing: %v", err)
	}
	if ok, err := c.Exists(ctx, "missing"); ok || err != nil {
		t.Fatalf("Exists missing = %v %v", ok, err)
	}
	if err := c.Delete(ctx, "a/checkpoint"); err != nil {
		t.Fatal(err)
	}
	if err := c.Delete(ctx, "a/checkpoint"); err != nil {
		t.Fatalf("deleting a missing blob: %v", err)
	}
}

func TestContainer_ListAndRanges(t *testing.T) {
	ctx := context.Background()
	c := newContainer(t)
	for _, n := range []string{"j1/spec.json", "j1/checkpoint", "j2/spec.json", "active/j1", "text/b.txt", "text/a.txt"} {
		if _, err := c.Put(ctx, n, []byte("hello world"), store.Cond{}); err != nil {
			t.Fatal(err)
		}
	}
	dirs, err := c.ListDirs(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"active", "j1", "j2", "text"}; len(dirs) != len(want) || dirs[0] != "active" || dirs[3] != "text" {
		t.Fatalf("ListDirs = %v, want %v", dirs, want)
	}
	blobs, err := c.List(ctx, "text/")
	if err != nil {
		t.Fatal(err)
	}
	if len(blobs) != 2 || blobs[0].Name != "text/a.txt" || blobs[0].Size != 11 {
		t.Fatalf("List = %+v", blobs)
	}
	client, _ := store.NewClient(testenv.Azurite(t))
	env := store.NewEnv(client)
	r, err := env.ReadRange(ctx, c.Name(), "text/a.txt", 6, 100)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(r)
	r.Close()
	if string(b) != "world" {
		t.Fatalf("ReadRange = %q", b)
	}
	r, err = env.ReadRange(ctx, c.Name(), "text/a.txt", 11, 5)
	if err != nil {
		t.Fatalf("ReadRange at the end: %v", err)
	}
	b, _ = io.ReadAll(r)
	if len(b) != 0 {
		t.Fatalf("ReadRange past the end = %q", b)
	}
}

// Metadata goes with the write that sets it (fenced by the same condition) and comes back on a
// HEAD, with no content read; a write without metadata clears it.
func TestContainer_PutMetaProps(t *testing.T) {
	ctx := context.Background()
	c := newContainer(t)
	e1, err := c.PutMeta(ctx, "j/checkpoint", []byte("big"), map[string]string{"status": "abc"}, store.Cond{IfNoneMatch: true})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.PutMeta(ctx, "j/checkpoint", nil, map[string]string{"status": "stale"}, store.Cond{IfMatch: "\"0x1\""}); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("stale write: %v", err)
	}
	p, err := c.Props(ctx, "j/checkpoint")
	if err != nil || p.Meta["status"] != "abc" || p.Size != 3 || p.ETag != e1 {
		t.Fatalf("Props = %+v, %v", p, err)
	}
	if _, err := c.Put(ctx, "j/checkpoint", []byte("x"), store.Cond{IfMatch: e1}); err != nil {
		t.Fatal(err)
	}
	if p, _ := c.Props(ctx, "j/checkpoint"); len(p.Meta) != 0 {
		t.Fatalf("metadata after a plain Put: %v", p.Meta)
	}
	if _, err := c.Props(ctx, "missing"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("Props missing: %v", err)
	}
}

// GetHead reads a blob's first bytes with its metadata and whole size in one request: all of a
// small blob, the head of a big one; a missing blob is ErrNotFound.
func TestContainer_GetHead(t *testing.T) {
	ctx := context.Background()
	c := newContainer(t)
	big := bytes.Repeat([]byte("0123456789"), 1000)
	e, err := c.PutMeta(ctx, "j/checkpoint", big, map[string]string{"status": "abc"}, store.Cond{})
	if err != nil {
		t.Fatal(err)
	}
	for _, limit := range []int64{1, 4096, 10_000, 1 << 20} {
		data, p, err := c.GetHead(ctx, "j/checkpoint", limit)
		if err != nil {
			t.Fatalf("limit %d: %v", limit, err)
		}
		want := big[:min(limit, int64(len(big)))]
		if !bytes.Equal(data, want) || p.Size != int64(len(big)) || p.Meta["status"] != "abc" || p.ETag != e || p.Modified.IsZero() {
			t.Errorf("limit %d: %d bytes, props %+v", limit, len(data), p)
		}
	}
	if _, err := c.PutMeta(ctx, "empty", nil, map[string]string{"status": "e"}, store.Cond{}); err != nil {
		t.Fatal(err)
	}
	if data, p, err := c.GetHead(ctx, "empty", 10); err != nil || len(data) != 0 || p.Size != 0 || p.Meta["status"] != "e" {
		t.Errorf("GetHead of an empty blob: %d bytes, props %+v, %v", len(data), p, err)
	}
	if _, _, err := c.GetHead(ctx, "missing", 10); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("GetHead missing: %v", err)
	}
	if _, _, err := c.GetHead(ctx, "j/checkpoint", 0); err == nil || !strings.Contains(err.Error(), "read limit 0") {
		t.Errorf("GetHead with limit 0: %v", err)
	}
}

// DeleteBatch deletes many blobs in requests of up to 256; blobs already gone are deleted, and
// blobs it was not given stay.
func TestContainer_DeleteBatch(t *testing.T) {
	c := newContainer(t)
	ctx := context.Background()
	var names []string
	for i := range 300 {
		name := fmt.Sprintf("marks/%03d", i)
		if _, err := c.Put(ctx, name, nil, store.Cond{}); err != nil {
			t.Fatal(err)
		}
		names = append(names, name)
	}
	if _, err := c.Put(ctx, "marks/keep", []byte("x"), store.Cond{}); err != nil {
		t.Fatal(err)
	}
	if err := c.Delete(ctx, names[7]); err != nil { // gone already: still fine in a batch
		t.Fatal(err)
	}
	if err := c.DeleteBatch(ctx, append(names, "marks/never-was")); err != nil {
		t.Fatal(err)
	}
	left, err := c.List(ctx, "marks/")
	if err != nil {
		t.Fatal(err)
	}
	if len(left) != 1 || left[0].Name != "marks/keep" {
		t.Fatalf("left after the batch: %v", left)
	}
	if err := c.DeleteBatch(ctx, nil); err != nil {
		t.Fatal(err)
	}
}
