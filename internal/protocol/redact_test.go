package protocol

import (
	"strings"
	"testing"
)

func TestRedact(t *testing.T) {
	in := `GET https://acct.blob.core.windows.net/jobs/x?sv=2020&sig=abcd%2F: 403; DefaultEndpointsProtocol=https;AccountName=a;AccountKey=c2VjcmV0==;`
	out := Redact(in)
	for _, secret := range []string{"abcd", "c2VjcmV0", "sv=2020"} {
		if strings.Contains(out, secret) {
			t.Fatalf("Redact left %q in %q", secret, out)
		}
	}
	if !strings.Contains(out, "AccountName=a") || !strings.Contains(out, "403") {
		t.Fatalf("Redact removed too much: %q", out)
	}
}
