package store_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/mapagg/mapagg/internal/harness/devserver"
	"github.com/mapagg/mapagg/store"
)

// Azurite leaks a file descriptor for every ranged read its client stops early and, at its
// open-file limit, fails every request that opens a file with a bare HTTP 500. The error a user
// then sees names that cause and the remedy, not just "500". The failure is real: an Azurite
// started with a low limit, run out of descriptors by reads closed early.
//
// Every read opens its extent file, so the read at the limit fails every time. A write fails only
// when it lands on one of Azurite's 50 append slots that has no descriptor open yet (each slot
// keeps its own), which depends on how many writes overlapped before; a new connection fails
// too, reset (Azurite cannot accept it), which no client can tell from a network fault. The test
// asks for the read's error by name, and for the name on the write when it fails.
func TestAzuriteOutOfFileDescriptorsIsNamed(t *testing.T) {
	t.Parallel()
	az, err := devserver.StartAzuriteWith(t.TempDir(), devserver.AzuriteOptions{OpenFiles: 256})
	if err != nil {
		t.Fatal(err)
	}
	defer az.Stop()
	clients, err := store.Account{ConnectionString: az.ConnectionString(), TransientRetryFor: -1}.Open()
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	c := store.New(clients.Data, "fdleak")
	if err := c.Ensure(ctx); err != nil {
		t.Fatal(err)
	}
	big := bytes.Repeat([]byte("0123456789abcdef"), 512<<10) // 8 MiB, eight blocks
	if err := c.Streams().Put(ctx, "big", bytes.NewReader(big)); err != nil {
		t.Fatal(err)
	}
	start, reads := time.Now(), 0
	var rerr error
	for ; reads < 1000 && rerr == nil; reads++ { // reads stopped early, until one fails: the limit
		r, err := c.ReadRange(ctx, "big", int64(reads%7)<<20+1000, 2<<20)
		if err != nil {
			rerr = err
			break
		}
		_, rerr = io.ReadFull(r, make([]byte, 1000))
		r.Close()
	}
	t.Logf("%d reads stopped early in %v, then %v", reads, time.Since(start), rerr)
	named := func(what string, err error) {
		t.Helper()
		var ae *store.AzuriteInternalError
		if !errors.As(err, &ae) || !strings.Contains(err.Error(), "file descriptors") || !strings.Contains(err.Error(), "ulimit -n") {
			t.Errorf("%s on an Azurite out of file descriptors: %v, want an AzuriteInternalError naming the cause and ulimit -n", what, err)
		}
	}
	named("a read", rerr)

	start = time.Now()
	werr := c.Streams().Put(ctx, "after", bytes.NewReader(big))
	t.Logf("then a write in %v: %v", time.Since(start), werr)
	if werr != nil {
		named("a write", werr)
	}
}
