package store

import (
	"bytes"
	"context"
	"errors"
	"io"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob"

	"github.com/mapagg/mapagg/internal/harness/testenv"
)

// flaky serves a blob whose bodies fail after cut bytes, or yield nothing for the first stall
// requests.
type flaky struct {
	data      []byte
	cut       int
	stall     int
	requests  int
	lastCount int64
}

var errCut = errors.New("connection reset")

func (f *flaky) get(_ context.Context, off, count int64) (io.ReadCloser, int64, error) {
	f.requests++
	f.lastCount = count
	if f.stall > 0 {
		f.stall--
		return nil, 0, errCut
	}
	end := int64(len(f.data))
	if count > 0 {
		end = min(end, off+count)
	}
	body := f.data[min(off, end):end]
	return io.NopCloser(io.MultiReader(bytes.NewReader(body[:min(f.cut, len(body))]), errReader{})), int64(len(body)), nil
}

type errReader struct{}

func (errReader) Read([]byte) (int, error) { return 0, errCut }

// A body that fails every cut bytes is read to the end, request by request from the offset
// reached; a range past the end is cut to the blob.
func TestResumable_ResumesAtTheOffsetReached(t *testing.T) {
	data := bytes.Repeat([]byte("0123456789"), 1000)
	for _, c := range []struct {
		name          string
		offset, count int64
		want          []byte
	}{
		{"whole", 0, 0, data},
		{"range", 1234, 5000, data[1234:6234]},
		{"past the end", 9000, 5000, data[9000:]},
	} {
		f := &flaky{data: data, cut: 700}
		r, err := openResumable(context.Background(), "b", c.offset, c.count, f.get)
		if err != nil {
			t.Fatal(err)
		}
		got, err := io.ReadAll(r)
		if err != nil || !bytes.Equal(got, c.want) {
			t.Errorf("%s: %d bytes, %v; want %d bytes", c.name, len(got), err, len(c.want))
		}
		if want := (len(c.want)+699)/700 + 1; f.requests > want {
			t.Errorf("%s: %d requests, want at most %d", c.name, f.requests, want)
		}
	}
}

// Requests that yield no byte fail the read after StallTries in a row, saying so; fewer are
// waited out.
func TestResumable_StallsFailAfterStallTries(t *testing.T) {
	data := []byte("hello world")
	f := &flaky{data: data, cut: 3}
	r, err := openResumable(context.Background(), "b", 0, 0, f.get)
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 3)
	if n, err := r.Read(buf); n != 3 || err != nil {
		t.Fatalf("first read: %d, %v", n, err)
	}
	f.stall = StallTries - 1
	if got, err := io.ReadAll(r); err != nil || string(got) != "lo world" {
		t.Fatalf("after %d stalls: %q, %v", StallTries-1, got, err)
	}

	f = &flaky{data: data, cut: 3}
	r, _ = openResumable(context.Background(), "b", 0, 0, f.get)
	r.Read(buf)
	f.stall = StallTries
	if _, err := io.ReadAll(r); !errors.Is(err, ErrStalled) || !errors.Is(err, errCut) {
		t.Fatalf("after %d stalls: %v, want ErrStalled wrapping the last error", StallTries, err)
	}
}

// A cancelled context ends the read at once with its error.
func TestResumable_ContextEndsIt(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	f := &flaky{data: []byte("hello world"), cut: 3}
	r, _ := openResumable(ctx, "b", 0, 0, f.get)
	r.Read(make([]byte, 3))
	cancel()
	if _, err := io.ReadAll(r); !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v", err)
	}
}

// On Azurite, a range read slower than the SDK's time per try (1 s here, 15 s by default) still
// reads every byte: before, it failed with "context deadline exceeded".
func TestReadRange_SlowerThanATry(t *testing.T) {
	if testing.Short() {
		t.Skip("reads for 3 s")
	}
	ctx := context.Background()
	opts := ClientOptions()
	opts.Retry = policy.RetryOptions{MaxRetries: 1, TryTimeout: time.Second}
	client, err := azblob.NewClientFromConnectionString(testenv.Azurite(t), opts)
	if err != nil {
		t.Fatal(err)
	}
	c := New(client, testenv.Name(t, "slow"))
	if err := c.Ensure(ctx); err != nil {
		t.Fatal(err)
	}
	data := bytes.Repeat([]byte("slow reader "), 1<<17) // 1.5 MiB
	if _, err := c.Put(ctx, "b", data, Cond{}); err != nil {
		t.Fatal(err)
	}
	r, err := c.ReadRange(ctx, "b", 100, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	var got bytes.Buffer
	buf := make([]byte, 64<<10)
	for start := time.Now(); ; {
		n, err := io.ReadFull(r, buf)
		got.Write(buf[:n])
		if err == io.EOF || err == io.ErrUnexpectedEOF {
			break
		}
		if err != nil {
			t.Fatalf("after %v and %d bytes: %v", time.Since(start), got.Len(), err)
		}
		time.Sleep(200 * time.Millisecond) // 16 reads: about 3 s
	}
	if !bytes.Equal(got.Bytes(), data[100:100+1<<20]) {
		t.Fatalf("read %d bytes, not the range's", got.Len())
	}
}
