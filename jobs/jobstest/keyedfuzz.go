package jobstest

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/mapagg/mapagg/jobs"
)

// FuzzKeyedRecords fuzzes the decoders a keyed job applies to intermediate records, which come
// from storage: Reduce of a key and values, and Combine of two values. seeds are encoded keys or
// values (jobs.EncodeKey, jobs.EncodeValue). For every input, neither panics (a byte-level job
// must not; Keyed turns a panic into an error, which fails the fuzz too), and Reduce emits JSON.
// A record Keyed cannot decode is an error matching jobs.ErrBadRecord. Keys are arbitrary bytes,
// most of them not UTF-8: a key emitted as a JSON string must read back (jobs.AppendUnquoted);
// write string keys with jobs.AppendJSONString so that distinct keys stay distinct.
func FuzzKeyedRecords(f *testing.F, job jobs.KeyedJob, seeds ...[]byte) {
	f.Helper()
	for _, s := range seeds {
		f.Add(s, s)
	}
	f.Add([]byte{}, []byte{})
	f.Fuzz(func(t *testing.T, a, b []byte) {
		err := job.Reduce(context.Background(), a, slices.Values([][]byte{b, a}), func(k, v []byte) error {
			if !json.Valid(k) || !json.Valid(v) {
				t.Fatalf("%s: Reduce emitted a record that is not JSON: %q %q", job.Type(), k, v)
			}
			if len(k) > 0 && k[0] == '"' {
				if _, err := jobs.AppendUnquoted(nil, k); err != nil {
					t.Fatalf("%s: Reduce emitted a key that does not read back: %v", job.Type(), err)
				}
			}
			return nil
		})
		if err != nil && strings.Contains(err.Error(), "panic") {
			t.Fatalf("%s: Reduce panicked: %v", job.Type(), err)
		}
		if c := job.Combiner(); c != nil {
			if _, err := c(nil, a, b); err != nil && strings.Contains(err.Error(), "panic") {
				t.Fatalf("%s: Combine panicked: %v", job.Type(), err)
			}
		}
	})
}
