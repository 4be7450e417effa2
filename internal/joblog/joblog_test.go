package joblog_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"

	"github.com/mapagg/mapagg/internal/harness/testenv"
	"github.com/mapagg/mapagg/internal/joblog"
	"github.com/mapagg/mapagg/store"
)

func TestJobLog_HandlerAppendReadFollow(t *testing.T) {
	bc, err := store.NewClient(testenv.Azurite(t))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	cname := testenv.Name(t, "logs")
	if err := store.New(bc, cname).Ensure(ctx); err != nil {
		t.Fatal(err)
	}
	jl := joblog.New(bc, cname)
	const job = "20261128-120000-0000beef"
	if p, err := jl.Read(ctx, job, 0, 0); err != nil || len(p.Lines) != 0 || p.Next != 0 {
		t.Fatalf("log of a job that logged nothing: %+v, %v", p, err)
	}
	h := joblog.NewHandler(jl, job, "w2", 7, 2, "4bf92f3577b34da6a3ce929d0e0e4736", nil)
	log := slog.New(h).With("file", "a.txt")
	log.Info("parsed", "lines", 42)
	log.Debug("not kept")
	log.WithGroup("g").Warn("odd line", "n", 3)
	if err := h.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	p, err := jl.Read(ctx, job, 0, 0)
	if err != nil || len(p.Lines) != 2 {
		t.Fatalf("Read = %+v, %v", p, err)
	}
	l0, l1 := p.Lines[0], p.Lines[1]
	if l0.Msg != "parsed" || l0.Worker != "w2" || l0.Shard == nil || *l0.Shard != 7 || l0.Attempt != 2 || l0.Attrs["lines"] != "42" ||
		l0.Attrs["file"] != "a.txt" || l0.TraceID == "" || l0.Level != "INFO" {
		t.Errorf("line 0 = %+v", l0)
	}
	if l1.Level != "WARN" || l1.Attrs["g.n"] != "3" {
		t.Errorf("line 1 = %+v", l1)
	}
	// Following: a read from the last next sees only what came after.
	if err := jl.Append(ctx, job, joblog.Line{Level: "INFO", Msg: "from stderr", Source: "stderr", Worker: "w1"}); err != nil {
		t.Fatal(err)
	}
	p2, err := jl.Read(ctx, job, p.Next, 0)
	if err != nil || len(p2.Lines) != 1 || p2.Lines[0].Msg != "from stderr" || p2.Next <= p.Next {
		t.Fatalf("follow read = %+v, %v", p2, err)
	}
	if p3, err := jl.Read(ctx, job, p2.Next, 0); err != nil || len(p3.Lines) != 0 || p3.Next != p2.Next {
		t.Fatalf("read at the end = %+v, %v", p3, err)
	}
	if _, err := jl.Read(ctx, "Bad_ID", 0, 0); err == nil {
		t.Fatal("a bad job id was read")
	}
}

func TestJobLog_Bounded(t *testing.T) {
	bc, err := store.NewClient(testenv.Azurite(t))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	cname := testenv.Name(t, "logs")
	if err := store.New(bc, cname).Ensure(ctx); err != nil {
		t.Fatal(err)
	}
	jl := joblog.New(bc, cname)
	const job = "20261128-120000-00000big"
	line := joblog.Line{Level: "INFO", Msg: strings.Repeat("x", 8000)}
	batch := make([]joblog.Line, 256) // ~2 MiB an append
	for i := range batch {
		batch[i] = line
	}
	var full error
	for i := 0; i < 8 && full == nil; i++ {
		full = jl.Append(ctx, job, batch...)
	}
	if !errors.Is(full, joblog.ErrFull) {
		t.Fatalf("appending past the limit: %v; want ErrFull", full)
	}
	var n int
	var truncated bool
	for off := int64(0); ; {
		p, err := jl.Read(ctx, job, off, 10000)
		if err != nil {
			t.Fatal(err)
		}
		n += len(p.Lines)
		truncated = truncated || p.Truncated
		if p.Next == off {
			break
		}
		off = p.Next
	}
	if !truncated || n == 0 {
		t.Fatalf("read %d lines, truncated %v", n, truncated)
	}
}
