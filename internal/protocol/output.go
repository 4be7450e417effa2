package protocol

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/mapagg/mapagg/jobs"
)

// Blob layout of a keyed job (beside the names in layout.go), all in the jobs container:
//
//	<job-id>/map/<shard>.<attempt>          one map attempt's runs, its partitions back to back
//	<job-id>/map-manifest                   the committed map attempts and their run offsets
//	<job-id>/out/part-<p>.<attempt>.<fmt>   one reduce attempt's output of partition p (fmt: tsv, jsonl, …)
//	<job-id>/result.json                    the OutputManifest: the committed output blobs
//
// Only the blobs an OutputManifest names are kept when the job ends; everything else under
// map/, out/ and the map manifest is deleted, found by listing, after any failover too.

// The output manifest's schema is declared once, in jobs (BlobInput.Job reads it there).
const (
	OutputKind = jobs.OutputKind
	// OutputFormat is JSON lines: the format of earlier releases, and the default of a job
	// whose keys are not text.
	OutputFormat = jobs.OutputJSONL
)

func MapPrefix(id string) string       { return id + "/map/" }
func MapManifestBlob(id string) string { return id + "/map-manifest" }
func OutputPrefix(id string) string    { return id + "/out/" }

// MapRunBlob names map attempt a of shard s.
func MapRunBlob(id string, shard, attempt int) string {
	return fmt.Sprintf("%s%d.%d", MapPrefix(id), shard, attempt)
}

// OutputBlob names reduce attempt a of partition p, stored as JSON lines.
func OutputBlob(id string, partition, attempt int) string {
	return OutputBlobIn(id, partition, attempt, OutputFormat)
}

// OutputBlobIn names reduce attempt a of partition p, stored in format (its extension).
func OutputBlobIn(id string, partition, attempt int, format string) string {
	return fmt.Sprintf("%spart-%05d.%d.%s", OutputPrefix(id), partition, attempt, format)
}

// OutputManifest is the result of a keyed job (jobs.OutputManifest).
type (
	OutputManifest  = jobs.OutputManifest
	OutputPartition = jobs.OutputPartition
)

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
	if err := m.Check(id); err != nil {
		return nil, err
	}
	return &m, nil
}
