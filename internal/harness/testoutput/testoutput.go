// Package testoutput stores a finished keyed job's output as the cluster does, for tests of the
// readers.
//
// It writes the output blobs with shuffle's JSON-lines writer, the OutputManifest as
// result.json, and a succeeded checkpoint with its status record.
package testoutput

import (
	"bytes"
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/mapagg/mapagg/internal/protocol"
	"github.com/mapagg/mapagg/internal/shuffle"
	"github.com/mapagg/mapagg/jobs"
	"github.com/mapagg/mapagg/store"
)

// Record is one output record: the JSON texts of its key and value.
type Record [2]string

// Put stores job id as a succeeded keyed job with one output blob per element of parts (records
// in the order given: sort them for a real job's order), and returns its manifest.
func Put(t testing.TB, c *store.Container, id string, parts [][]Record) *protocol.OutputManifest {
	t.Helper()
	ctx := context.Background()
	m := &protocol.OutputManifest{Kind: protocol.OutputKind, Format: protocol.OutputFormat, Container: c.Name()}
	for p, recs := range parts {
		var buf bytes.Buffer
		w, err := shuffle.NewOutputWriter(&buf, shuffle.FormatJSONL)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range recs {
			if err := w.WriteRecord([]byte(r[0]), []byte(r[1])); err != nil {
				t.Fatal(err)
			}
		}
		if err := w.Flush(); err != nil {
			t.Fatal(err)
		}
		blob := protocol.OutputBlob(id, p, 1)
		if _, err := c.Put(ctx, blob, buf.Bytes(), store.Cond{}); err != nil {
			t.Fatal(err)
		}
		m.Partitions = append(m.Partitions, protocol.OutputPartition{Partition: p, Blob: blob, Records: w.Records(), Bytes: w.Bytes()})
		m.Records += w.Records()
		m.Bytes += w.Bytes()
	}
	data, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Put(ctx, protocol.ResultBlob(id), data, store.Cond{}); err != nil {
		t.Fatal(err)
	}
	PutState(t, c, id, jobs.StateSucceeded, data)
	return m
}

// PutState stores job id's checkpoint, with its status record, in state with result.
func PutState(t testing.TB, c *store.Container, id string, state jobs.State, result []byte) {
	t.Helper()
	now := time.Now().UTC()
	cp := protocol.Checkpoint{Version: protocol.CheckpointVersion, Job: id, Type: "keyed", State: state, PlanEpoch: 1, WriterEpoch: 1,
		Total: 1, DoneCount: 1, Dispatched: 1, Result: json.RawMessage(result), UpdatedAt: now}
	if !state.Terminal() {
		cp.DoneCount, cp.Result = 0, nil
	} else {
		cp.FinishedAt = &now
	}
	data, err := cp.Encode()
	if err != nil {
		t.Fatal(err)
	}
	md, err := protocol.NewStatusRecord(&cp, nil).Metadata()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.PutMeta(context.Background(), protocol.CheckpointBlob(id), data, md, store.Cond{}); err != nil {
		t.Fatal(err)
	}
}
