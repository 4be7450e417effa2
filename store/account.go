package store

import (
	"cmp"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"strings"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"github.com/Azure/azure-sdk-for-go/sdk/azidentity"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azqueue"
)

// Auth is how an Account authenticates.
type Auth string

// The three ways to reach an account.
const (
	// AuthConnectionString: a connection string (account key or an embedded SAS). Azurite uses it.
	AuthConnectionString Auth = "connection-string"
	// AuthSAS: endpoint URLs plus a SAS token.
	AuthSAS Auth = "sas"
	// AuthEntraID: endpoint URLs plus a Microsoft Entra ID token from
	// azidentity.DefaultAzureCredential (environment service principal, workload identity, managed
	// identity, Azure CLI, in that order), or from Account.Credential when set.
	AuthEntraID Auth = "entra-id"
)

// Account says how to reach one Azure Storage account. Exactly one of ConnectionString and BlobURL
// is set; SASToken goes with BlobURL only. The blob client (jobs container, lease container, job
// Env) and the queue client are both built from it (Open), so they always authenticate the same way.
//
// ConnectionString and SASToken are secrets: String and LogValue never show them, and no error
// from this file contains them.
type Account struct {
	// ConnectionString of the account (secret). Flag --azure-connection-string.
	ConnectionString string
	// BlobURL is the blob endpoint, https://<account>.blob.core.windows.net (a path such as
	// /devstoreaccount1 is kept). Flag --storage-account-url.
	BlobURL string
	// QueueURL is the queue endpoint. Empty derives it from BlobURL by replacing the host's
	// ".blob." label with ".queue.". Flag --storage-queue-url.
	QueueURL string
	// SASToken (secret) authenticates requests to BlobURL and QueueURL instead of Entra ID. It
	// must grant blob (containers and objects) and queue access. Read it from a file or the
	// environment, never from a command-line argument.
	SASToken string
	// Credential replaces DefaultAzureCredential for AuthEntraID (embedders, tests).
	Credential azcore.TokenCredential
	// Transport replaces the HTTP transport of both clients (tests).
	Transport policy.Transporter
	// TransientRetryFor is how long a request the account answers with a transient failure
	// (unavailable, server busy, a full disk) is tried again, with backoff, before it fails.
	// Default (0) DefaultTransientRetryFor, 3m; negative: not at all (the SDK's three quick
	// tries only). Flag --storage-retry-for.
	TransientRetryFor time.Duration
	// DataRequests bounds the data plane's requests in flight at once in this process (a
	// request holds its slot until its response's headers are in, never while its body is
	// read). Default (0) DefaultDataRequests.
	DataRequests int
}

// Auth reports which way the account authenticates. Meaningful once Validate passes.
func (a Account) Auth() Auth {
	switch {
	case a.ConnectionString != "":
		return AuthConnectionString
	case a.SASToken != "":
		return AuthSAS
	default:
		return AuthEntraID
	}
}

// Validate reports every problem with the settings and what to change. It never echoes a secret.
func (a Account) Validate() error {
	var errs []error
	add := func(format string, args ...any) { errs = append(errs, fmt.Errorf("storage: "+format, args...)) }
	hasURL := a.BlobURL != "" || a.QueueURL != ""
	switch {
	case a.ConnectionString != "" && hasURL:
		add("both a connection string and an account URL are set: drop --azure-connection-string " +
			"(env AZURE_STORAGE_CONNECTION_STRING) to use the account URL with Entra ID or a SAS, or drop " +
			"--storage-account-url/--storage-queue-url (env STORAGE_ACCOUNT_URL/STORAGE_QUEUE_URL) to use the connection string")
	case a.ConnectionString == "" && !hasURL:
		add("no storage account: pass --storage-account-url https://<account>.blob.core.windows.net " +
			"(env STORAGE_ACCOUNT_URL; Entra ID, or a SAS from --storage-sas-file or AZURE_STORAGE_SAS_TOKEN) " +
			"or --azure-connection-string (env AZURE_STORAGE_CONNECTION_STRING, Azurite and account keys)")
	}
	if a.ConnectionString != "" && a.SASToken != "" {
		add("a SAS token and a connection string are both set: use the SAS with --storage-account-url, " +
			"or put it in the connection string (SharedAccessSignature=...) and drop --storage-sas-file/AZURE_STORAGE_SAS_TOKEN")
	}
	if a.DataRequests < 0 {
		add("DataRequests %d: use a positive number, or 0 for the default (%d)", a.DataRequests, DefaultDataRequests())
	}
	if a.ConnectionString == "" && a.BlobURL == "" && a.QueueURL != "" {
		add("--storage-queue-url is set without --storage-account-url: pass the blob endpoint too")
	}
	if a.ConnectionString == "" && strings.ContainsAny(strings.TrimPrefix(strings.TrimSpace(a.SASToken), "?"), " \t\n?") {
		add("the SAS token is malformed (whitespace or a second '?'): put the token alone, as Azure shows it, in the file or variable")
	}
	entra := a.ConnectionString == "" && a.SASToken == ""
	for _, e := range []struct{ flag, val string }{{"--storage-account-url", a.BlobURL}, {"--storage-queue-url", a.QueueURL}} {
		if e.val == "" {
			continue
		}
		if err := checkEndpoint(e.val, entra); err != "" {
			add("%s: %s", e.flag, err)
		}
	}
	if a.ConnectionString == "" && a.BlobURL != "" && a.QueueURL == "" && checkEndpoint(a.BlobURL, entra) == "" {
		if _, ok := deriveQueueURL(a.BlobURL); !ok {
			add("cannot derive the queue endpoint from --storage-account-url (its host has no .blob. label): pass --storage-queue-url")
		}
	}
	return errors.Join(errs...)
}

// checkEndpoint returns what is wrong with an endpoint URL, or "". The URL itself is shown only
// without its query (which could hold a SAS).
func checkEndpoint(raw string, entra bool) string {
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" || (u.Scheme != "https" && u.Scheme != "http") {
		return "not an http(s) URL with a host; use https://<account>.blob.core.windows.net"
	}
	if u.RawQuery != "" || u.User != nil {
		return "the URL carries a query or user info (a SAS?): give the bare endpoint and the SAS through --storage-sas-file or AZURE_STORAGE_SAS_TOKEN"
	}
	if entra && u.Scheme != "https" {
		return fmt.Sprintf("Entra ID tokens are only sent over https, but %s://%s is http: use https or a SAS", u.Scheme, u.Host)
	}
	return ""
}

// deriveQueueURL replaces the first ".blob." label of the host with ".queue.".
func deriveQueueURL(blobURL string) (string, bool) {
	u, err := url.Parse(blobURL)
	if err != nil {
		return "", false
	}
	host := u.Hostname()
	i := strings.Index(host, ".blob.")
	if i < 0 {
		return "", false
	}
	u.Host = strings.Replace(u.Host, ".blob.", ".queue.", 1)
	return u.String(), true
}

// Endpoints returns the blob and queue endpoint URLs (without any SAS); empty for a connection
// string.
func (a Account) Endpoints() (blobURL, queueURL string) {
	if a.ConnectionString != "" {
		return "", ""
	}
	queueURL = a.QueueURL
	if queueURL == "" {
		queueURL, _ = deriveQueueURL(a.BlobURL)
	}
	return a.BlobURL, queueURL
}

// String describes the account without secrets: the auth mode and the endpoints.
func (a Account) String() string {
	if a.ConnectionString != "" {
		return fmt.Sprintf("%s (%s)", AuthConnectionString, connStringEndpoint(a.ConnectionString))
	}
	b, q := a.Endpoints()
	return fmt.Sprintf("%s (blob %s, queue %s)", a.Auth(), b, q)
}

// LogValue keeps secrets out of structured logs.
func (a Account) LogValue() slog.Value { return slog.StringValue(a.String()) }

// connStringEndpoint names the blob endpoint or account of a connection string, nothing secret.
func connStringEndpoint(cs string) string {
	var name, ep string
	for _, part := range strings.Split(cs, ";") {
		k, v, _ := strings.Cut(part, "=")
		switch strings.TrimSpace(k) {
		case "BlobEndpoint":
			ep = v
		case "AccountName":
			name = v
		}
	}
	switch {
	case ep != "":
		return "blob " + ep
	case name != "":
		return "account " + name
	}
	return "account unknown"
}

// Clients are the blob and queue clients of one Account, sharing one credential.
//
// The control plane and the data plane never share a connection pool: lease renewals,
// heartbeats' storage side, checkpoints, specs and status records go through Control (and the
// queue), a Map's reads and a keyed job's runs and outputs through Data, whose requests in flight
// are bounded (Account.DataRequests). A saturated data plane can neither take the control plane's
// connections nor make its requests wait for a slot (design, "The control plane goes first").
type Clients struct {
	// Control is the control plane's blob client (Transport): the lease, checkpoints, specs,
	// status records, schedules.
	Control *azblob.Client
	// Blob is Control, under the name earlier callers use.
	Blob *azblob.Client
	// Data is the data plane's blob client, over a connection pool of its own (DataTransport)
	// and at most Account.DataRequests requests in flight: a Map's reads (the job Env), a keyed
	// job's runs and outputs.
	Data *azblob.Client

	acct     Account
	data     *limitedTransport
	queueURL string
	cred     azcore.TokenCredential
	sas      string
}

// Open validates the account and builds its blob client; queue clients come from Clients.Queue.
// With AuthEntraID and no Account.Credential it creates one DefaultAzureCredential (which does not
// contact Entra ID until the first request).
func (a Account) Open() (*Clients, error) {
	if err := a.Validate(); err != nil {
		return nil, err
	}
	c := &Clients{acct: a}
	switch a.Auth() {
	case AuthConnectionString:
	case AuthSAS:
		c.sas = strings.TrimPrefix(strings.TrimSpace(a.SASToken), "?")
	default:
		c.cred = a.Credential
		if c.cred == nil {
			cred, err := azidentity.NewDefaultAzureCredential(nil)
			if err != nil {
				return nil, fmt.Errorf("storage: Entra ID credential: %w", err)
			}
			c.cred = cred
		}
	}
	_, c.queueURL = a.Endpoints()
	var err error
	if c.Control, err = c.blobClient(clientOptions(Transport(), a.retryFor())); err != nil {
		return nil, err
	}
	c.Blob = c.Control
	var data policy.Transporter = DataTransport()
	if a.Transport != nil {
		data = a.Transport
	}
	c.data = newLimitedTransport(cmp.Or(a.DataRequests, DefaultDataRequests()), data)
	if c.Data, err = c.blobClient(clientOptions(c.data, a.retryFor())); err != nil {
		return nil, err
	}
	return c, nil
}

// retryFor is TransientRetryFor with its default applied (0 off).
func (a Account) retryFor() time.Duration {
	switch {
	case a.TransientRetryFor < 0:
		return 0
	case a.TransientRetryFor == 0:
		return DefaultTransientRetryFor
	}
	return a.TransientRetryFor
}

// RetryFor is how long a request meeting transient failures is tried again (0: not at all).
func (c *Clients) RetryFor() time.Duration { return c.acct.retryFor() }

// DataInFlight is how many data-plane requests are in flight now (at most Account.DataRequests).
func (c *Clients) DataInFlight() int { return c.data.InFlight() }

// blobClient builds a blob service client with opts (the Account's Transport replaces theirs,
// under the data plane's limit for Data).
func (c *Clients) blobClient(opts *azblob.ClientOptions) (*azblob.Client, error) {
	if _, limited := opts.Transport.(*limitedTransport); c.acct.Transport != nil && !limited {
		opts.Transport = c.acct.Transport
	}
	if c.acct.Auth() == AuthConnectionString {
		bc, err := azblob.NewClientFromConnectionString(c.acct.ConnectionString, opts)
		if err != nil {
			return nil, errors.New("blob client: the storage connection string is malformed (check AZURE_STORAGE_CONNECTION_STRING: DefaultEndpointsProtocol=...;AccountName=...;AccountKey=...;BlobEndpoint=...)")
		}
		return bc, nil
	}
	blobURL, _ := c.acct.Endpoints()
	var bc *azblob.Client
	var err error
	if c.cred != nil {
		bc, err = azblob.NewClient(blobURL, c.cred, opts)
	} else {
		bc, err = azblob.NewClientWithNoCredential(withSAS(blobURL, c.sas), opts)
	}
	if err != nil {
		return nil, fmt.Errorf("blob client for %s: %w", blobURL, err)
	}
	return bc, nil
}

// Auth is how these clients authenticate.
func (c *Clients) Auth() Auth { return c.acct.Auth() }

// Credential is the Entra ID credential, nil for a connection string or a SAS.
func (c *Clients) Credential() azcore.TokenCredential { return c.cred }

// String describes the account without secrets.
func (c *Clients) String() string { return c.acct.String() }

// Queue returns the client of queue name with opts (the Transport of the Account replaces opts').
func (c *Clients) Queue(name string, opts *azqueue.ClientOptions) (*azqueue.QueueClient, error) {
	if opts == nil {
		opts = &azqueue.ClientOptions{}
	}
	o := *opts
	if c.acct.Transport != nil {
		o.Transport = c.acct.Transport
	}
	o.PerCallPolicies = append(append([]policy.Policy(nil), o.PerCallPolicies...), transientPolicy{retryFor: c.acct.retryFor()})
	var (
		qc  *azqueue.QueueClient
		err error
	)
	switch {
	case c.acct.Auth() == AuthConnectionString:
		qc, err = azqueue.NewQueueClientFromConnectionString(c.acct.ConnectionString, name, &o)
		if err != nil {
			return nil, errors.New("queue client: the storage connection string is malformed (check AZURE_STORAGE_CONNECTION_STRING)")
		}
		return qc, nil
	case c.cred != nil:
		qc, err = azqueue.NewQueueClient(joinPath(c.queueURL, name), c.cred, &o)
	default:
		qc, err = azqueue.NewQueueClientWithNoCredential(withSAS(joinPath(c.queueURL, name), c.sas), &o)
	}
	if err != nil {
		return nil, fmt.Errorf("queue client for %s: %w", joinPath(c.queueURL, name), err)
	}
	return qc, nil
}

func joinPath(base, name string) string { return strings.TrimSuffix(base, "/") + "/" + name }

func withSAS(u, sas string) string {
	if sas == "" {
		return u
	}
	return u + "?" + sas
}
