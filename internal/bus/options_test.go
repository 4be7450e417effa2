package bus_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nkeys"

	"github.com/mapagg/mapagg/client"
	"github.com/mapagg/mapagg/internal/bus"
	"github.com/mapagg/mapagg/internal/harness/testenv"
)

// authServer starts an in-process NATS server with JetStream configured by opts (auth, TLS).
func authServer(t *testing.T, opts *server.Options) string {
	opts.JetStream = true
	return testenv.NATSServer(t, opts).ClientURL()
}

// connectAndEnsure connects with a and creates the streams (a real JetStream API round trip).
func connectAndEnsure(url string, a client.NATSAuth) error {
	opts, err := a.Options()
	if err != nil {
		return err
	}
	b, err := bus.Connect(url, "auth-test", bus.Config{}, opts...)
	if err != nil {
		return err
	}
	defer b.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return b.Ensure(ctx)
}

func writeFile(t *testing.T, name string, data []byte) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, data, 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// refused wants a permanent error that shows none of the secrets.
func refused(t *testing.T, err error, secrets ...string) {
	t.Helper()
	if err == nil {
		t.Fatal("accepted")
	}
	if !bus.Permanent(err) {
		t.Errorf("error %v is not Permanent: the worker would retry it until the startup timeout", err)
	}
	for _, s := range secrets {
		if s != "" && strings.Contains(err.Error(), s) {
			t.Fatalf("error shows a secret: %v", err)
		}
	}
}

func TestNATSAuth_UserPassword(t *testing.T) {
	url := authServer(t, &server.Options{Users: []*server.User{{Username: "worker", Password: "right-pa55"}}})
	if err := connectAndEnsure(url, client.NATSAuth{User: "worker", Password: "right-pa55"}); err != nil {
		t.Fatal(err)
	}
	err := connectAndEnsure(url, client.NATSAuth{User: "worker", Password: "wr0ng-pa55"})
	refused(t, err, "wr0ng-pa55", "right-pa55")
	if !strings.Contains(err.Error(), "Authorization Violation") {
		t.Fatalf("error %v does not say the credentials were refused", err)
	}
	refused(t, connectAndEnsure(url, client.NATSAuth{}))
}

func TestNATSAuth_NKeySeedFile(t *testing.T) {
	user, _ := nkeys.CreateUser()
	pub, _ := user.PublicKey()
	seed, _ := user.Seed()
	other, _ := nkeys.CreateUser()
	otherSeed, _ := other.Seed()
	url := authServer(t, &server.Options{Nkeys: []*server.NkeyUser{{Nkey: pub}}})
	if err := connectAndEnsure(url, client.NATSAuth{NKeySeedFile: writeFile(t, "seed", seed)}); err != nil {
		t.Fatal(err)
	}
	refused(t, connectAndEnsure(url, client.NATSAuth{NKeySeedFile: writeFile(t, "other", otherSeed)}), string(otherSeed), string(seed))
	_, err := client.NATSAuth{NKeySeedFile: writeFile(t, "junk", []byte("SUNOTASEED"))}.Options()
	if err == nil || strings.Contains(err.Error(), "SUNOTASEED") {
		t.Fatalf("junk seed: %v", err)
	}
}

func TestNATSAuth_CredsFile(t *testing.T) {
	op, _ := nkeys.CreateOperator()
	opPub, _ := op.PublicKey()
	oc := jwt.NewOperatorClaims(opPub)
	oc.Name = "test-operator"
	opJWT, err := oc.Encode(op)
	if err != nil {
		t.Fatal(err)
	}
	opClaims, err := jwt.DecodeOperatorClaims(opJWT)
	if err != nil {
		t.Fatal(err)
	}
	account := func(jetStream bool) (nkeys.KeyPair, string, string) {
		kp, _ := nkeys.CreateAccount()
		pub, _ := kp.PublicKey()
		ac := jwt.NewAccountClaims(pub)
		if jetStream {
			ac.Limits.JetStreamLimits = jwt.JetStreamLimits{MemoryStorage: -1, DiskStorage: -1, Streams: -1, Consumer: -1}
		}
		j, err := ac.Encode(op)
		if err != nil {
			t.Fatal(err)
		}
		return kp, pub, j
	}
	_, sysPub, sysJWT := account(false)
	accKP, accPub, accJWT := account(true)
	resolver := &server.MemAccResolver{}
	if err := resolver.Store(sysPub, sysJWT); err != nil {
		t.Fatal(err)
	}
	if err := resolver.Store(accPub, accJWT); err != nil {
		t.Fatal(err)
	}
	url := authServer(t, &server.Options{TrustedOperators: []*jwt.OperatorClaims{opClaims}, AccountResolver: resolver, SystemAccount: sysPub})

	creds := func(signer nkeys.KeyPair) ([]byte, string) {
		u, _ := nkeys.CreateUser()
		upub, _ := u.PublicKey()
		useed, _ := u.Seed()
		uj, err := jwt.NewUserClaims(upub).Encode(signer)
		if err != nil {
			t.Fatal(err)
		}
		c, err := jwt.FormatUserConfig(uj, useed)
		if err != nil {
			t.Fatal(err)
		}
		return c, string(useed)
	}
	good, _ := creds(accKP)
	if err := connectAndEnsure(url, client.NATSAuth{CredsFile: writeFile(t, "good.creds", good)}); err != nil {
		t.Fatal(err)
	}
	stranger, _ := nkeys.CreateAccount() // an account the operator never signed
	bad, badSeed := creds(stranger)
	refused(t, connectAndEnsure(url, client.NATSAuth{CredsFile: writeFile(t, "bad.creds", bad)}), badSeed)
}

// tlsFiles writes a throwaway CA, a server certificate for 127.0.0.1 and a client certificate,
// all signed by the CA.
type tlsFiles struct{ ca, serverCert, serverKey, clientCert, clientKey string }

func makeTLS(t *testing.T) tlsFiles {
	t.Helper()
	caKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "mapagg test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(caDER)
	leaf := func(name string, serial int64, usage x509.ExtKeyUsage) (string, string) {
		k, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		tmpl := &x509.Certificate{SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: name},
			NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
			KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{usage}, IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &k.PublicKey, caKey)
		if err != nil {
			t.Fatal(err)
		}
		kb, _ := x509.MarshalECPrivateKey(k)
		return writeFile(t, name+".pem", pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})),
			writeFile(t, name+"-key.pem", pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb}))
	}
	f := tlsFiles{ca: writeFile(t, "ca.pem", pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}))}
	f.serverCert, f.serverKey = leaf("server", 2, x509.ExtKeyUsageServerAuth)
	f.clientCert, f.clientKey = leaf("client", 3, x509.ExtKeyUsageClientAuth)
	return f
}

func TestNATSAuth_TLSAndMutualTLS(t *testing.T) {
	f := makeTLS(t)
	other := makeTLS(t) // a CA the server's certificate does not chain to
	tc, err := server.GenTLSConfig(&server.TLSConfigOpts{CertFile: f.serverCert, KeyFile: f.serverKey, CaFile: f.ca, Verify: true})
	if err != nil {
		t.Fatal(err)
	}
	url := authServer(t, &server.Options{TLSConfig: tc, TLSVerify: true, TLSTimeout: 5})
	url = strings.Replace(url, "nats://", "tls://", 1)

	if err := connectAndEnsure(url, client.NATSAuth{TLSCAFile: f.ca, TLSCertFile: f.clientCert, TLSKeyFile: f.clientKey}); err != nil {
		t.Fatal(err)
	}
	// The server's certificate is not from the CA we trust: refused, naming the authority problem.
	err = connectAndEnsure(url, client.NATSAuth{TLSCAFile: other.ca, TLSCertFile: other.clientCert, TLSKeyFile: other.clientKey})
	refused(t, err)
	var unknown x509.UnknownAuthorityError
	var verify *tls.CertificateVerificationError
	if !errors.As(err, &unknown) && !errors.As(err, &verify) {
		t.Fatalf("wrong CA: %v", err)
	}
	// No client certificate where the server requires one: refused.
	err = connectAndEnsure(url, client.NATSAuth{TLSCAFile: f.ca})
	if err == nil {
		t.Fatal("connected without a client certificate")
	}
	// A certificate with a key that is not its own: refused before connecting.
	if err := (client.NATSAuth{TLSCertFile: f.clientCert, TLSKeyFile: other.clientKey}).Validate(); err == nil ||
		!strings.Contains(err.Error(), "not a matching PEM certificate and key") {
		t.Fatalf("mismatched key: %v", err)
	}
}

func TestNATSAuth_ValidateReportsEveryProblem(t *testing.T) {
	err := client.NATSAuth{CredsFile: "/nonexistent/x.creds", User: "u", TLSCertFile: "c.pem"}.Validate()
	if err == nil {
		t.Fatal("accepted")
	}
	for _, w := range []string{"more than one of --nats-creds", "has no password", "go together", "--nats-creds /nonexistent/x.creds: cannot read it"} {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("error %q lacks %q", err, w)
		}
	}
	if err := (client.NATSAuth{Password: "s3cret"}).Validate(); err == nil || strings.Contains(err.Error(), "s3cret") {
		t.Fatalf("password without user: %v", err)
	}
}
