package jobs

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
)

// BlobRange is a shard of blob input: Length bytes of blob Blob in Container, from Offset.
// SplitBlobs makes them and Lines reads the lines that start in one; embed it in a shard type
// that needs more (the JSON field names are short, to keep shards small).
type BlobRange struct {
	Container string `json:"c"`
	Blob      string `json:"b"`
	Offset    int64  `json:"o"`
	Length    int64  `json:"n"`
	// Format is set in a range of a keyed job's output (BlobInput.Job) stored other than as
	// JSON lines: its stored format (OutputFormats) and text columns. Lines yields such a
	// blob's records as {"key":K,"value":V} lines all the same. A compressed blob is one
	// range, from 0.
	Format    string `json:"f,omitempty"`
	KeyText   bool   `json:"kt,omitempty"`
	ValueText bool   `json:"vt,omitempty"`
}

// MaxRangeBytes bounds BlobRange.Length; MaxLineBytes bounds a line read by Lines.
const (
	MaxRangeBytes = 1 << 30
	MaxLineBytes  = 1 << 20
)

// DefaultShardBytes is the size of the ranges BlobInput.Split makes when ShardBytes is 0 and
// the Env does not know the cluster's slots (SlotsEnv), and the least it makes when it does.
const DefaultShardBytes = 1 << 20

// MaxDefaultShardBytes is the most BlobInput.Split's default ranges hold.
const MaxDefaultShardBytes = 32 << 20

// SlotsEnv is the optional interface of an Env that knows how many tasks of the job the cluster
// runs at once. The leader's Env in Split is one: the concurrency of the live workers that have
// the job's type, summed.
type SlotsEnv interface {
	Slots() int
}

// DefaultRangeBytes is the range size BlobInput.Split uses when ShardBytes is 0, for an input of
// total bytes on a cluster of slots slots (0: unknown): one range a slot, or when that is more
// than MaxDefaultShardBytes, as many full waves of slots as keep a range within it; at least
// DefaultShardBytes. Spark sizes file partitions so (total bytes over the default parallelism,
// bounded). A task has a fixed cost besides its bytes: its input request, its run's write, and
// one read of its run by every reduce task (M × R requests), so a 28 MB input in 1 MiB ranges
// spent more on tasks than on its lines. With slots unknown it is DefaultShardBytes.
func DefaultRangeBytes(total int64, slots int) int64 {
	if slots <= 0 || total <= 0 {
		return DefaultShardBytes
	}
	wave := int64(slots) * MaxDefaultShardBytes
	ranges := int64(slots) * ((total + wave - 1) / wave) // whole waves of slots
	return min(max((total+ranges-1)/ranges, DefaultShardBytes), MaxDefaultShardBytes)
}

// rangeSize is the range size of in's split over blobs of total bytes.
func (in BlobInput) rangeSize(env Env, total int64) int64 {
	if in.ShardBytes > 0 {
		return in.ShardBytes
	}
	slots := 0
	if se, ok := env.(SlotsEnv); ok {
		slots = se.Slots()
	}
	return DefaultRangeBytes(total, slots)
}

// BlobInput is the parameters of a job whose input is blobs: use it as a TypedJob's parameters,
// or embed it in yours (its fields then appear at the top level of the JSON, and your Validate
// should call BlobInput.Validate). Split cuts the blobs into BlobRanges, one per shard.
//
// The blobs are either a container's (Container and Prefix) or a finished keyed job's output
// (Job): then Lines reads its records, one JSON line each (SplitRecord splits one), whatever
// the format the job stored them in.
type BlobInput struct {
	// Container holds the input blobs. Required unless Job is set; a valid Azure container name.
	Container string `json:"container,omitempty"`
	// Prefix selects the blobs whose names start with it. Optional, default "" (all); at most
	// 1,024 bytes. Not with Job.
	Prefix string `json:"prefix,omitempty"`
	// Job is the id of a succeeded keyed job whose output blobs are the input, instead of
	// Container and Prefix.
	Job string `json:"job,omitempty"`
	// ShardBytes is the size of a shard's range. Optional; at most 1 GiB. Default: the input's
	// total over the cluster's slots, 1 to 32 MiB (DefaultRangeBytes); 1 MiB where the Env does
	// not know the slots (package jobstest).
	ShardBytes int64 `json:"shard_bytes,omitempty"`
}

// Validate checks the fields without touching storage; errors are *ParamError.
func (in BlobInput) Validate() error {
	if in.Job != "" {
		if in.Container != "" || in.Prefix != "" {
			return BadParam("job", `"job" reads a job's output: give it without "container" and "prefix" (got container %q, prefix %q)`,
				in.Container, in.Prefix)
		}
		if !jobIDPattern(in.Job) {
			return BadParam("job", `"job" must be a job id such as 20261121-120000-0123abcd (got %q)`, in.Job)
		}
		return in.validateShardBytes()
	}
	if in.Container == "" {
		return BadParam("container", `"container" is required (or "job", the id of a keyed job whose output to read)`)
	}
	if reason := ContainerNameProblem(in.Container); reason != "" {
		return BadParam("container", `"container" %s (got %q)`, reason, in.Container)
	}
	if len(in.Prefix) > 1024 {
		return BadParam("prefix", `"prefix" must be at most 1024 bytes (got %d)`, len(in.Prefix))
	}
	return in.validateShardBytes()
}

func (in BlobInput) validateShardBytes() error {
	if in.ShardBytes < 0 || in.ShardBytes > MaxRangeBytes {
		return BadParam("shard_bytes", `"shard_bytes" must be between 1 and %d (1 GiB), or 0 for the default (got %d)`,
			MaxRangeBytes, in.ShardBytes)
	}
	return nil
}

// Split cuts the blobs into ranges of ShardBytes (see SplitBlobs), or when it is 0 of
// DefaultRangeBytes for their total size and the cluster's slots.
func (in BlobInput) Split(ctx context.Context, env Env) ([]BlobRange, error) {
	if in.Job != "" {
		return splitJobOutput(ctx, env, in.Job, in)
	}
	blobs, err := listInput(ctx, env, in.Container, in.Prefix)
	if err != nil {
		return nil, err
	}
	return cutBlobs(in.Container, blobs, in.rangeSize(env, totalSize(blobs)), "split blobs", "size")
}

func totalSize(blobs []BlobInfo) int64 {
	var n int64
	for _, b := range blobs {
		n += b.Size
	}
	return n
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
	if r.Format != "" {
		f, ok := formOf(r.Format, r.KeyText, r.ValueText)
		switch {
		case !ok:
			return fmt.Errorf("range format %q: want one of %s", r.Format, strings.Join(OutputFormats(), ", "))
		case f.zst && r.Offset != 0:
			return fmt.Errorf("a compressed (%s) blob is read whole: its range starts at 0, not %d", r.Format, r.Offset)
		}
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
	blobs, err := listInput(ctx, env, container, prefix)
	if err != nil {
		return nil, err
	}
	return cutBlobs(container, blobs, size, "split blobs", "size")
}

// listInput lists the blobs of container under prefix, and fails if there is none.
func listInput(ctx context.Context, env Env, container, prefix string) ([]BlobInfo, error) {
	blobs, err := env.ListBlobs(ctx, container, prefix)
	if err != nil {
		return nil, fmt.Errorf("split blobs: list blobs: %w", err)
	}
	if len(blobs) == 0 {
		return nil, fmt.Errorf("split blobs: no blobs in container %q with prefix %q", container, prefix)
	}
	return blobs, nil
}

// cutBlobs cuts each blob of container into ranges of size bytes, in order; what and param name
// the caller and its size in the error of more than MaxShards ranges.
func cutBlobs(container string, blobs []BlobInfo, size int64, what, param string) ([]BlobRange, error) {
	var ranges []BlobRange
	for _, b := range blobs {
		for off := int64(0); off < b.Size; off += size {
			if len(ranges) == MaxShards {
				return nil, fmt.Errorf("%s: more than %d ranges of %d bytes: use a larger %s", what, MaxShards, size, param)
			}
			ranges = append(ranges, BlobRange{Container: container, Blob: b.Name, Offset: off, Length: min(size, b.Size-off)})
		}
	}
	return ranges, nil
}

// linesTail is how far past its range Lines first reads: the line that crosses the range's end
// is most often shorter. A longer one is read by a second request, up to MaxLineBytes past the
// range. Asking for MaxLineBytes at once made the store send a megabyte a range for nothing, and
// the connection could not be reused after the unread rest.
const linesTail = 64 << 10

// tailReader reads a range's bytes from one request of [from, end+linesTail) and, only when the
// range's last line goes on past that, from a second request of the rest up to MaxLineBytes.
type tailReader struct {
	ctx       context.Context
	env       Env
	r         BlobRange
	rc        io.ReadCloser
	pos, upTo int64 // the offset of rc's next byte; where rc's request ends
	limit     int64 // the furthest any request reads
}

func openTail(ctx context.Context, env Env, r BlobRange, from int64) (*tailReader, error) {
	end := r.Offset + r.Length
	t := &tailReader{ctx: ctx, env: env, r: r, pos: from, upTo: end + linesTail, limit: end + MaxLineBytes}
	rc, err := env.ReadRange(ctx, r.Container, r.Blob, from, t.upTo-from)
	if err != nil {
		return nil, err
	}
	t.rc = rc
	return t, nil
}

func (t *tailReader) Read(p []byte) (int, error) {
	n, err := t.rc.Read(p)
	t.pos += int64(n)
	if err == io.EOF && t.pos == t.upTo && t.upTo < t.limit {
		// The request ended at its count, not at the blob's end: ask for the rest.
		_ = t.rc.Close()
		rc, oerr := t.env.ReadRange(t.ctx, t.r.Container, t.r.Blob, t.pos, t.limit-t.pos)
		if oerr != nil {
			t.rc = io.NopCloser(strings.NewReader(""))
			return n, oerr
		}
		t.rc, t.upTo = rc, t.limit
		err = nil
	}
	return n, err
}

// Close reads off what is left of a first request (at most linesTail bytes) so that its
// connection can carry the next one, and closes it.
func (t *tailReader) Close() error {
	if left := t.upTo - t.pos; left > 0 && left <= linesTail {
		_, _ = io.CopyN(io.Discard, t.rc, left)
	}
	return t.rc.Close()
}

// Lines calls fn with each line that starts in r, in order: the bytes up to a '\n' (not included)
// or the end of the blob. A line belongs to the range holding its first byte, so the ranges of a
// blob together see each of its lines exactly once, as Hadoop's line reader does: Lines reads the
// byte before r to learn whether a line starts at r.Offset, and past r to finish its last line.
// fn must not keep line after it returns. Lines stops at fn's first error and returns it, wrapped
// with the blob and the line's offset (errors.Is and errors.As see it). It fails if a line is
// longer than MaxLineBytes, or if the blob ends before r does (blobs must not change while a job
// runs).
func Lines(ctx context.Context, env Env, r BlobRange, fn func(line []byte) error) error {
	if err := r.Validate(); err != nil {
		return fmt.Errorf("read lines: %w", err)
	}
	if f, _ := formOf(r.Format, r.KeyText, r.ValueText); r.Format != "" && (f.tsv || f.zst) {
		return outputLines(ctx, env, r, f, fn)
	}
	from := max(r.Offset-1, 0)
	rc, err := openTail(ctx, env, r, from)
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

// DefaultJobsContainer is where job results are when the Env does not say (JobsEnv).
const DefaultJobsContainer = "jobs"

// maxManifestBytes bounds the result BlobInput.Job reads as an OutputManifest.
const maxManifestBytes = 64 << 20

// OutputKind is the kind of a result that is an OutputManifest.
const OutputKind = "keyed-output"

// OutputManifest is a keyed job's result: its committed output blobs, one per partition in
// partition order, in the jobs container, keys sorted inside a partition. This is its one
// declaration: the leader writes it, the client and BlobInput.Job read it.
type OutputManifest struct {
	Kind   string `json:"kind"`   // OutputKind
	Format string `json:"format"` // one of OutputFormats
	// KeyText, ValueText: in TSV, the column is text (see OutputTSV).
	KeyText    bool              `json:"key_text,omitempty"`
	ValueText  bool              `json:"value_text,omitempty"`
	Container  string            `json:"container"`
	Partitions []OutputPartition `json:"partitions"`
	Records    int64             `json:"records"`
	Bytes      int64             `json:"bytes"`
}

// OutputPartition is one committed output blob.
type OutputPartition struct {
	Partition int    `json:"partition"`
	Blob      string `json:"blob"`
	Records   int64  `json:"records"`
	Bytes     int64  `json:"bytes"`
}

// Check reports what is wrong with m as the manifest of job id: its format, partitions out of order, a blob outside the job's output prefix ("<id>/out/"), negative
// counts, or totals that disagree with the partitions.
func (m *OutputManifest) Check(id string) error {
	if _, ok := formOf(m.Format, m.KeyText, m.ValueText); !ok {
		return fmt.Errorf("output manifest of job %s: format %q, want one of %s", id, m.Format, strings.Join(OutputFormats(), ", "))
	}
	var records, bytes int64
	for i, p := range m.Partitions {
		if p.Partition != i || !strings.HasPrefix(p.Blob, id+"/out/") || p.Records < 0 || p.Bytes < 0 {
			return fmt.Errorf("output manifest of job %s: bad entry %d (partition %d, blob %q, %d records, %d bytes)",
				id, i, p.Partition, p.Blob, p.Records, p.Bytes)
		}
		records += p.Records
		bytes += p.Bytes
	}
	if records != m.Records || bytes != m.Bytes {
		return fmt.Errorf("output manifest of job %s: totals %d records, %d bytes disagree with its partitions (%d, %d)",
			id, m.Records, m.Bytes, records, bytes)
	}
	return nil
}

// JobsEnv is the optional interface of an Env that knows the cluster's jobs container, where
// BlobInput.Job finds a job's output manifest. The worker's Env has it.
type JobsEnv interface {
	Env
	JobsContainer() string
}

// jobIDPattern reports whether id can be a job id (internal/protocol.CheckID's rule).
func jobIDPattern(id string) bool {
	if id == "" || len(id) > 64 {
		return false
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' && i > 0) {
			return false
		}
	}
	return true
}

// DecodeJobOutput decodes job id's stored result as an output manifest and returns its
// container and its blobs in partition order, with their sizes. A result that is a value, not a
// manifest, is an error that says so. The blobs are in the format the job stored them in
// (OutputManifest.Format): read their records with OutputManifest.ReadRecords, or through
// BlobInput.Job and Lines.
func DecodeJobOutput(id string, result []byte) (container string, blobs []BlobInfo, err error) {
	m, err := decodeJobOutput(id, result)
	if err != nil {
		return "", nil, err
	}
	for _, p := range m.Partitions {
		blobs = append(blobs, BlobInfo{Name: p.Blob, Size: p.Bytes})
	}
	return m.Container, blobs, nil
}

// decodeJobOutput decodes and checks job id's stored result as an output manifest.
func decodeJobOutput(id string, result []byte) (*OutputManifest, error) {
	var m OutputManifest
	if err := json.Unmarshal(result, &m); err != nil || m.Kind != OutputKind {
		return nil, fmt.Errorf("job %s has no output blobs: its result is a value (an aggregate job), not a keyed job's output", id)
	}
	if err := m.Check(id); err != nil {
		return nil, err
	}
	if reason := ContainerNameProblem(m.Container); reason != "" {
		return nil, fmt.Errorf("output manifest of job %s: container %q: %s", id, m.Container, reason)
	}
	return &m, nil
}

// splitJobOutput cuts the output blobs of job id into ranges of in's size (rangeSize).
func splitJobOutput(ctx context.Context, env Env, id string, in BlobInput) ([]BlobRange, error) {
	jobsC := jobsContainer(env)
	name := id + "/result.json"
	rc, err := env.ReadRange(ctx, jobsC, name, 0, maxManifestBytes+1)
	if err != nil {
		return nil, fmt.Errorf("input job %s: read its result %s/%s (has it succeeded? is it a keyed job?): %w", id, jobsC, name, err)
	}
	defer rc.Close()
	data, err := io.ReadAll(rc)
	if err != nil {
		return nil, fmt.Errorf("input job %s: read its result %s/%s: %w", id, jobsC, name, err)
	}
	if len(data) > maxManifestBytes {
		return nil, fmt.Errorf("input job %s: its result is over %d bytes: not an output manifest", id, maxManifestBytes)
	}
	m, err := decodeJobOutput(id, data)
	if err != nil {
		return nil, fmt.Errorf("input job: %w", err)
	}
	var ranges []BlobRange
	if f, _ := formOf(m.Format, m.KeyText, m.ValueText); f.zst {
		// A compressed blob cannot be cut: one range each.
		for _, p := range m.Partitions {
			if p.Bytes == 0 {
				continue
			}
			if p.Bytes > MaxRangeBytes {
				return nil, fmt.Errorf("input job %s: output blob %s is %d bytes, stored compressed (%s): a compressed blob is one shard, at most %d bytes; run the job again with an uncompressed output_format",
					id, p.Blob, p.Bytes, m.Format, MaxRangeBytes)
			}
			if len(ranges) == MaxShards {
				return nil, fmt.Errorf("input job %s: more than %d output blobs", id, MaxShards)
			}
			ranges = append(ranges, BlobRange{Container: m.Container, Blob: p.Blob, Length: p.Bytes})
		}
	} else {
		blobs := make([]BlobInfo, 0, len(m.Partitions))
		for _, p := range m.Partitions {
			blobs = append(blobs, BlobInfo{Name: p.Blob, Size: p.Bytes})
		}
		if ranges, err = cutBlobs(m.Container, blobs, in.rangeSize(env, totalSize(blobs)), "input job "+id, "shard_bytes"); err != nil {
			return nil, err
		}
	}
	if m.Format != OutputJSONL {
		for i := range ranges {
			ranges[i].Format, ranges[i].KeyText, ranges[i].ValueText = m.Format, m.KeyText, m.ValueText
		}
	}
	if len(ranges) == 0 {
		return nil, fmt.Errorf("input job %s: its output has no records", id)
	}
	return ranges, nil
}

// SplitRecord splits an output record, a line {"key":K,"value":V} as a keyed job's output blobs
// hold it, into the JSON texts of its key and value (sub-slices of line). It checks the shape, not
// that K and V are valid JSON: AppendTSVField and json.Unmarshal do. A key that was a string of
// any bytes (AppendJSONString writes bytes that are not UTF-8 as \udc80–\udcff) reads back
// byte for byte with AppendUnquoted; json.Unmarshal would make such bytes U+FFFD.
func SplitRecord(line []byte) (key, value []byte, err error) {
	const head, mid = `{"key":`, `,"value":`
	if !bytes.HasPrefix(line, []byte(head)) || len(line) < len(head)+len(mid)+3 || line[len(line)-1] != '}' {
		return nil, nil, fmt.Errorf("output record %.60q: want {\"key\":K,\"value\":V}", line)
	}
	rest := line[len(head) : len(line)-1]
	n := jsonValueEnd(rest)
	if n <= 0 || !bytes.HasPrefix(rest[n:], []byte(mid)) || len(rest) == n+len(mid) {
		return nil, nil, fmt.Errorf("output record %.60q: want {\"key\":K,\"value\":V}", line)
	}
	return rest[:n], rest[n+len(mid):], nil
}

// jsonValueEnd returns the length of the compact JSON value at the start of b, or 0 if it has
// none. A string ends at its closing quote, an object or array at its matching bracket, a
// literal or number at the next ',', '}' or ']'.
func jsonValueEnd(b []byte) int {
	if len(b) == 0 {
		return 0
	}
	depth, inStr := 0, false
	for i := 0; i < len(b); i++ {
		c := b[i]
		switch {
		case inStr:
			if c == '\\' {
				i++
			} else if c == '"' {
				inStr = false
				if depth == 0 {
					return i + 1
				}
			}
		case c == '"':
			inStr = true
		case c == '{' || c == '[':
			depth++
		case c == '}' || c == ']':
			if depth == 0 {
				return i
			}
			depth--
			if depth == 0 {
				return i + 1
			}
		case c == ',' && depth == 0:
			return i
		}
	}
	if depth == 0 && !inStr {
		return len(b)
	}
	return 0
}
