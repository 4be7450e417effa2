package audit_test

import (
	"encoding/hex"
	"testing"

	"github.com/mapagg/mapagg/internal/audit"
)

func FuzzDecodeAuditEntry(f *testing.F) {
	f.Add([]byte(hex.EncodeToString([]byte(`{"at":"2026-11-28T10:00:00Z","actor":"ci","action":"job.submit","job":"20261128-100000-0000beef"}`))))
	f.Add([]byte("zz"))
	f.Fuzz(func(t *testing.T, data []byte) {
		e, err := audit.DecodeEntry(data)
		if err == nil && (e.Action == "" || e.At.IsZero()) {
			t.Fatalf("accepted an entry without action or time: %+v", e)
		}
	})
}
