package main

import (
	"io"
	"testing"
)

// The demo itself runs real servers for ~25 s and is run by `make demo`; these cover its pure parts.

func TestParseFlags_RejectsOneWorker(t *testing.T) {
	if _, err := parseFlags([]string{"-workers", "1"}, io.Discard); err == nil {
		t.Fatal("-workers 1 accepted; the demo kills one worker and needs another to take over")
	}
	o, err := parseFlags(nil, io.Discard)
	if err != nil || o.workers != 3 || o.mapDelay <= 0 {
		t.Fatalf("defaults = %+v, %v; want 3 workers and a map delay", o, err)
	}
}
