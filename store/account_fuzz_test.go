package store_test

import (
	"strings"
	"testing"

	"github.com/mapagg/mapagg/store"
)

// FuzzAccount: any settings (outside input: flags and environment) are validated without a panic,
// and neither the errors nor the description ever show the SAS token or the connection string's
// key or signature.
func FuzzAccount(f *testing.F) {
	f.Add(secretConn, "", "", "")
	f.Add("", "https://acct.blob.core.windows.net", "", secretSAS)
	f.Add("", "http://127.0.0.1:10000/devstoreaccount1", "http://127.0.0.1:10001/devstoreaccount1", "sv=1&sig=x")
	f.Add("AccountKey=abcd;BlobEndpoint=https://x", "https://x.blob.y/?sig=abc", "q", "?a b")
	f.Fuzz(func(t *testing.T, conn, blobURL, queueURL, sas string) {
		a := store.Account{ConnectionString: conn, BlobURL: blobURL, QueueURL: queueURL, SASToken: sas}
		var secrets []string
		if s := strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(sas), "?")); len(s) >= 6 {
			secrets = append(secrets, s)
		}
		for _, part := range strings.Split(conn, ";") {
			k, v, _ := strings.Cut(part, "=")
			if k = strings.TrimSpace(k); (k == "AccountKey" || k == "SharedAccessSignature") && len(v) >= 6 {
				secrets = append(secrets, v)
			}
		}
		shown := []string{a.String()}
		if err := a.Validate(); err != nil {
			shown = append(shown, err.Error())
		} else if c, err := a.Open(); err != nil {
			shown = append(shown, err.Error())
		} else {
			shown = append(shown, c.String())
		}
		for _, s := range shown {
			for _, secret := range secrets {
				// A secret that is also part of a non-secret field (an endpoint) may show there.
				if strings.Contains(s, secret) && !strings.Contains(blobURL+queueURL, secret) && !endpointHolds(conn, secret) {
					t.Fatalf("%q shows secret %q", s, secret)
				}
			}
		}
	})
}

// endpointHolds reports whether a non-secret part of a connection string contains s.
func endpointHolds(conn, s string) bool {
	for _, part := range strings.Split(conn, ";") {
		k, v, _ := strings.Cut(part, "=")
		if k = strings.TrimSpace(k); k != "AccountKey" && k != "SharedAccessSignature" && strings.Contains(k+"="+v, s) {
			return true
		}
	}
	return false
}
