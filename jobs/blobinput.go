package jobs

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
)

// BlobRange is a shard of blob input: Length bytes of blob Blob in Container, from Offset.
// SplitBlobs makes them and Lines reads the lines that start in one; embed it in a shard type
// that needs more (the JSON field names are short, to keep shards small).
type BlobRange struct {
	Container string `json:"c"`
	Blob      string `json:"b"`
	Offset    int64  `json:"o"`
	Length    int64  `json:"n"`
}

// MaxRangeBytes bounds BlobRange.Length; MaxLineBytes bounds a line read by Lines.
const (
	MaxRangeBytes = 1 << 30
	MaxLineBytes  = 1 << 20
)

// DefaultShardBytes is the size of the ranges BlobInput.Split makes when ShardBytes is 0.
const DefaultShardBytes = 1 << 20

// BlobInput is the parameters of a job whose input is blobs: use it as a TypedJob's parameters,
// or embed it in yours (its fields then appear at the top level of the JSON, and your Validate
// should call BlobInput.Validate). Split cuts the blobs into BlobRanges, one per shard.
type BlobInput struct {
	// Container holds the input blobs. Required; a valid Azure container name.
	Container string `json:"container" jobs:"required"`
	// Prefix selects the blobs whose names start with it. Optional, default "" (all); at most
	// 1,024 bytes.
	Prefix string `json:"prefix,omitempty"`
	// ShardBytes is the size of a shard's range. Optional, default 1 MiB; at most 1 GiB.
	ShardBytes int64 `json:"shard_bytes,omitempty"`
}

// Validate checks the fields without touching storage; errors are *ParamError.
func (in BlobInput) Validate() error {
	if reason := ContainerNameProblem(in.Container); reason != "" {
		return BadParam("container", `"container" %s (got %q)`, reason, in.Container)
	}
	if len(in.Prefix) > 1024 {
		return BadParam("prefix", `"prefix" must be at most 1024 bytes (got %d)`, len(in.Prefix))
	}
	if in.ShardBytes < 0 || in.ShardBytes > MaxRangeBytes {
		return BadParam("shard_bytes", `"shard_bytes" must be between 1 and %d (1 GiB), or 0 for the default (got %d)`,
			MaxRangeBytes, in.ShardBytes)
	}
	return nil
}

// Split cuts the blobs into ranges of ShardBytes (see SplitBlobs).
func (in BlobInput) Split(ctx context.Context, env Env) ([]BlobRange, error) {
	size := in.ShardBytes
	if size == 0 {
		size = DefaultShardBytes
	}
	return SplitBlobs(ctx, env, in.Container, in.Prefix, size)
}

// ContainerNameProblem returns what is wrong with an Azure blob container name ("" when it is
// valid), for a job's Validate: `"container" ` + the problem reads as a sentence.
func ContainerNameProblem(name string) string {
	const rule = "must be 3 to 63 characters of a-z, 0-9 and '-', start with a letter or digit, " +
		"and have no '-' at the end or next to another '-'"
	if len(name) < 3 || len(name) > 63 {
		return rule
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		switch {
		case c >= 'a' && c <= 'z', c >= '0' && c <= '9':
		case c == '-' && i > 0 && i < len(name)-1 && name[i-1] != '-':
		default:
			return rule
		}
	}
	return ""
}

// Validate refuses a range no SplitBlobs makes; Typed calls it on a decoded shard that embeds a
// BlobRange.
func (r BlobRange) Validate() error {
	switch {
	case r.Container == "" || r.Blob == "":
		return errors.New("container and blob must be named")
	case r.Offset < 0 || r.Length < 1 || r.Length > MaxRangeBytes || r.Offset > 1<<62:
		return fmt.Errorf("range of %d bytes at %d: want 1 to %d bytes at a non-negative offset", r.Length, r.Offset, MaxRangeBytes)
	}
	return nil
}

// SplitBlobs lists the blobs of container whose names start with prefix and cuts each into ranges
// of size bytes (the last of a blob shorter), in name order. Empty blobs give no range. It fails
// if there is no blob, or if the ranges would be more than MaxShards: use a larger size.
func SplitBlobs(ctx context.Context, env Env, container, prefix string, size int64) ([]BlobRange, error) {
	if size < 1 || size > MaxRangeBytes {
		return nil, fmt.Errorf("split blobs: range size %d, want 1 to %d", size, MaxRangeBytes)
	}
	blobs, err := env.ListBlobs(ctx, container, prefix)
	if err != nil {
		return nil, fmt.Errorf("split blobs: list blobs: %w", err)
	}
	if len(blobs) == 0 {
		return nil, fmt.Errorf("split blobs: no blobs in container %q with prefix %q", container, prefix)
	}
	var ranges []BlobRange
	for _, b := range blobs {
		for off := int64(0); off < b.Size; off += size {
			if len(ranges) == MaxShards {
				return nil, fmt.Errorf("split blobs: more than %d ranges of %d bytes: use a larger size", MaxShards, size)
			}
			ranges = append(ranges, BlobRange{Container: container, Blob: b.Name, Offset: off, Length: min(size, b.Size-off)})
		}
	}
	return ranges, nil
}

// Lines calls fn with each line that starts in r, in order: the bytes up to a '\n' (not included)
// or the end of the blob. A line belongs to the range holding its first byte, so the ranges of a
// blob together see each of its lines exactly once, as Hadoop's line reader does: Lines reads the
// byte before r to learn whether a line starts at r.Offset, and past r to finish its last line.
// fn must not keep line after it returns. Lines stops at fn's first error and returns it, wrapped
// with the blob and the line's offset (so errors.Is and errors.As see it); it fails
// if a line is longer than MaxLineBytes, or if the blob ends before r does (blobs must not change
// while a job runs).
func Lines(ctx context.Context, env Env, r BlobRange, fn func(line []byte) error) error {
	if err := r.Validate(); err != nil {
		return fmt.Errorf("read lines: %w", err)
	}
	from := max(r.Offset-1, 0)
	rc, err := env.ReadRange(ctx, r.Container, r.Blob, from, r.Offset-from+r.Length+MaxLineBytes)
	if err != nil {
		return fmt.Errorf("read lines of %s/%s: %w", r.Container, r.Blob, err)
	}
	defer rc.Close()
	br := bufio.NewReaderSize(rc, 64<<10)
	pos, end := from, r.Offset+r.Length // pos: the offset of the next byte of br
	var buf []byte
	if r.Offset > 0 {
		// Skip the end of a line that started before the range (none if the byte before is '\n').
		_, n, err := readLine(br, &buf, -1)
		pos += int64(n)
		if err != nil && err != io.EOF {
			return fmt.Errorf("read lines of %s/%s: %w", r.Container, r.Blob, err)
		}
	}
	for pos < end {
		if err := ctx.Err(); err != nil {
			return err
		}
		line, n, err := readLine(br, &buf, MaxLineBytes)
		if n == 0 && err == io.EOF {
			return fmt.Errorf("read lines of %s/%s: the blob ends at %d, before its range [%d, %d): did it change after the job was split?",
				r.Container, r.Blob, pos, r.Offset, end)
		}
		if err != nil && err != io.EOF {
			return fmt.Errorf("read lines of %s/%s at %d: %w", r.Container, r.Blob, pos, err)
		}
		start := pos
		pos += int64(n)
		if err := fn(line); err != nil {
			return fmt.Errorf("%s/%s: line at byte %d: %w", r.Container, r.Blob, start, err)
		}
	}
	return nil
}

// readLine reads through the next '\n' or the end of input and returns the line without the
// '\n', in *buf, and the bytes consumed. With max ≥ 0, a line longer than max is an error;
// with max < 0 the line is skipped, not kept.
func readLine(br *bufio.Reader, buf *[]byte, max int) ([]byte, int, error) {
	*buf = (*buf)[:0]
	n := 0
	for {
		chunk, err := br.ReadSlice('\n')
		n += len(chunk)
		if max >= 0 {
			if len(*buf)+len(chunk) > max+1 {
				return nil, n, fmt.Errorf("a line is longer than %d bytes", max)
			}
			*buf = append(*buf, chunk...)
		}
		if err == bufio.ErrBufferFull {
			continue
		}
		line := bytes.TrimSuffix(*buf, []byte("\n"))
		if max >= 0 && len(line) > max {
			return nil, n, fmt.Errorf("a line is longer than %d bytes", max)
		}
		return line, n, err
	}
}
