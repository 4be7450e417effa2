package protocol

import (
	"strings"
	"testing"
)

// FuzzDecodeOutputManifest: any stored result decodes or is refused without a panic; a manifest
// that decodes has its partitions in order, under the job's output prefix, adding up to its
// totals.
func FuzzDecodeOutputManifest(f *testing.F) {
	id := "20261125-120000-0000beef"
	f.Add([]byte(`{"kind":"keyed-output","format":"jsonl","container":"jobs","partitions":[{"partition":0,"blob":"` +
		OutputBlob(id, 0, 1) + `","records":2,"bytes":40}],"records":2,"bytes":40}`))
	f.Add([]byte(`{"kind":"keyed-output"}`))
	f.Add([]byte(`{"count":3}`))
	f.Add([]byte(`[]`))
	f.Fuzz(func(t *testing.T, data []byte) {
		m, err := DecodeOutputManifest(id, data)
		if err != nil {
			return
		}
		var records, bytes int64
		for i, p := range m.Partitions {
			if p.Partition != i || !strings.HasPrefix(p.Blob, OutputPrefix(id)) || p.Records < 0 || p.Bytes < 0 {
				t.Fatalf("decoded partition %d: %+v", i, p)
			}
			records += p.Records
			bytes += p.Bytes
		}
		if records != m.Records || bytes != m.Bytes || m.Format != OutputFormat {
			t.Fatalf("decoded manifest %+v", m)
		}
	})
}
