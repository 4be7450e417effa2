package jobs_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/mapagg/mapagg/jobs"
	"github.com/mapagg/mapagg/jobs/jobstest"
)

// refLines is the lines of text as Lines defines them: split at '\n', no line after a final '\n'.
func refLines(text []byte) []string {
	if len(text) == 0 {
		return nil
	}
	lines := strings.Split(string(text), "\n")
	if text[len(text)-1] == '\n' {
		lines = lines[:len(lines)-1]
	}
	return lines
}

// allLines reads every range of the blobs under prefix, in order.
func allLines(t testing.TB, env jobs.Env, size int64) ([]string, error) {
	ranges, err := jobs.SplitBlobs(context.Background(), env, "c", "", size)
	if err != nil {
		return nil, err
	}
	var got []string
	for _, r := range ranges {
		if r.Length > size || r.Length < 1 {
			t.Fatalf("range %+v for size %d", r, size)
		}
		if err := jobs.Lines(context.Background(), env, r, func(l []byte) error {
			got = append(got, string(l))
			return nil
		}); err != nil {
			return nil, err
		}
	}
	return got, nil
}

func TestLines_EveryRangeSize(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	texts := []string{"", "\n", "\n\n", "a", "a\n", "ab\ncd", "ab\ncd\n", "\nx\n\ny"}
	for range 20 {
		var b strings.Builder
		for range rng.IntN(30) {
			b.WriteString(strings.Repeat("x", rng.IntN(7)))
			b.WriteByte("\n\n \r"[rng.IntN(4)])
		}
		texts = append(texts, b.String())
	}
	for i, text := range texts {
		env := jobstest.NewEnv()
		env.OneByteReads(i%2 == 1)
		env.Put("c", "blob", []byte(text))
		env.Put("c", "other", []byte("1\n2"))
		want := append(refLines([]byte(text)), "1", "2")
		for size := int64(1); size <= int64(len(text))+1; size++ {
			got, err := allLines(t, env, size)
			if err != nil || !slices.Equal(got, want) {
				t.Fatalf("text %q in ranges of %d: lines %q, %v; want %q", text, size, got, err, want)
			}
		}
	}
}

func TestLines_Errors(t *testing.T) {
	ctx := context.Background()
	env := jobstest.NewEnv()
	env.Put("c", "short", []byte("a\nb\n"))
	env.Put("c", "long", append(bytes.Repeat([]byte("x"), jobs.MaxLineBytes+1), '\n'))
	env.Put("c", "justright", append(bytes.Repeat([]byte("x"), jobs.MaxLineBytes), '\n'))
	nop := func([]byte) error { return nil }

	err := jobs.Lines(ctx, env, jobs.BlobRange{Container: "c", Blob: "short", Offset: 2, Length: 10}, nop)
	if err == nil || !strings.Contains(err.Error(), "did it change after the job was split?") {
		t.Errorf("blob shorter than its range: %v", err)
	}
	err = jobs.Lines(ctx, env, jobs.BlobRange{Container: "c", Blob: "long", Offset: 0, Length: 10}, nop)
	if err == nil || !strings.Contains(err.Error(), "a line is longer than 1048576 bytes") {
		t.Errorf("long line: %v", err)
	}
	if err := jobs.Lines(ctx, env, jobs.BlobRange{Container: "c", Blob: "justright", Offset: 0, Length: 10}, nop); err != nil {
		t.Errorf("a line of MaxLineBytes: %v", err)
	}
	// A range inside the long line sees no line, and does not fail.
	if err := jobs.Lines(ctx, env, jobs.BlobRange{Container: "c", Blob: "long", Offset: 5, Length: 10}, nop); err != nil {
		t.Errorf("range inside a long line: %v", err)
	}
	stop := errors.New("stop")
	if err := jobs.Lines(ctx, env, jobs.BlobRange{Container: "c", Blob: "short", Offset: 0, Length: 4}, func([]byte) error { return stop }); !errors.Is(err, stop) || err.Error() != "c/short: line at byte 0: stop" {
		t.Errorf("fn's error: %v", err)
	}
	for _, r := range []jobs.BlobRange{{Container: "c", Blob: "", Length: 1}, {Container: "c", Blob: "x", Offset: -1, Length: 1},
		{Container: "c", Blob: "x", Length: 0}, {Container: "c", Blob: "x", Length: jobs.MaxRangeBytes + 1}} {
		if err := jobs.Lines(ctx, env, r, nop); err == nil {
			t.Errorf("Lines(%+v) succeeded", r)
		}
	}
	if err := jobs.Lines(ctx, env, jobs.BlobRange{Container: "c", Blob: "gone", Length: 1}, nop); err == nil || !strings.Contains(err.Error(), "not found") {
		t.Errorf("missing blob: %v", err)
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if err := jobs.Lines(cctx, env, jobs.BlobRange{Container: "c", Blob: "short", Length: 4}, nop); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled: %v", err)
	}
}

func TestSplitBlobs_Errors(t *testing.T) {
	ctx := context.Background()
	env := jobstest.NewEnv()
	env.Put("c", "a", make([]byte, jobs.MaxShards+1))
	for _, tt := range []struct {
		container, prefix string
		size              int64
		want              string
	}{
		{"c", "", 0, "range size 0"},
		{"c", "zz", 10, `no blobs in container "c" with prefix "zz"`},
		{"nope", "", 10, "list blobs"},
		{"c", "", 1, "use a larger size"},
	} {
		_, err := jobs.SplitBlobs(ctx, env, tt.container, tt.prefix, tt.size)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("SplitBlobs(%q, %q, %d) = %v, want %q", tt.container, tt.prefix, tt.size, err, tt.want)
		}
	}
}

// FuzzLines reads arbitrary blob contents in ranges of every size and checks that the ranges
// together see each line once.
func FuzzLines(f *testing.F) {
	for _, s := range []string{"", "a\nb", "\n\n\n", "x\r\ny\n", "long line\n"} {
		f.Add([]byte(s), uint8(3))
	}
	f.Fuzz(func(t *testing.T, text []byte, size uint8) {
		env := jobstest.NewEnv()
		env.Put("c", "blob", text)
		got, err := allLines(t, env, int64(size)%32+1)
		if want := refLines(text); err != nil || !slices.Equal(got, want) {
			t.Fatalf("%q in ranges of %d: %q, %v; want %q", text, int64(size)%32+1, got, err, fmt.Sprint(want))
		}
	})
}

// withInput embeds BlobInput in parameters of its own.
type withInput struct {
	jobs.BlobInput
	Width int `json:"width"`
}

func TestBlobInput_Params(t *testing.T) {
	var p withInput
	present, err := jobs.DecodeParams("h", []byte(`{"container": "data", "prefix": "x/", "width": 3}`), &p)
	if err != nil || p.Container != "data" || p.Prefix != "x/" || p.Width != 3 || !present["container"] {
		t.Fatalf("DecodeParams = %+v, %v, %v", p, present, err)
	}
	for _, tt := range []struct{ params, field, msg string }{
		{`{"container": "data", "Prefix": "x"}`, "Prefix", `unknown field "Prefix"; allowed fields: container, job, prefix, shard_bytes, width`},
		{`{"container": "data", "shard_bytes": "x"}`, "shard_bytes", `"shard_bytes" must be an integer (got string)`},
	} {
		_, err := jobs.DecodeParams("h", []byte(tt.params), &withInput{})
		var pe *jobs.ParamError
		if !errors.As(err, &pe) || pe.Field != tt.field || !strings.Contains(err.Error(), tt.msg) {
			t.Errorf("%s: %v, want %q for %q", tt.params, err, tt.msg, tt.field)
		}
	}
	for _, tt := range []struct {
		in    jobs.BlobInput
		field string
	}{
		{jobs.BlobInput{}, "container"},
		{jobs.BlobInput{Container: "data", Job: "20261125-120000-0000beef"}, "job"},
		{jobs.BlobInput{Prefix: "x/", Job: "20261125-120000-0000beef"}, "job"},
		{jobs.BlobInput{Job: "Not/An-ID"}, "job"},
		{jobs.BlobInput{Job: "20261125-120000-0000beef", ShardBytes: -1}, "shard_bytes"},
		{jobs.BlobInput{Container: "Data"}, "container"},
		{jobs.BlobInput{Container: "ab"}, "container"},
		{jobs.BlobInput{Container: "a--b"}, "container"},
		{jobs.BlobInput{Container: "data", Prefix: strings.Repeat("p", 1025)}, "prefix"},
		{jobs.BlobInput{Container: "data", ShardBytes: -1}, "shard_bytes"},
		{jobs.BlobInput{Container: "data", ShardBytes: jobs.MaxRangeBytes + 1}, "shard_bytes"},
	} {
		var pe *jobs.ParamError
		if err := tt.in.Validate(); !errors.As(err, &pe) || pe.Field != tt.field {
			t.Errorf("Validate(%+v) = %v, want a *ParamError for %q", tt.in, err, tt.field)
		}
	}
	if err := (jobs.BlobInput{Container: "data-1", ShardBytes: 5}).Validate(); err != nil {
		t.Errorf("good input: %v", err)
	}
	env := jobstest.NewEnv()
	env.Put("data", "a", make([]byte, 3*jobs.DefaultShardBytes+1))
	ranges, err := jobs.BlobInput{Container: "data"}.Split(context.Background(), env)
	if err != nil || len(ranges) != 4 || ranges[3] != (jobs.BlobRange{Container: "data", Blob: "a", Offset: 3 * jobs.DefaultShardBytes, Length: 1}) {
		t.Errorf("Split with the default size = %v, %v", ranges, err)
	}
}

// rangeEnv records the ranges a jobs.Env is asked to read.
type rangeEnv struct {
	*jobstest.Env
	asked [][2]int64 // offset, count
}

func (e *rangeEnv) ReadRange(ctx context.Context, container, name string, offset, count int64) (io.ReadCloser, error) {
	e.asked = append(e.asked, [2]int64{offset, count})
	return e.Env.ReadRange(ctx, container, name, offset, count)
}

// Lines asks for its range and a short tail, and reads on past the tail with a second request
// only when the range's last line is longer: never a megabyte a range it does not use.
func TestLines_ReadsATailThenTheRestOfALongLine(t *testing.T) {
	ctx := context.Background()
	short := strings.Repeat("ab\n", 1000)             // 3000 bytes of short lines
	long := strings.Repeat("y", 200<<10) + "\nlast\n" // a line of 200 KiB after them
	for _, tt := range []struct {
		name     string
		text     string
		r        jobs.BlobRange
		requests int
		lines    int
	}{
		{"short lines", short, jobs.BlobRange{Offset: 300, Length: 1500}, 1, 500},
		{"a long line across the end", short + long, jobs.BlobRange{Offset: 1500, Length: 1501}, 2, 501},
		{"the blob ends at the first request's end", strings.Repeat("z\n", 35000), jobs.BlobRange{Offset: 0, Length: 70000 - 64<<10}, 1, (70000 - 64<<10) / 2},
		{"the blob ends within the tail", short, jobs.BlobRange{Offset: 2999, Length: 1}, 1, 0},
	} {
		env := &rangeEnv{Env: jobstest.NewEnv()}
		env.Put("c", "b", []byte(tt.text))
		tt.r.Container, tt.r.Blob = "c", "b"
		lines := 0
		err := jobs.Lines(ctx, env, tt.r, func(l []byte) error {
			lines++
			return nil
		})
		if err != nil || lines != tt.lines || len(env.asked) != tt.requests {
			t.Errorf("%s: %d lines, %v, asked %v; want %d lines in %d requests", tt.name, lines, err, env.asked, tt.lines, tt.requests)
		}
		if end := tt.r.Offset + tt.r.Length; env.asked[0][0]+env.asked[0][1] > end+64<<10 {
			t.Errorf("%s: the first request %v reads more than 64 KiB past the range's end %d", tt.name, env.asked[0], end)
		}
	}
}

// Without shard_bytes, a blob input is cut into about one range a slot of the cluster, between
// DefaultShardBytes and MaxDefaultShardBytes; without slots known, into DefaultShardBytes.
func TestBlobInput_DefaultRangesFollowTheSlots(t *testing.T) {
	ctx := context.Background()
	env := jobstest.NewEnv()
	for i := range 8 {
		env.Put("c", fmt.Sprintf("in/%d", i), make([]byte, 3_500_000)) // 28 MB
	}
	env.Put("c", "big/0", make([]byte, 200<<20))
	for _, tt := range []struct {
		name       string
		env        jobs.Env
		in         jobs.BlobInput
		ranges     int
		rangeBytes int64 // of the first range
	}{
		{"slots unknown", env, jobs.BlobInput{Container: "c", Prefix: "in/"}, 8 * 4, jobs.DefaultShardBytes},
		{"6 slots", jobs.EnvWithSlots(env, 6), jobs.BlobInput{Container: "c", Prefix: "in/"}, 8, 3_500_000},
		{"30 slots", jobs.EnvWithSlots(env, 30), jobs.BlobInput{Container: "c", Prefix: "in/"}, 8 * 4, jobs.DefaultShardBytes},
		{"2 slots", jobs.EnvWithSlots(env, 2), jobs.BlobInput{Container: "c", Prefix: "in/"}, 8, 3_500_000},
		{"2 slots, a big blob", jobs.EnvWithSlots(env, 2), jobs.BlobInput{Container: "c", Prefix: "big/"}, 8, 25 << 20}, // 4 waves of 2
		{"shard_bytes set", jobs.EnvWithSlots(env, 6), jobs.BlobInput{Container: "c", Prefix: "in/", ShardBytes: 1 << 20}, 8 * 4, 1 << 20},
		{"0 slots", jobs.EnvWithSlots(env, 0), jobs.BlobInput{Container: "c", Prefix: "in/"}, 8 * 4, jobs.DefaultShardBytes},
	} {
		ranges, err := tt.in.Split(ctx, tt.env)
		if err != nil || len(ranges) != tt.ranges || ranges[0].Length != tt.rangeBytes {
			first := int64(-1)
			if len(ranges) > 0 {
				first = ranges[0].Length
			}
			t.Errorf("%s: %d ranges, the first of %d bytes, %v; want %d of %d", tt.name, len(ranges), first, err, tt.ranges, tt.rangeBytes)
		}
	}
	for _, tt := range []struct {
		total int64
		slots int
		want  int64
	}{
		{28_000_000, 6, 4_666_667}, {28_000_000, 0, jobs.DefaultShardBytes}, {100, 6, jobs.DefaultShardBytes},
		{28_000_000, -1, jobs.DefaultShardBytes}, {0, 6, jobs.DefaultShardBytes},
		{6 * jobs.MaxDefaultShardBytes, 6, jobs.MaxDefaultShardBytes}, {6*jobs.MaxDefaultShardBytes + 6, 6, jobs.MaxDefaultShardBytes/2 + 1},
		{1 << 40, 6, 33_550_337}, // 5,462 waves of 6
	} {
		if got := jobs.DefaultRangeBytes(tt.total, tt.slots); got != tt.want {
			t.Errorf("DefaultRangeBytes(%d, %d) = %d, want %d", tt.total, tt.slots, got, tt.want)
		}
	}
}
