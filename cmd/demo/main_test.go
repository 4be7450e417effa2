package main

import (
	"io"
	"slices"
	"testing"

	"github.com/mapagg/mapagg/internal/harness/devserver"
)

// The demo itself runs real servers for ~25 s and is run by `make demo`; these cover its pure parts.

func TestHostsOf_AzuriteConnectionString(t *testing.T) {
	got := hostsOf(devserver.ConnectionString(10000, 10001))
	if want := []string{"127.0.0.1:10000", "127.0.0.1:10001"}; !slices.Equal(got, want) {
		t.Fatalf("hostsOf = %v, want %v", got, want)
	}
}

func TestParseFlags_RejectsOneWorker(t *testing.T) {
	if _, err := parseFlags([]string{"-workers", "1"}, io.Discard); err == nil {
		t.Fatal("-workers 1 accepted; the demo kills one worker and needs another to take over")
	}
	o, err := parseFlags(nil, io.Discard)
	if err != nil || o.workers != 3 || o.mapDelay <= 0 {
		t.Fatalf("defaults = %+v, %v; want 3 workers and a map delay", o, err)
	}
}
