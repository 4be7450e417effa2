package node

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const (
	testSecretConn = "DefaultEndpointsProtocol=https;AccountName=acct;AccountKey=S3CRETKEdGVzdA==;EndpointSuffix=core.windows.net"
	testSecretSAS  = "sv=2021-08-06&ss=bq&srt=sco&sp=rwdlacup&se=2030-01-01T00:00:00Z&sig=S3CRETSIG"
)

// runRefused runs args and wants a usage refusal (exit 2) whose message has every want and no secret.
func runRefused(t *testing.T, args []string, want ...string) {
	t.Helper()
	var out, errb bytes.Buffer
	code := stockNode().Run(context.Background(), args, &out, &errb)
	if code != 2 {
		t.Fatalf("%v: exit %d, want 2 (stderr %s)", args, code, errb.String())
	}
	msg := errb.String() + out.String()
	for _, w := range want {
		if !strings.Contains(msg, w) {
			t.Errorf("%v: message lacks %q:\n%s", args, w, msg)
		}
	}
	for _, s := range []string{"S3CRET", "hunter2"} {
		if strings.Contains(msg, s) {
			t.Errorf("%v: message shows a secret:\n%s", args, msg)
		}
	}
}

func TestStorageFlags_BadCombinationsRefusedOnEveryCommand(t *testing.T) {
	for _, cmd := range []string{"run", "submit", "status"} {
		args := func(a ...string) []string {
			a = append([]string{cmd}, a...)
			if cmd == "submit" {
				a = append(a, "--type", "primes", "--params", `{"to":10,"shards":1}`)
			}
			if cmd == "status" {
				a = append(a, "job-1")
			}
			return a
		}
		t.Run(cmd, func(t *testing.T) {
			runRefused(t, args("--azure-connection-string", testSecretConn, "--storage-account-url", "https://acct.blob.core.windows.net"),
				"both a connection string and an account URL", "drop --azure-connection-string")
			runRefused(t, args(), "no storage account", "--storage-account-url", "AZURE_STORAGE_CONNECTION_STRING")
			runRefused(t, args("--storage-account-url", "https://acct.blob.core.windows.net/?"+testSecretSAS), "--storage-sas-file")
			runRefused(t, args("--storage-account-url", "https://acct.blob.core.windows.net", "--nats-url", "nats://u:hunter2@127.0.0.1:4222"),
				"carries credentials", "NATS_PASSWORD")
			runRefused(t, args("--storage-account-url", "https://acct.blob.core.windows.net", "--stream-replicas", "7"), "--stream-replicas 7")
			runRefused(t, args("--storage-account-url", "https://acct.blob.core.windows.net", "--nats-user", "u"), "has no password")
			runRefused(t, args("--storage-account-url", "https://acct.blob.core.windows.net", "--nats-tls-cert", "/nonexistent/c.pem"),
				"--nats-tls-cert and --nats-tls-key go together", "cannot read it")
		})
	}
}

func TestStorageFlags_SecretsFromEnvironmentAndFiles(t *testing.T) {
	dir := t.TempDir()
	sasFile := filepath.Join(dir, "sas")
	if err := os.WriteFile(sasFile, []byte(testSecretSAS+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("STORAGE_ACCOUNT_URL", "https://acct.blob.core.windows.net")
	t.Setenv(envSASToken, testSecretSAS)
	// Both a SAS file and the SAS variable: refused, naming both, showing neither.
	runRefused(t, []string{"status", "--storage-sas-file", sasFile, "--stream-replicas", "0", "x"},
		"both --storage-sas-file and AZURE_STORAGE_SAS_TOKEN", "--stream-replicas 0")
	// The environment alone sets the SAS; the file alone too.
	for _, tc := range []struct {
		env  string
		args []string
	}{{testSecretSAS, nil}, {"", []string{"--storage-sas-file", sasFile}}} {
		t.Setenv(envSASToken, tc.env)
		f := stockNode().newRunFlags()
		if err := f.fs.parse(tc.args); err != nil {
			t.Fatal(err)
		}
		if err := f.check(); err != nil {
			t.Fatal(err)
		}
		if f.account.SASToken != testSecretSAS {
			t.Fatalf("SAS %q", f.account.SASToken)
		}
		st, _ := f.describe()
		if !strings.Contains(st, "sas (blob https://acct.blob.core.windows.net, queue https://acct.queue.core.windows.net)") || strings.Contains(st, "S3CRET") {
			t.Fatalf("description %q", st)
		}
	}
	// The NATS password from a file (trailing newline dropped) or the environment.
	pw := filepath.Join(dir, "pw")
	if err := os.WriteFile(pw, []byte("hunter2\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	f := stockNode().newRunFlags()
	if err := f.fs.parse([]string{"--nats-user", "w", "--nats-password-file", pw}); err != nil {
		t.Fatal(err)
	}
	if err := f.check(); err != nil || f.natsAuth.Password != "hunter2" {
		t.Fatalf("password %q, %v", f.natsAuth.Password, err)
	}
	if _, n := f.describe(); n != "user w" {
		t.Fatalf("nats description %q", n)
	}
	t.Setenv(envNATSPassword, "hunter2")
	runRefused(t, []string{"status", "--nats-user", "w", "--nats-password-file", pw, "x"}, "both --nats-password-file and NATS_PASSWORD")
}

func TestStorageFlags_WorkerEnvListsEverySetting(t *testing.T) {
	var out, errb bytes.Buffer
	if code := stockNode().Run(context.Background(), []string{"env"}, &out, &errb); code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	for _, v := range []string{"AZURE_STORAGE_CONNECTION_STRING", "STORAGE_ACCOUNT_URL", "STORAGE_QUEUE_URL", "STORAGE_SAS_FILE",
		envSASToken, "NATS_CREDS", "NATS_NKEY_FILE", "NATS_USER", envNATSPassword, "NATS_PASSWORD_FILE", "NATS_TLS_CA",
		"NATS_TLS_CERT", "NATS_TLS_KEY", "STREAM_REPLICAS", "STREAM_STORAGE"} {
		if !strings.Contains(out.String(), v+" ") {
			t.Errorf("worker env lacks %s", v)
		}
	}
	var help bytes.Buffer
	stockNode().Run(context.Background(), []string{"run", "--help"}, &help, &help)
	for _, f := range []string{"-storage-account-url", "-storage-sas-file", "-nats-creds", "-nats-tls-ca", "-stream-replicas"} {
		if !strings.Contains(help.String(), f) {
			t.Errorf("run --help lacks %s", f)
		}
	}
}
