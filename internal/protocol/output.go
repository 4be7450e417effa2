package protocol

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
)

// Blob layout of a keyed job (beside the names in layout.go), all in the jobs container:
//
//	<job-id>/map/<shard>.<attempt>          one map attempt's runs, its partitions back to back
//	<job-id>/map-manifest                   the committed map attempts and their run offsets
//	<job-id>/out/part-<p>.<attempt>.jsonl   one reduce attempt's output of partition p
//	<job-id>/result.json                    the OutputManifest: the committed output blobs
//
// Only the blobs an OutputManifest names are kept when the job ends; everything else under
// map/, out/ and the map manifest is deleted, found by listing, after any failover too.

// OutputKind marks a result that is an OutputManifest, not an aggregate value.
const OutputKind = "keyed-output"

// OutputFormat is the format of the stored output blobs: JSON lines, lossless.
const OutputFormat = "jsonl"

func MapPrefix(id string) string       { return id + "/map/" }
func MapManifestBlob(id string) string { return id + "/map-manifest" }
func OutputPrefix(id string) string    { return id + "/out/" }

// MapRunBlob names map attempt a of shard s.
func MapRunBlob(id string, shard, attempt int) string {
	return fmt.Sprintf("%s%d.%d", MapPrefix(id), shard, attempt)
}

// OutputBlob names reduce attempt a of partition p.
func OutputBlob(id string, partition, attempt int) string {
	return fmt.Sprintf("%spart-%05d.%d.%s", OutputPrefix(id), partition, attempt, OutputFormat)
}

// OutputManifest is the result of a keyed job: its committed output blobs, one per partition in
// partition order, in the jobs container. Keys are sorted inside a partition.
type OutputManifest struct {
	Kind       string            `json:"kind"`   // OutputKind
	Format     string            `json:"format"` // OutputFormat
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

// ErrNotOutput: the result is an aggregate value, not an OutputManifest.
var ErrNotOutput = errors.New("the job's result is a value, not output blobs")

// IsOutputManifest reports whether a stored result is an OutputManifest, without decoding it
// whole.
func IsOutputManifest(result []byte) bool {
	var probe struct {
		Kind string `json:"kind"`
	}
	s := strings.TrimSpace(string(result))
	if !strings.HasPrefix(s, "{") {
		return false
	}
	return json.Unmarshal(result, &probe) == nil && probe.Kind == OutputKind
}

// DecodeOutputManifest decodes and checks a stored result of job id. It returns ErrNotOutput for an
// aggregate result.
func DecodeOutputManifest(id string, result []byte) (*OutputManifest, error) {
	if !IsOutputManifest(result) {
		return nil, ErrNotOutput
	}
	var m OutputManifest
	if err := json.Unmarshal(result, &m); err != nil {
		return nil, fmt.Errorf("output manifest of job %s: %w", id, err)
	}
	if m.Format != OutputFormat {
		return nil, fmt.Errorf("output manifest of job %s: format %q, want %q", id, m.Format, OutputFormat)
	}
	var records, bytes int64
	for i, p := range m.Partitions {
		if p.Partition != i {
			return nil, fmt.Errorf("output manifest of job %s: entry %d is partition %d", id, i, p.Partition)
		}
		if !strings.HasPrefix(p.Blob, OutputPrefix(id)) {
			return nil, fmt.Errorf("output manifest of job %s: blob %q is not under %s", id, p.Blob, OutputPrefix(id))
		}
		if p.Records < 0 || p.Bytes < 0 {
			return nil, fmt.Errorf("output manifest of job %s: partition %d has negative counts", id, i)
		}
		records += p.Records
		bytes += p.Bytes
	}
	if records != m.Records || bytes != m.Bytes {
		return nil, fmt.Errorf("output manifest of job %s: totals %d records, %d bytes disagree with its partitions (%d, %d)",
			id, m.Records, m.Bytes, records, bytes)
	}
	return &m, nil
}
