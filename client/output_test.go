package client_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/mapagg/mapagg/client"
	"github.com/mapagg/mapagg/internal/harness/testenv"
	"github.com/mapagg/mapagg/internal/harness/testoutput"
	"github.com/mapagg/mapagg/internal/protocol"
	"github.com/mapagg/mapagg/jobs"
	"github.com/mapagg/mapagg/store"
)

const keyedID = "20261125-120000-0000beef"

// keyedParts is a keyed job's output: two partitions, keys sorted, one empty partition, keys
// and values that TSV must escape.
var keyedParts = [][]testoutput.Record{
	{{`"apple"`, `3`}, {`"tab\tkey"`, `{"n": 1}`}},
	{},
	{{`"line\nbreak"`, `"v\\x"`}, {`"zebra"`, `[1,2]`}, {`7`, `null`}},
}

func TestClient_WriteOutput(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	m := testoutput.Put(t, e.jobs, keyedID, keyedParts)
	got, err := e.cl.Output(ctx, keyedID)
	if err != nil || got.Records != 5 || len(got.Partitions) != 3 || got.Bytes != m.Bytes {
		t.Fatalf("Output = %+v, %v", got, err)
	}
	wantTSV := "apple\t3\ntab\\tkey\t{\"n\":1}\nline\\nbreak\tv\\\\x\nzebra\t[1,2]\n7\tnull\n"
	for _, tt := range []struct {
		opts client.OutputOptions
		want string
	}{
		{client.OutputOptions{}, wantTSV},
		{client.OutputOptions{Format: "tsv"}, wantTSV},
		{client.OutputOptions{Format: "jsonl", Partition: ptr(0)},
			`{"key":"apple","value":3}` + "\n" + `{"key":"tab\tkey","value":{"n":1}}` + "\n"},
		{client.OutputOptions{Partition: ptr(1)}, ""},
		{client.OutputOptions{Partition: ptr(2)}, "line\\nbreak\tv\\\\x\nzebra\t[1,2]\n7\tnull\n"},
	} {
		var buf bytes.Buffer
		st, err := e.cl.WriteOutput(ctx, keyedID, &buf, tt.opts)
		if err != nil || buf.String() != tt.want || st.Bytes != int64(buf.Len()) {
			t.Errorf("WriteOutput(%+v) = %+v, %v:\n%q\nwant\n%q", tt.opts, st, err, buf.String(), tt.want)
		}
	}
	var all bytes.Buffer
	if _, err := e.cl.WriteOutput(ctx, keyedID, &all, client.OutputOptions{Format: "jsonl"}); err != nil {
		t.Fatal(err)
	}
	if all.Len() != int(m.Bytes) {
		t.Errorf("jsonl output is %d bytes, the blobs %d: not the stored lines", all.Len(), m.Bytes)
	}
}

func ptr(i int) *int { return &i }

func TestClient_WriteOutput_Errors(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	testoutput.Put(t, e.jobs, keyedID, keyedParts)
	aggID, runID, brokenID := "20261125-120000-00000agg", "20261125-120000-00000run", "20261125-120000-0broken0"
	e.putCheckpoint(t, aggID, jobs.StateSucceeded, 1, 1, `{"count":3}`, "")
	if _, err := e.jobs.Put(ctx, protocol.ResultBlob(aggID), []byte(`{"count":3}`), store.Cond{}); err != nil {
		t.Fatal(err)
	}
	e.putCheckpoint(t, runID, jobs.StateRunning, 0, 1, "", "")
	m := testoutput.Put(t, e.jobs, brokenID, keyedParts)
	if err := e.jobs.Delete(ctx, m.Partitions[2].Blob); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		id   string
		opts client.OutputOptions
		is   error
		msg  string
	}{
		{keyedID, client.OutputOptions{Format: "csv"}, nil, `output format "csv": want "tsv" or "jsonl"`},
		{keyedID, client.OutputOptions{Partition: ptr(-1)}, nil, "partitions are numbered from 0"},
		{keyedID, client.OutputOptions{Partition: ptr(3)}, nil, "has 3 partitions (0 to 2): no partition 3"},
		{"20261125-120000-0000none", client.OutputOptions{}, client.ErrNoSuchJob, "no such job"},
		{runID, client.OutputOptions{}, client.ErrNotFinished, "is running"},
		{aggID, client.OutputOptions{}, client.ErrNotKeyed, "use Result (`worker result`)"},
		{brokenID, client.OutputOptions{}, store.ErrNotFound, "output blob " + m.Partitions[2].Blob + " (partition 2 of job " + brokenID + ") is missing"},
	} {
		var buf bytes.Buffer
		_, err := e.cl.WriteOutput(ctx, tt.id, &buf, tt.opts)
		if err == nil || !strings.Contains(err.Error(), tt.msg) || tt.is != nil && !errors.Is(err, tt.is) {
			t.Errorf("WriteOutput(%s, %+v) = %v, want %q", tt.id, tt.opts, err, tt.msg)
		}
	}
}

// A blob that is not what its manifest says (changed by hand) is an error naming it, not a
// silently different answer.
func TestClient_WriteOutput_ChangedBlob(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	m := testoutput.Put(t, e.jobs, keyedID, keyedParts)
	if _, err := e.jobs.Put(ctx, m.Partitions[0].Blob, []byte(`{"key":"apple","value":3}`+"\n"), store.Cond{}); err != nil {
		t.Fatal(err)
	}
	_, err := e.cl.WriteOutput(ctx, keyedID, &bytes.Buffer{}, client.OutputOptions{})
	if err == nil || !strings.Contains(err.Error(), "has 1 records in 26 bytes, its manifest says 2") {
		t.Errorf("changed blob: %v", err)
	}
	if _, err := e.jobs.Put(ctx, m.Partitions[0].Blob, []byte("not a record\n"), store.Cond{}); err != nil {
		t.Fatal(err)
	}
	_, err = e.cl.WriteOutput(ctx, keyedID, &bytes.Buffer{}, client.OutputOptions{})
	if err == nil || !strings.Contains(err.Error(), "record 1: output record") {
		t.Errorf("bad record: %v", err)
	}
}

// A job's output is the input of another job: BlobInput{Job} splits its output blobs, and Lines
// and SplitRecord read every record once, over the real storage.
func TestBlobInput_FromJob(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	var parts [][]testoutput.Record
	var want []string
	for p := range 4 {
		var recs []testoutput.Record
		for k := range 300 * p {
			key := fmt.Sprintf(`"k%d-%05d"`, p, k)
			recs = append(recs, testoutput.Record{key, fmt.Sprint(k)})
			want = append(want, key+"="+fmt.Sprint(k))
		}
		parts = append(parts, recs)
	}
	testoutput.Put(t, e.jobs, keyedID, parts)
	bc, err := store.NewClient(testenv.Azurite(t))
	if err != nil {
		t.Fatal(err)
	}
	env := store.NewEnv(bc).WithJobsContainer(e.jobs.Name())
	in := jobs.BlobInput{Job: keyedID, ShardBytes: 1000}
	if err := in.Validate(); err != nil {
		t.Fatal(err)
	}
	ranges, err := in.Split(ctx, env)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, r := range ranges {
		err := jobs.Lines(ctx, env, r, func(line []byte) error {
			k, v, err := jobs.SplitRecord(line)
			if err != nil {
				return err
			}
			var n int
			if err := json.Unmarshal(v, &n); err != nil {
				return err
			}
			got = append(got, string(k)+"="+fmt.Sprint(n))
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	if strings.Join(got, ",") != strings.Join(want, ",") || len(ranges) < 10 {
		t.Fatalf("%d ranges read %d records, want %d", len(ranges), len(got), len(want))
	}
	aggID := "20261125-120000-00000agg"
	if _, err := e.jobs.Put(ctx, protocol.ResultBlob(aggID), []byte(`{"count":3}`), store.Cond{}); err != nil {
		t.Fatal(err)
	}
	for id, msg := range map[string]string{
		aggID:                      "its result is a value (an aggregate job)",
		"20261125-120000-0000none": "has it succeeded? is it a keyed job?",
	} {
		if _, err := (jobs.BlobInput{Job: id}).Split(ctx, env); err == nil || !strings.Contains(err.Error(), msg) {
			t.Errorf("Split of job %s: %v, want %q", id, err, msg)
		}
	}
}
