package jobs_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/mapagg/mapagg/internal/protocol"
	"github.com/mapagg/mapagg/jobs"
	"github.com/mapagg/mapagg/jobs/jobstest"
)

func TestBlobInput_Job_Params(t *testing.T) {
	var p withInput
	if _, err := jobs.DecodeParams("h", []byte(`{"width": 3}`), &p); err != nil {
		t.Fatal(err)
	}
	if err := p.Validate(); err == nil || !strings.Contains(err.Error(), `"container" is required (or "job"`) {
		t.Errorf("no container and no job: %v", err)
	}
	if _, err := jobs.DecodeParams("h", []byte(`{"job": "20261125-120000-0000beef"}`), &p); err != nil || p.Validate() != nil {
		t.Errorf("job input: %+v, %v", p, err)
	}
}

// The manifest BlobInput.Job reads is the one internal/protocol defines.
func TestDecodeJobOutput_MatchesProtocol(t *testing.T) {
	id := "20261125-120000-0000beef"
	m := protocol.OutputManifest{Kind: protocol.OutputKind, Format: protocol.OutputFormat, Container: "jobs",
		Partitions: []protocol.OutputPartition{{Partition: 0, Blob: protocol.OutputBlob(id, 0, 2), Records: 1, Bytes: 9}}, Records: 1, Bytes: 9}
	data, _ := json.Marshal(m)
	c, blobs, err := jobs.DecodeJobOutput(id, data)
	if err != nil || c != "jobs" || len(blobs) != 1 || blobs[0].Name != m.Partitions[0].Blob || blobs[0].Size != 9 {
		t.Fatalf("DecodeJobOutput = %q, %+v, %v", c, blobs, err)
	}
	for _, bad := range []string{`{"count":3}`, `[1]`, `{"kind":"keyed-output","format":"csv","container":"jobs"}`,
		`{"kind":"keyed-output","format":"jsonl","container":"jobs","partitions":[{"partition":1,"blob":"` + id + `/out/x"}]}`,
		`{"kind":"keyed-output","format":"jsonl","container":"jobs","partitions":[{"partition":0,"blob":"other/out/x"}]}`} {
		if _, _, err := jobs.DecodeJobOutput(id, []byte(bad)); err == nil {
			t.Errorf("DecodeJobOutput(%s) accepted it", bad)
		}
	}
}

func TestBlobInput_Job_Split(t *testing.T) {
	id := "20261125-120000-0000beef"
	env := jobstest.NewEnv()
	lines := `{"key":"a","value":1}` + "\n" + `{"key":"b","value":2}` + "\n"
	env.Put("jobs", protocol.OutputBlob(id, 0, 1), []byte(lines))
	m := protocol.OutputManifest{Kind: protocol.OutputKind, Format: protocol.OutputFormat, Container: "jobs",
		Partitions: []protocol.OutputPartition{{Partition: 0, Blob: protocol.OutputBlob(id, 0, 1), Records: 2, Bytes: int64(len(lines))},
			{Partition: 1, Blob: protocol.OutputBlob(id, 1, 1)}},
		Records: 2, Bytes: int64(len(lines))}
	data, _ := json.Marshal(m)
	env.Put("jobs", protocol.ResultBlob(id), data)
	ranges, err := jobs.BlobInput{Job: id, ShardBytes: 10}.Split(context.Background(), env)
	if err != nil || len(ranges) != 5 || ranges[0].Container != "jobs" || ranges[4].Length != 4 {
		t.Fatalf("Split = %+v, %v", ranges, err)
	}
}

func TestSplitRecord(t *testing.T) {
	for line, want := range map[string][2]string{
		`{"key":"a","value":1}`:                            {`"a"`, `1`},
		`{"key":"a\",\"value\":","value":"x"}`:             {`"a\",\"value\":"`, `"x"`},
		`{"key":12,"value":{"a":[1,"}"]}}`:                 {`12`, `{"a":[1,"}"]}`},
		`{"key":[1,{"b":"]"}],"value":null}`:               {`[1,{"b":"]"}]`, `null`},
		`{"key":{"k":"v","value":2},"value":[true,false]}`: {`{"k":"v","value":2}`, `[true,false]`},
	} {
		k, v, err := jobs.SplitRecord([]byte(line))
		if err != nil || string(k) != want[0] || string(v) != want[1] {
			t.Errorf("SplitRecord(%s) = %s, %s, %v; want %s, %s", line, k, v, err, want[0], want[1])
		}
	}
	for _, bad := range []string{``, `{}`, `{"key":"a"}`, `{"key":"a","value":}`, `{"value":1,"key":"a"}`, `{"key":"a,"value":1}`,
		`{"key":"a","value":1`, `["key","value"]`} {
		if k, v, err := jobs.SplitRecord([]byte(bad)); err == nil {
			t.Errorf("SplitRecord(%s) = %s, %s: accepted", bad, k, v)
		}
	}
}

// FuzzSplitRecord: any line is split or refused without a panic, and a record written the way
// output blobs are (AppendCompactJSON of a key and a value) splits back into them.
func FuzzSplitRecord(f *testing.F) {
	f.Add([]byte(`"a"`), []byte(`1`))
	f.Add([]byte(`{"x":[1,"]"]}`), []byte(`"v,\"value\":"`))
	f.Add([]byte(`12`), []byte(`null`))
	f.Fuzz(func(t *testing.T, key, value []byte) {
		_, _, _ = jobs.SplitRecord(key)
		k, kerr := jobs.AppendCompactJSON(nil, key)
		v, verr := jobs.AppendCompactJSON(nil, value)
		if kerr != nil || verr != nil {
			return
		}
		line := append(append(append(append([]byte(`{"key":`), k...), `,"value":`...), v...), '}')
		gk, gv, err := jobs.SplitRecord(line)
		if err != nil || string(gk) != string(k) || string(gv) != string(v) {
			t.Fatalf("SplitRecord(%s) = %s, %s, %v; want %s, %s", line, gk, gv, err, k, v)
		}
	})
}

// FuzzDecodeJobOutput: any stored result decodes or is refused without a panic; what decodes
// names blobs under the job's output prefix.
func FuzzDecodeJobOutput(f *testing.F) {
	f.Add([]byte(`{"kind":"keyed-output","format":"jsonl","container":"jobs","partitions":[{"partition":0,"blob":"j/out/p","bytes":3}]}`))
	f.Add([]byte(`{"count":1}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		_, blobs, err := jobs.DecodeJobOutput("j", data)
		for _, b := range blobs {
			if err == nil && (!strings.HasPrefix(b.Name, "j/out/") || b.Size < 0) {
				t.Fatalf("decoded blob %+v", b)
			}
		}
	})
}
