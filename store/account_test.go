package store_test

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"github.com/Azure/azure-sdk-for-go/sdk/azidentity"

	"github.com/mapagg/mapagg/internal/harness/testenv"
	"github.com/mapagg/mapagg/internal/queue"
	"github.com/mapagg/mapagg/store"
)

const (
	secretConn = "DefaultEndpointsProtocol=https;AccountName=acct;AccountKey=S3CRETKEdGVzdA==;EndpointSuffix=core.windows.net"
	secretSAS  = "sv=2021-08-06&ss=bq&srt=sco&sp=rwdlacup&se=2030-01-01T00:00:00Z&sig=S3CRETSIG"
)

func TestStorageAccount_ValidateRefusesBadCombinations(t *testing.T) {
	for _, tc := range []struct {
		name string
		acct store.Account
		want []string // substrings of the error, each a problem and what to do
	}{
		{"nothing", store.Account{}, []string{"no storage account", "--storage-account-url", "--azure-connection-string"}},
		{"connection string and URL", store.Account{ConnectionString: secretConn, BlobURL: "https://acct.blob.core.windows.net"},
			[]string{"both a connection string and an account URL", "drop --azure-connection-string", "or drop --storage-account-url"}},
		{"connection string and SAS", store.Account{ConnectionString: secretConn, SASToken: secretSAS}, []string{"SAS token and a connection string"}},
		{"queue URL alone", store.Account{QueueURL: "https://acct.queue.core.windows.net"}, []string{"without --storage-account-url"}},
		{"SAS in the URL", store.Account{BlobURL: "https://acct.blob.core.windows.net/?" + secretSAS}, []string{"carries a query", "--storage-sas-file"}},
		{"Entra ID over http", store.Account{BlobURL: "http://acct.blob.core.windows.net"}, []string{"only sent over https"}},
		{"not a URL", store.Account{BlobURL: "acct"}, []string{"not an http(s) URL"}},
		{"queue not derivable", store.Account{BlobURL: "https://storage.example.com", SASToken: secretSAS}, []string{"pass --storage-queue-url"}},
		{"malformed SAS", store.Account{BlobURL: "https://acct.blob.core.windows.net", SASToken: "?sv=1 ?sig=S3CRETSIG"}, []string{"SAS token is malformed"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.acct.Validate()
			if err == nil {
				t.Fatal("accepted")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
			for _, secret := range []string{"S3CRETKE", "S3CRETSIG"} {
				if strings.Contains(err.Error(), secret) {
					t.Errorf("error shows a secret: %q", err)
				}
			}
			if _, err := tc.acct.Open(); err == nil {
				t.Error("Open accepted what Validate refused")
			}
		})
	}
}

func TestStorageAccount_EachCombinationPicksItsCredentialAndEndpoints(t *testing.T) {
	for _, tc := range []struct {
		name              string
		acct              store.Account
		auth              store.Auth
		blobURL, queueURL string
	}{
		{"connection string", store.Account{ConnectionString: secretConn}, store.AuthConnectionString, "", ""},
		{"account URL: Entra ID", store.Account{BlobURL: "https://acct.blob.core.windows.net/"}, store.AuthEntraID,
			"https://acct.blob.core.windows.net/", "https://acct.queue.core.windows.net/"},
		{"account URL + SAS", store.Account{BlobURL: "https://acct.blob.core.windows.net", SASToken: "?" + secretSAS}, store.AuthSAS,
			"https://acct.blob.core.windows.net", "https://acct.queue.core.windows.net"},
		{"explicit queue URL", store.Account{BlobURL: "https://blobs.example.com", QueueURL: "https://queues.example.com", SASToken: secretSAS},
			store.AuthSAS, "https://blobs.example.com", "https://queues.example.com"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := tc.acct.Validate(); err != nil {
				t.Fatal(err)
			}
			if got := tc.acct.Auth(); got != tc.auth {
				t.Fatalf("auth %s, want %s", got, tc.auth)
			}
			b, q := tc.acct.Endpoints()
			if b != tc.blobURL || q != tc.queueURL {
				t.Fatalf("endpoints %q %q, want %q %q", b, q, tc.blobURL, tc.queueURL)
			}
			c, err := tc.acct.Open()
			if err != nil {
				t.Fatal(err)
			}
			_, isDefault := c.Credential().(*azidentity.DefaultAzureCredential)
			if isDefault != (tc.auth == store.AuthEntraID) {
				t.Fatalf("credential %T for %s", c.Credential(), tc.auth)
			}
			if _, err := queue.Open(c, "jobs"); err != nil {
				t.Fatal(err)
			}
			// Neither the description nor a structured log shows a secret.
			var buf bytes.Buffer
			slog.New(slog.NewJSONHandler(&buf, nil)).Info("start", "storage", tc.acct)
			for _, s := range []string{tc.acct.String(), c.String(), buf.String()} {
				if strings.Contains(s, "S3CRET") {
					t.Fatalf("secret shown: %s", s)
				}
				if !strings.Contains(s, string(tc.auth)) {
					t.Fatalf("%q does not name the auth mode %s", s, tc.auth)
				}
			}
		})
	}
}

// accountSAS signs an account SAS for the blob and queue services, as the Azure portal issues
// (the SDK's helpers sign one service each).
func accountSAS(t *testing.T, name, key string, expiry time.Time) string {
	t.Helper()
	const version = "2021-08-06"
	se := expiry.UTC().Format(time.RFC3339)
	toSign := strings.Join([]string{name, "rwdlacup", "bq", "sco", "", se, "", "https,http", version, "", ""}, "\n")
	k, err := base64.StdEncoding.DecodeString(key)
	if err != nil {
		t.Fatal(err)
	}
	mac := hmac.New(sha256.New, k)
	mac.Write([]byte(toSign))
	v := url.Values{"sv": {version}, "ss": {"bq"}, "srt": {"sco"}, "sp": {"rwdlacup"}, "se": {se}, "spr": {"https,http"},
		"sig": {base64.StdEncoding.EncodeToString(mac.Sum(nil))}}
	return v.Encode()
}

func endpoints(t *testing.T, conn string) (blob, queue string) {
	t.Helper()
	for _, part := range strings.Split(conn, ";") {
		k, v, _ := strings.Cut(part, "=")
		switch k {
		case "BlobEndpoint":
			blob = v
		case "QueueEndpoint":
			queue = v
		}
	}
	return blob, queue
}

// A SAS token against real Azurite: the jobs container, a blob and the queue all work; a SAS with
// a wrong signature is refused with an error that does not show it.
func TestStorageAccount_SASAgainstAzurite(t *testing.T) {
	ctx := context.Background()
	blobURL, queueURL := endpoints(t, testenv.Azurite(t))
	sas := accountSAS(t, testenv.AccountName, testenv.AccountKey, time.Now().Add(time.Hour))
	acct := store.Account{BlobURL: blobURL, QueueURL: queueURL, SASToken: sas}
	c, err := acct.Open()
	if err != nil {
		t.Fatal(err)
	}
	jobsC := store.New(c.Blob, testenv.Name(t, "sas"))
	if err := jobsC.Ensure(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := jobsC.Put(ctx, "x", []byte("hello"), store.Cond{IfNoneMatch: true}); err != nil {
		t.Fatal(err)
	}
	if got, _, err := jobsC.Get(ctx, "x"); err != nil || string(got) != "hello" {
		t.Fatalf("get: %q %v", got, err)
	}
	q, err := queue.Open(c, testenv.Name(t, "sasq"))
	if err != nil {
		t.Fatal(err)
	}
	if err := q.Ensure(ctx); err != nil {
		t.Fatal(err)
	}
	if err := q.Enqueue(ctx, "job-1"); err != nil {
		t.Fatal(err)
	}
	msgs, err := q.Receive(ctx, 1, time.Minute)
	if err != nil || len(msgs) != 1 || msgs[0].Text != "job-1" {
		t.Fatalf("receive: %+v %v", msgs, err)
	}

	// A forged signature: refused, and the error does not carry it.
	forged := strings.Replace(sas, "sig=", "sig=AAAA", 1)
	bad, err := store.Account{BlobURL: blobURL, QueueURL: queueURL, SASToken: forged}.Open()
	if err != nil {
		t.Fatal(err)
	}
	_, _, err = store.New(bad.Blob, jobsC.Name()).Get(ctx, "x")
	if err == nil {
		t.Fatal("a forged SAS read a blob")
	}
	sig, _ := url.ParseQuery(forged)
	for _, s := range []string{sig.Get("sig"), url.QueryEscape(sig.Get("sig"))} {
		if strings.Contains(err.Error(), s) {
			t.Fatalf("error shows the SAS signature: %v", err)
		}
	}
	bq, _ := queue.Open(bad, q.Name())
	if err := bq.Enqueue(ctx, "forged"); err == nil {
		t.Fatal("a forged SAS enqueued")
	} else if strings.Contains(err.Error(), sig.Get("sig")) || strings.Contains(err.Error(), url.QueryEscape(sig.Get("sig"))) {
		t.Fatalf("queue error shows the SAS signature: %v", err)
	}
}

type fakeCred struct {
	mu     sync.Mutex
	scopes []string
}

func (f *fakeCred) GetToken(_ context.Context, o policy.TokenRequestOptions) (azcore.AccessToken, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.scopes = append(f.scopes, o.Scopes...)
	return azcore.AccessToken{Token: "entra-token", ExpiresOn: time.Now().Add(time.Hour)}, nil
}

// With an account URL and no SAS, both the blob and the queue client send an Entra ID bearer token
// for the storage scope. (Azurite accepts OAuth only over https with its own certificate, so an
// https test server stands in for the endpoint; what is checked is the request each client sends.)
func TestStorageAccount_EntraIDSendsBearerTokenOnBlobAndQueue(t *testing.T) {
	var (
		mu   sync.Mutex
		seen []string
	)
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen = append(seen, r.Method+" "+r.URL.Path+" "+r.Header.Get("Authorization"))
		mu.Unlock()
		switch {
		case r.Method == http.MethodPut && (strings.HasSuffix(r.URL.Path, "/leader") || strings.HasSuffix(r.URL.Path, "/q2")):
			// A role scoped to an existing container or queue: creating it is not allowed.
			w.Header().Set("x-ms-error-code", "AuthorizationPermissionMismatch")
			w.WriteHeader(http.StatusForbidden)
		case r.Method == http.MethodPut:
			w.WriteHeader(http.StatusCreated)
		case strings.HasSuffix(r.URL.Path, "/messages"):
			w.Header().Set("Content-Type", "application/xml")
			_, _ = w.Write([]byte(`<?xml version="1.0" encoding="utf-8"?><QueueMessagesList></QueueMessagesList>`))
		default:
			w.WriteHeader(http.StatusOK)
		}
	}))
	defer srv.Close()
	cred := &fakeCred{}
	acct := store.Account{BlobURL: srv.URL + "/blobs", QueueURL: srv.URL + "/queues", Credential: cred, Transport: srv.Client()}
	c, err := acct.Open()
	if err != nil {
		t.Fatal(err)
	}
	if c.Auth() != store.AuthEntraID || c.Credential() != cred {
		t.Fatalf("auth %s credential %T", c.Auth(), c.Credential())
	}
	ctx := context.Background()
	if err := store.New(c.Blob, "jobs").Ensure(ctx); err != nil {
		t.Fatal(err)
	}
	q, err := queue.Open(c, "jobs")
	if err != nil {
		t.Fatal(err)
	}
	if err := q.Ensure(ctx); err != nil {
		t.Fatal(err)
	}
	// Least privilege: not allowed to create, but the container and queue exist and are readable.
	if err := store.New(c.Blob, "leader").Ensure(ctx); err != nil {
		t.Fatalf("existing container, create forbidden: %v", err)
	}
	q2, err := queue.Open(c, "q2")
	if err != nil {
		t.Fatal(err)
	}
	if err := q2.Ensure(ctx); err != nil {
		t.Fatalf("existing queue, create forbidden: %v", err)
	}
	mu.Lock()
	defer mu.Unlock()
	want := []string{"PUT /blobs/jobs Bearer entra-token", "PUT /queues/jobs Bearer entra-token", "PUT /blobs/leader Bearer entra-token",
		"GET /blobs/leader Bearer entra-token", "PUT /queues/q2 Bearer entra-token", "GET /queues/q2/messages Bearer entra-token"}
	if strings.Join(seen, "|") != strings.Join(want, "|") {
		t.Fatalf("requests %q, want %q", seen, want)
	}
	for _, s := range cred.scopes {
		if s != "https://storage.azure.com/.default" {
			t.Fatalf("token scope %q", s)
		}
	}
}
