package store_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/mapagg/mapagg/internal/harness/devserver"
	"github.com/mapagg/mapagg/store"
)

// Azurite leaks a file descriptor for every ranged read its client stops early and, at its
// open-file limit, fails every request that opens a data file with a bare HTTP 500. The error a
// user then sees names that cause and the remedy, not just "500". The failure is real: an
// Azurite started with a low limit, run out of descriptors by reads closed early.
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
	// Azurite may free some leaked descriptors later (its garbage collector closes file handles
	// it finds unreferenced, at a time the test does not choose), so the write that must fail
	// is tried after each run of leaking reads, until one fails or the rounds run out.
	var werr error
	for round := 1; round <= 8 && werr == nil; round++ {
		start, reads := time.Now(), 0
		var rerr error
		for ; reads < 400; reads++ { // reads stopped early, until one fails: the limit is reached
			r, err := c.ReadRange(ctx, "big", int64(reads%7)<<20+1000, 2<<20)
			if err != nil {
				rerr = err
				break
			}
			_, err = io.ReadFull(r, make([]byte, 1000))
			r.Close()
			if err != nil {
				rerr = err
				break
			}
		}
		t.Logf("round %d: %d reads stopped early in %v, then %v", round, reads, time.Since(start), rerr)
		start = time.Now()
		werr = c.Streams().Put(ctx, fmt.Sprintf("after-%d", round), bytes.NewReader(big))
		t.Logf("round %d: write in %v: %v", round, time.Since(start), werr)
	}
	err = werr
	var ae *store.AzuriteInternalError
	if !errors.As(err, &ae) || !strings.Contains(err.Error(), "file descriptors") || !strings.Contains(err.Error(), "ulimit -n") {
		t.Fatalf("a write to an Azurite out of file descriptors: %v, want an AzuriteInternalError naming the cause and ulimit -n", err)
	}
}
