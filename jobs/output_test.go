package jobs_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/mapagg/mapagg/internal/protocol"
	"github.com/mapagg/mapagg/internal/shuffle"
	"github.com/mapagg/mapagg/jobs"
	"github.com/mapagg/mapagg/jobs/jobstest"
)

// outputRecords are records of a job whose keys and values are text: strings with every byte
// TSV escapes, an empty one and bytes that are not UTF-8, as the typed API writes them.
func outputRecords() [][2]string {
	var recs [][2]string
	for i, s := range []string{"", "plain", "tab\there", "line\nbreak\r", `back\slash\t`, "\xff\xfe not utf-8", "ünïcode", `"quoted"`} {
		recs = append(recs, [2]string{string(jobs.AppendJSONString(nil, s)), string(jobs.AppendJSONString(nil, fmt.Sprint(i, s)))})
	}
	return recs
}

// writeOutput stores recs in format with the given text columns, as a reduce task does.
func writeOutput(t *testing.T, recs [][2]string, format string, keyText, valueText bool) []byte {
	t.Helper()
	var buf bytes.Buffer
	w, err := shuffle.NewStoredWriter(&buf, format, keyText, valueText)
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
	if w.Bytes() != int64(buf.Len()) || w.Records() != int64(len(recs)) {
		t.Fatalf("%s: the writer counts %d records in %d bytes; %d in %d written", format, w.Records(), w.Bytes(), len(recs), buf.Len())
	}
	return buf.Bytes()
}

// Every stored format reads back the JSON texts written, byte for byte: text columns of any
// bytes, JSON columns of any value.
func TestOutputFormats_RoundTrip(t *testing.T) {
	text := outputRecords()
	mixed := [][2]string{{`"a\tb"`, `{"n":[1,"x\ty"],"s":"\\"}`}, {`"c"`, `-12.5e3`}, {`"d"`, `"a string in a JSON column"`}, {`"e"`, `null`}}
	keys := [][2]string{{`{"k":[1,2]}`, `3`}, {`[1,"\t"]`, `"v"`}, {`17`, `true`}}
	for _, format := range jobs.OutputFormats() {
		for _, c := range []struct {
			name               string
			recs               [][2]string
			keyText, valueText bool
		}{{"text", text, true, true}, {"text keys", mixed, true, false}, {"JSON", keys, false, false}} {
			data := writeOutput(t, c.recs, format, c.keyText, c.valueText)
			m := &jobs.OutputManifest{Format: format, KeyText: c.keyText, ValueText: c.valueText}
			var got [][2]string
			if err := m.ReadRecords(bytes.NewReader(data), func(k, v []byte) error {
				got = append(got, [2]string{string(k), string(v)})
				return nil
			}); err != nil {
				t.Fatalf("%s, %s: %v", format, c.name, err)
			}
			if fmt.Sprint(got) != fmt.Sprint(c.recs) {
				t.Errorf("%s, %s: read back\n%q\nwant\n%q", format, c.name, got, c.recs)
			}
			if format == "tsv" && c.name == "text" && !bytes.Contains(data, []byte("tab\\there\t")) {
				t.Errorf("tsv: a text column is not the string's bytes, escaped: %q", data)
			}
		}
	}
}

// A column the job said is text holds strings only: anything else fails the write, naming the
// column.
func TestOutputFormats_TextColumnRefusesOtherJSON(t *testing.T) {
	w, err := shuffle.NewStoredWriter(&bytes.Buffer{}, "tsv", true, false)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.WriteRecord([]byte(`17`), []byte(`1`)); err == nil || !strings.Contains(err.Error(), "keys are text") {
		t.Errorf("a number as a text key: %v", err)
	}
	if _, err := shuffle.NewStoredWriter(&bytes.Buffer{}, "csv", false, false); err == nil || !strings.Contains(err.Error(), "tsv, jsonl") {
		t.Errorf("format csv: %v", err)
	}
	m := &jobs.OutputManifest{Format: "tsv", KeyText: true}
	for _, bad := range []string{"no tab here\n", "k\t\n", "bad\\q\t1\n"} {
		if err := m.ReadRecords(strings.NewReader(bad), func(k, v []byte) error { return nil }); err == nil || !strings.Contains(err.Error(), "record 1") {
			t.Errorf("stored %q: %v", bad, err)
		}
	}
}

// A keyed job's output read as another job's input (BlobInput.Job) gives {"key":K,"value":V}
// lines whatever the format it is stored in: a TSV blob cut into ranges across its lines, a
// compressed one whole.
func TestBlobInput_Job_ReadsEveryFormat(t *testing.T) {
	recs := outputRecords()
	for _, format := range jobs.OutputFormats() {
		id := "20261130-120000-0000beef"
		env := jobstest.NewEnv()
		m := protocol.OutputManifest{Kind: protocol.OutputKind, Format: format, Container: "jobs", KeyText: strings.HasPrefix(format, "tsv"), ValueText: strings.HasPrefix(format, "tsv")}
		for p, part := range [][][2]string{recs[:5], recs[5:]} {
			data := writeOutput(t, part, format, m.KeyText, m.ValueText)
			blob := protocol.OutputBlobIn(id, p, 1, format)
			env.Put("jobs", blob, data)
			m.Partitions = append(m.Partitions, protocol.OutputPartition{Partition: p, Blob: blob, Records: int64(len(part)), Bytes: int64(len(data))})
			m.Records, m.Bytes = m.Records+int64(len(part)), m.Bytes+int64(len(data))
		}
		data, _ := json.Marshal(m)
		env.Put("jobs", protocol.ResultBlob(id), data)
		ranges, err := jobs.BlobInput{Job: id, ShardBytes: 16}.Split(context.Background(), env)
		if err != nil {
			t.Fatalf("%s: split: %v", format, err)
		}
		if compressed := strings.HasSuffix(format, ".zst"); compressed != (len(ranges) == 2) {
			t.Errorf("%s: %d ranges", format, len(ranges))
		}
		var got [][2]string
		for _, r := range ranges {
			if err := jobs.Lines(context.Background(), env, r, func(line []byte) error {
				k, v, err := jobs.SplitRecord(line)
				got = append(got, [2]string{string(k), string(v)})
				return err
			}); err != nil {
				t.Fatalf("%s: range %+v: %v", format, r, err)
			}
		}
		if fmt.Sprint(got) != fmt.Sprint(recs) {
			t.Errorf("%s: read\n%q\nwant\n%q", format, got, recs)
		}
	}
}

// FuzzOutputRecords: a stored output blob of any bytes, in any format, is read without a panic,
// and every key and value of a text column read back is a JSON string.
func FuzzOutputRecords(f *testing.F) {
	for i, format := range jobs.OutputFormats() {
		var buf bytes.Buffer
		w, _ := shuffle.NewStoredWriter(&buf, format, true, false)
		_ = w.WriteRecord([]byte(`"a\tb"`), []byte(`{"x":1}`))
		_ = w.Flush()
		f.Add(buf.Bytes(), uint8(i), true)
	}
	f.Add([]byte("k\tv\nno tab\n"), uint8(0), false)
	f.Fuzz(func(t *testing.T, data []byte, which uint8, text bool) {
		formats := jobs.OutputFormats()
		m := &jobs.OutputManifest{Format: formats[int(which)%len(formats)], KeyText: text, ValueText: text}
		_ = m.ReadRecords(bytes.NewReader(data), func(k, v []byte) error {
			if strings.HasPrefix(m.Format, "tsv") && text && (!json.Valid(k) || k[0] != '"' || !json.Valid(v) || v[0] != '"') {
				t.Fatalf("%s, text columns: read %q, %q", m.Format, k, v)
			}
			return nil
		})
	})
}
